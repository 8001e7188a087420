// Request keys and Action merging.
#include "infergate/operator/reconcile/reconciler.h"

namespace infergate::op::reconcile {

Request Request::from_key(std::string_view key) {
  auto slash = key.find('/');
  if (slash == std::string_view::npos) return Request{"", std::string(key)};
  return Request{std::string(key.substr(0, slash)), std::string(key.substr(slash + 1))};
}

Action Action::merge(const Action& other) const {
  if (!requeue_) return other;
  if (!other.requeue_) return *this;
  return *requeue_ <= *other.requeue_ ? *this : other;
}

}  // namespace infergate::op::reconcile
