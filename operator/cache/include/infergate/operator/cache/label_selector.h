// Kubernetes label selectors ("a=b,c!=d,e in (f,g),h,!i"): parsed once, matched against objects in
// the cache exactly as the API server matches them in a list.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/json.h"
#include "infergate/common/result.h"

namespace infergate::op::cache {

class LabelSelector {
 public:
  static Result<LabelSelector> parse(std::string_view text);
  // Matches an object's metadata.labels.
  bool matches(const Json& object) const;
  bool empty() const { return reqs_.empty(); }

 private:
  struct Req {
    enum Op { kEq, kNe, kIn, kNotIn, kExists, kNotExists };
    std::string key;
    Op op;
    std::vector<std::string> values;
  };
  std::vector<Req> reqs_;
};

}  // namespace infergate::op::cache
