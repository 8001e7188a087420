// The informer store.
#include "infergate/operator/cache/store.h"

#include <algorithm>
#include <mutex>

#include "infergate/operator/client/client.h"

namespace infergate::op::cache {

void Store::add_index(const std::string& name, IndexFn fn) {
  std::unique_lock lock(mu_);
  index_fns_[name] = std::move(fn);
  indexes_[name];
}

void Store::index_locked(const std::string& key, const Json& obj, bool add) {
  for (const auto& [name, fn] : index_fns_) {
    auto& idx = indexes_[name];
    for (const auto& value : fn(obj)) {
      auto& keys = idx[value];
      if (add) {
        keys.push_back(key);
      } else {
        keys.erase(std::remove(keys.begin(), keys.end(), key), keys.end());
        if (keys.empty()) idx.erase(value);
      }
    }
  }
}

Object Store::get(const std::string& key) const {
  std::shared_lock lock(mu_);
  auto it = objects_.find(key);
  return it == objects_.end() ? nullptr : it->second;
}

std::vector<Object> Store::list() const {
  std::shared_lock lock(mu_);
  std::vector<Object> out;
  out.reserve(objects_.size());
  for (const auto& [k, v] : objects_) out.push_back(v);
  return out;
}

std::vector<Object> Store::list_namespace(const std::string& ns) const {
  std::shared_lock lock(mu_);
  std::vector<Object> out;
  for (const auto& [k, v] : objects_) {
    if (ns.empty() || client::object_namespace(*v) == ns) out.push_back(v);
  }
  return out;
}

std::vector<Object> Store::by_index(const std::string& index, const std::string& value) const {
  std::shared_lock lock(mu_);
  std::vector<Object> out;
  auto idx = indexes_.find(index);
  if (idx == indexes_.end()) return out;
  auto it = idx->second.find(value);
  if (it == idx->second.end()) return out;
  for (const auto& key : it->second) {
    auto o = objects_.find(key);
    if (o != objects_.end()) out.push_back(o->second);
  }
  return out;
}

bool Store::has_index(const std::string& index) const {
  std::shared_lock lock(mu_);
  return index_fns_.count(index) > 0;
}

size_t Store::size() const {
  std::shared_lock lock(mu_);
  return objects_.size();
}

Object Store::upsert(Object obj) {
  std::unique_lock lock(mu_);
  std::string key = client::object_key(*obj);
  Object old;
  auto it = objects_.find(key);
  if (it != objects_.end()) {
    old = it->second;
    index_locked(key, *old, false);
    it->second = std::move(obj);
  } else {
    it = objects_.emplace(key, std::move(obj)).first;
  }
  index_locked(key, *it->second, true);
  return old;
}

Object Store::remove(const std::string& key) {
  std::unique_lock lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return nullptr;
  Object old = it->second;
  index_locked(key, *old, false);
  objects_.erase(it);
  return old;
}

std::vector<Object> Store::replace(std::vector<Object> objects) {
  std::unique_lock lock(mu_);
  std::unordered_map<std::string, Object> next;
  next.reserve(objects.size());
  for (auto& o : objects) next[client::object_key(*o)] = std::move(o);
  std::vector<Object> gone;
  for (const auto& [k, v] : objects_) {
    if (!next.count(k)) gone.push_back(v);
  }
  objects_ = std::move(next);
  for (auto& [name, idx] : indexes_) idx.clear();
  for (const auto& [k, v] : objects_) index_locked(k, *v, true);
  return gone;
}

}  // namespace infergate::op::cache
