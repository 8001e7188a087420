// A Client whose writes are allowed only while a predicate holds (the leader-election fence): a
// replica that has lost, or cannot prove, its lease stops writing at once, whatever its workers are
// doing. Reads and watches pass through.
#pragma once

#include <functional>

#include "infergate/operator/client/client.h"

namespace infergate::op::manager {

class LeaderGuard final : public client::Client {
 public:
  LeaderGuard(client::Client& inner, std::function<bool()> may_write)
      : inner_(inner), may_write_(std::move(may_write)) {}

  Result<Json> get(const client::ResourceKind& k, std::string_view ns, std::string_view name,
                   const client::GetOptions& o = {}) override {
    return inner_.get(k, ns, name, o);
  }
  Result<client::ObjectList> list(const client::ResourceKind& k, std::string_view ns,
                                  const client::ListOptions& o) override {
    return inner_.list(k, ns, o);
  }
  Result<std::unique_ptr<client::WatchStream>> watch(const client::ResourceKind& k, std::string_view ns,
                                                     const client::WatchOptions& o) override {
    return inner_.watch(k, ns, o);
  }
  Result<Json> create(const client::ResourceKind& k, const Json& obj) override {
    INFERGATE_RETURN_IF_ERROR(check());
    return inner_.create(k, obj);
  }
  Result<Json> update(const client::ResourceKind& k, const Json& obj) override {
    INFERGATE_RETURN_IF_ERROR(check());
    return inner_.update(k, obj);
  }
  Result<Json> update_status(const client::ResourceKind& k, const Json& obj) override {
    INFERGATE_RETURN_IF_ERROR(check());
    return inner_.update_status(k, obj);
  }
  Result<Json> patch(const client::ResourceKind& k, std::string_view ns, std::string_view name,
                     client::PatchType t, const Json& p, const client::PatchOptions& o = {}) override {
    INFERGATE_RETURN_IF_ERROR(check());
    return inner_.patch(k, ns, name, t, p, o);
  }
  Status remove(const client::ResourceKind& k, std::string_view ns, std::string_view name,
                const client::DeleteOptions& o = {}) override {
    INFERGATE_RETURN_IF_ERROR(check());
    return inner_.remove(k, ns, name, o);
  }

 private:
  Status check() const {
    if (may_write_()) return ok_status();
    return Error(ErrorCode::kFailedPrecondition, "not the leader: writes are fenced off", "NotLeader");
  }
  client::Client& inner_;
  std::function<bool()> may_write_;
};

}  // namespace infergate::op::manager
