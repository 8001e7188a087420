// Reads from informer stores.
#include "infergate/operator/cache/informer_cache.h"

#include <thread>

#include "infergate/operator/cache/label_selector.h"

namespace infergate::op::cache {

InformerCache::InformerCache(client::Client& client, Clock& clock) : client_(client), clock_(clock) {}

InformerCache::~InformerCache() { stop(); }

Informer& InformerCache::add(const client::ResourceKind& kind, InformerConfig config) {
  auto& slot = informers_[kind.resource()];
  if (!slot) slot = std::make_unique<Informer>(client_, kind, std::move(config), clock_);
  return *slot;
}

Informer* InformerCache::informer(const client::ResourceKind& kind) {
  auto it = informers_.find(kind.resource());
  return it == informers_.end() ? nullptr : it->second.get();
}

void InformerCache::start() {
  for (auto& [k, inf] : informers_) inf->start();
}

void InformerCache::stop() {
  for (auto& [k, inf] : informers_) inf->stop();
}

bool InformerCache::has_synced() const {
  for (const auto& [k, inf] : informers_) {
    if (!inf->has_synced()) return false;
  }
  return true;
}

bool InformerCache::wait_for_sync(std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!has_synced()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

Object InformerCache::get_object(const client::ResourceKind& kind, std::string_view ns,
                                 std::string_view name) {
  Informer* inf = informer(kind);
  if (!inf) return nullptr;
  return inf->store().get(ns.empty() ? std::string(name) : std::string(ns) + "/" + std::string(name));
}

Result<Json> InformerCache::get(const client::ResourceKind& kind, std::string_view ns, std::string_view name,
                                const client::GetOptions&) {
  if (!informer(kind)) return failed_precondition("no informer caches " + kind.resource());
  Object o = get_object(kind, ns, name);
  if (!o) {
    return Error(ErrorCode::kNotFound,
                 kind.resource() + " \"" + std::string(name) + "\" not found in the cache", "NotFound");
  }
  return *o;
}

Result<std::vector<Object>> InformerCache::list_objects(const client::ResourceKind& kind, std::string_view ns,
                                                        std::string_view label_selector) {
  Informer* inf = informer(kind);
  if (!inf) return failed_precondition("no informer caches " + kind.resource());
  INFERGATE_ASSIGN_OR_RETURN(LabelSelector sel, LabelSelector::parse(label_selector));
  std::vector<Object> out;
  for (auto& o : inf->store().list_namespace(std::string(ns))) {
    if (sel.matches(*o)) out.push_back(std::move(o));
  }
  return out;
}

Result<std::vector<Object>> InformerCache::list_indexed(const client::ResourceKind& kind, std::string_view ns,
                                                        const std::string& index, const std::string& value,
                                                        std::string_view label_selector) {
  Informer* inf = informer(kind);
  if (!inf) return failed_precondition("no informer caches " + kind.resource());
  if (!inf->store().has_index(index)) return list_objects(kind, ns, label_selector);
  INFERGATE_ASSIGN_OR_RETURN(LabelSelector sel, LabelSelector::parse(label_selector));
  std::vector<Object> out;
  for (auto& o : inf->store().by_index(index, value)) {
    if ((ns.empty() || client::object_namespace(*o) == ns) && sel.matches(*o)) out.push_back(std::move(o));
  }
  return out;
}

Result<client::ObjectList> InformerCache::list(const client::ResourceKind& kind, std::string_view ns,
                                               const client::ListOptions& options) {
  if (!options.field_selector.empty()) return unimplemented("the cache does not evaluate field selectors");
  INFERGATE_ASSIGN_OR_RETURN(auto objects, list_objects(kind, ns, options.label_selector));
  client::ObjectList out;
  out.items.reserve(objects.size());
  for (const auto& o : objects) out.items.push_back(*o);
  return out;
}

}  // namespace infergate::op::cache
