// The informer's store: the latest version of every object of one kind, keyed "ns/name", with
// secondary indexes (e.g. pods by the model label). Readers get immutable snapshots (shared_ptr to
// const JSON), so a reconcile can hold an object while the informer replaces it. Thread-safe; only
// the informer writes (the writer/reader split of kube-rs' reflector).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "infergate/common/json.h"

namespace infergate::op::cache {

using Object = std::shared_ptr<const Json>;
using IndexFn = std::function<std::vector<std::string>(const Json&)>;

class Store {
 public:
  // Adds an index; only before the first write.
  void add_index(const std::string& name, IndexFn fn);

  Object get(const std::string& key) const;
  std::vector<Object> list() const;
  std::vector<Object> list_namespace(const std::string& ns) const;
  std::vector<Object> by_index(const std::string& index, const std::string& value) const;
  bool has_index(const std::string& index) const;
  size_t size() const;

  // Writer side. Each returns the previous version (null if none).
  Object upsert(Object obj);
  Object remove(const std::string& key);
  // Replaces everything (a re-list). Returns the objects that were present before and are gone now.
  std::vector<Object> replace(std::vector<Object> objects);

 private:
  void index_locked(const std::string& key, const Json& obj, bool add);
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, Object> objects_;
  std::map<std::string, IndexFn> index_fns_;
  // index name -> value -> keys
  std::map<std::string, std::unordered_map<std::string, std::vector<std::string>>> indexes_;
};

}  // namespace infergate::op::cache
