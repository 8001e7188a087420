// The cache the reconcilers read from (controller-runtime's cache is a client.Reader): informers per
// kind, one for every namespace or one per watched namespace (what least-privilege RBAC allows: a
// Role in each namespace, no cluster-wide list or watch), reads answered from the store of the
// informer that holds the namespace. Writes go to the API server through the client, never here.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "infergate/operator/cache/informer.h"
#include "infergate/operator/client/client.h"

namespace infergate::op::cache {

class InformerCache final : public client::Reader {
 public:
  InformerCache(client::Client& client, Clock& clock);
  ~InformerCache() override;

  // Adds an informer for a kind in config.watcher.namespace_ ("" = all), before start(); adding the
  // same kind and namespace again returns the first. Returns it so that handlers and indexes can be
  // added.
  Informer& add(const client::ResourceKind& kind, InformerConfig config);
  // The informer holding `ns` for this kind (its own, or the all-namespaces one); with ns "", the
  // first of the kind. Null when none.
  Informer* informer(const client::ResourceKind& kind, std::string_view ns = "");
  std::vector<Informer*> informers(const client::ResourceKind& kind);

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
  // Cached objects of a kind in a namespace ("" = every watched one) whose labels match (no copies).
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
  // by ResourceKind::resource(), one per watched namespace
  std::map<std::string, std::vector<std::unique_ptr<Informer>>> informers_;
};

}  // namespace infergate::op::cache
