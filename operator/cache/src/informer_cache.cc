// Reads from informer stores.
#include "infergate/operator/cache/informer_cache.h"

#include <thread>

#include "infergate/operator/cache/label_selector.h"

namespace infergate::op::cache {

InformerCache::InformerCache(client::Client& client, Clock& clock) : client_(client), clock_(clock) {}

InformerCache::~InformerCache() { stop(); }

Informer& InformerCache::add(const client::ResourceKind& kind, InformerConfig config) {
  auto& slot = informers_[kind.resource()];
  for (auto& inf : slot) {
    if (inf->watched_namespace() == config.watcher.namespace_) return *inf;
  }
  slot.push_back(std::make_unique<Informer>(client_, kind, std::move(config), clock_));
  return *slot.back();
}

Informer* InformerCache::informer(const client::ResourceKind& kind, std::string_view ns) {
  auto it = informers_.find(kind.resource());
  if (it == informers_.end() || it->second.empty()) return nullptr;
  if (ns.empty()) return it->second.front().get();
  for (auto& inf : it->second) {
    if (inf->watched_namespace().empty() || inf->watched_namespace() == ns) return inf.get();
  }
  return nullptr;
}

std::vector<Informer*> InformerCache::informers(const client::ResourceKind& kind) {
  std::vector<Informer*> out;
  if (auto it = informers_.find(kind.resource()); it != informers_.end()) {
    for (auto& inf : it->second) out.push_back(inf.get());
  }
  return out;
}

void InformerCache::start() {
  for (auto& [k, infs] : informers_) {
    for (auto& inf : infs) inf->start();
  }
}

void InformerCache::stop() {
  for (auto& [k, infs] : informers_) {
    for (auto& inf : infs) inf->stop();
  }
}

bool InformerCache::has_synced() const {
  for (const auto& [k, infs] : informers_) {
    for (const auto& inf : infs) {
      if (!inf->has_synced()) return false;
    }
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
  Informer* inf = informer(kind, ns);
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

// The informers that hold `ns` ("" = all of the kind's).
namespace {
std::vector<Informer*> holding(InformerCache& cache, const client::ResourceKind& kind, std::string_view ns) {
  if (ns.empty()) return cache.informers(kind);
  Informer* inf = cache.informer(kind, ns);
  return inf ? std::vector<Informer*>{inf} : std::vector<Informer*>{};
}
}  // namespace

Result<std::vector<Object>> InformerCache::list_objects(const client::ResourceKind& kind, std::string_view ns,
                                                        std::string_view label_selector) {
  if (!informer(kind)) return failed_precondition("no informer caches " + kind.resource());
  INFERGATE_ASSIGN_OR_RETURN(LabelSelector sel, LabelSelector::parse(label_selector));
  std::vector<Object> out;
  for (Informer* inf : holding(*this, kind, ns)) {
    for (auto& o : inf->store().list_namespace(std::string(ns))) {
      if (sel.matches(*o)) out.push_back(std::move(o));
    }
  }
  return out;
}

Result<std::vector<Object>> InformerCache::list_indexed(const client::ResourceKind& kind, std::string_view ns,
                                                        const std::string& index, const std::string& value,
                                                        std::string_view label_selector) {
  if (!informer(kind)) return failed_precondition("no informer caches " + kind.resource());
  const std::vector<Informer*> infs = holding(*this, kind, ns);
  for (Informer* inf : infs) {
    if (!inf->store().has_index(index)) return list_objects(kind, ns, label_selector);
  }
  INFERGATE_ASSIGN_OR_RETURN(LabelSelector sel, LabelSelector::parse(label_selector));
  std::vector<Object> out;
  for (Informer* inf : infs) {
    for (auto& o : inf->store().by_index(index, value)) {
      if ((ns.empty() || client::object_namespace(*o) == ns) && sel.matches(*o)) out.push_back(std::move(o));
    }
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
