// The cache the reconcilers read from (controller-runtime's cache is a client.Reader): one informer per
// kind, reads answered from their stores. Writes go to the API server through the client, never here.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "infergate/operator/cache/informer.h"
#include "infergate/operator/client/client.h"

namespace infergate::op::cache {

class InformerCache final : public client::Reader {
 public:
  InformerCache(client::Client& client, Clock& clock);
  ~InformerCache() override;

  // Adds an informer for a kind (before start()). Returns it so that handlers and indexes can be added.
  Informer& add(const client::ResourceKind& kind, InformerConfig config);
  Informer* informer(const client::ResourceKind& kind);

  void start();
  void stop();
  bool has_synced() const;
  // Waits (real time) for every informer's first list; false on timeout.
  bool wait_for_sync(std::chrono::milliseconds limit);

  // client::Reader: from the store. A kind without an informer is FailedPrecondition.
  Result<Json> get(const client::ResourceKind& kind, std::string_view ns, std::string_view name,
                   const client::GetOptions& options = {}) override;
  Result<client::ObjectList> list(const client::ResourceKind& kind, std::string_view ns,
                                  const client::ListOptions& options) override;
  // The immutable cached object (no copy), or null.
  Object get_object(const client::ResourceKind& kind, std::string_view ns, std::string_view name);
  // Cached objects of a kind in a namespace whose labels match (no copies).
  Result<std::vector<Object>> list_objects(const client::ResourceKind& kind, std::string_view ns,
                                           std::string_view label_selector);
  // Cached objects of a kind under one value of a store index (see Store::add_index), filtered by
  // the label selector; falls back to a namespace scan when the informer has no such index.
  Result<std::vector<Object>> list_indexed(const client::ResourceKind& kind, std::string_view ns,
                                           const std::string& index, const std::string& value,
                                           std::string_view label_selector);

 private:
  client::Client& client_;
  Clock& clock_;
  std::map<std::string, std::unique_ptr<Informer>> informers_;  // by ResourceKind::resource()
};

}  // namespace infergate::op::cache
