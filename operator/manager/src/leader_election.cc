// Lease-based leader election.
#include "infergate/operator/manager/leader_election.h"

#include <random>

#include "infergate/common/log.h"

namespace infergate::op::manager {

std::string format_micro_time(WallTime t) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count() % 1000000;
  if (us < 0) us += 1000000;
  std::string s = format_rfc3339(std::chrono::time_point_cast<std::chrono::seconds>(t));
  char frac[16];
  (void)std::snprintf(frac, sizeof frac, ".%06lld", static_cast<long long>(us));
  return s.substr(0, s.size() - 1) + frac + "Z";
}

Status validate(const LeaderElectionConfig& c) {
  if (c.identity.empty()) return invalid_argument("leader election: the identity is empty");
  if (c.name.empty() || c.namespace_.empty())
    return invalid_argument("leader election: the lease needs a name and namespace");
  if (c.retry_period.count() <= 0)
    return invalid_argument("leader election: the retry period must be positive");
  if (c.renew_deadline <= c.retry_period) {
    return invalid_argument("leader election: the renew deadline must be longer than the retry period");
  }
  if (c.lease_duration <= c.renew_deadline) {
    return invalid_argument("leader election: the lease duration must be longer than the renew deadline");
  }
  return ok_status();
}

LeaderElector::LeaderElector(client::Client& client, LeaderElectionConfig config, Clock& clock)
    : client_(client), config_(std::move(config)), clock_(clock) {}

bool LeaderElector::is_leader() const {
  std::lock_guard lock(mu_);
  return leading_ && clock_.mono_now() - last_renew_ < config_.renew_deadline;
}

std::string LeaderElector::observed_holder() const {
  std::lock_guard lock(mu_);
  return observed_spec_.is_object() ? observed_spec_.value("holderIdentity", "") : "";
}

Result<bool> LeaderElector::try_acquire_or_renew() {
  const WallTime now = clock_.wall_now();
  const MonoTime mono = clock_.mono_now();
  const std::string stamp = format_micro_time(now);
  const int64_t duration_s =
      std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::seconds>(config_.lease_duration).count());
  auto lease = client_.get(client::kinds::lease(), config_.namespace_, config_.name);
  if (!lease.ok()) {
    if (!client::is_not_found(lease.error()))
      return std::move(lease).error().context("reading the leader lease");
    Json spec = {{"holderIdentity", config_.identity},
                 {"leaseDurationSeconds", duration_s},
                 {"acquireTime", stamp},
                 {"renewTime", stamp},
                 {"leaseTransitions", 0}};
    Json obj = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", config_.name}, {"namespace", config_.namespace_}}},
                {"spec", spec}};
    auto created = client_.create(client::kinds::lease(), obj);
    if (!created.ok()) {
      if (client::is_already_exists(created.error())) return false;
      return std::move(created).error().context("creating the leader lease");
    }
    std::lock_guard lock(mu_);
    leading_ = true;
    last_renew_ = mono;
    observed_spec_ = spec;
    observed_at_ = mono;
    return true;
  }
  Json spec = lease->contains("spec") && (*lease)["spec"].is_object() ? (*lease)["spec"] : Json::object();
  const std::string holder = spec.value("holderIdentity", "");
  {
    std::lock_guard lock(mu_);
    if (spec != observed_spec_) {
      observed_spec_ = spec;
      observed_at_ = mono;  // the record moved: its holder is alive, by our clock
    }
    if (!holder.empty() && holder != config_.identity && mono - observed_at_ < config_.lease_duration) {
      leading_ = false;
      return false;  // held by someone else whose lease has not run out
    }
  }
  Json next = spec;
  next["holderIdentity"] = config_.identity;
  next["leaseDurationSeconds"] = duration_s;
  next["renewTime"] = stamp;
  if (holder != config_.identity) {
    next["acquireTime"] = stamp;
    next["leaseTransitions"] = spec.value("leaseTransitions", 0) + 1;
  }
  Json obj = *lease;
  obj["spec"] = next;
  auto updated = client_.update(client::kinds::lease(), obj);  // carries resourceVersion: a race is a 409
  if (!updated.ok()) {
    if (client::is_conflict(updated.error())) return false;
    return std::move(updated).error().context("renewing the leader lease");
  }
  std::lock_guard lock(mu_);
  if (holder != config_.identity) {
    log::info("acquired the leader lease", {{"lease", config_.namespace_ + "/" + config_.name},
                                            {"identity", config_.identity},
                                            {"previous", holder}});
  }
  leading_ = true;
  last_renew_ = mono;
  observed_spec_ = next;
  observed_at_ = mono;
  return true;
}

Status LeaderElector::release() {
  auto lease = client_.get(client::kinds::lease(), config_.namespace_, config_.name);
  if (!lease.ok()) return client::is_not_found(lease.error()) ? ok_status() : std::move(lease).error();
  if ((*lease)["spec"].value("holderIdentity", "") != config_.identity) return ok_status();
  Json obj = *lease;
  const std::string stamp = format_micro_time(clock_.wall_now());
  obj["spec"] = {{"leaseDurationSeconds", 1},
                 {"acquireTime", stamp},
                 {"renewTime", stamp},
                 {"leaseTransitions", (*lease)["spec"].value("leaseTransitions", 0)}};
  auto r = client_.update(client::kinds::lease(), obj);
  if (!r.ok()) return std::move(r).error().context("releasing the leader lease");
  log::info("released the leader lease", {{"identity", config_.identity}});
  return ok_status();
}

bool LeaderElector::run(workqueue::StopSignal& stop, const std::function<void()>& on_started,
                        const std::function<void()>& on_stopped) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(1.0, 1.2);
  for (;;) {
    if (stop.stopped()) return true;
    auto r = try_acquire_or_renew();
    if (r.ok() && *r) break;
    if (!r.ok()) log::warn("leader election attempt failed", {{"error", r.error().to_string()}});
    auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(config_.retry_period * jitter(rng));
    if (!stop.wait_for(clock_, wait)) return true;
  }
  on_started();
  bool lost = false;
  while (stop.wait_for(clock_, config_.retry_period)) {
    auto r = try_acquire_or_renew();
    if (r.ok() && *r) continue;
    MonoTime last;
    {
      std::lock_guard lock(mu_);
      last = last_renew_;
    }
    if (!r.ok()) log::warn("cannot renew the leader lease", {{"error", r.error().to_string()}});
    if (clock_.mono_now() - last >= config_.renew_deadline ||
        (r.ok() && !*r && observed_holder() != config_.identity)) {
      lost = true;
      break;
    }
  }
  {
    std::lock_guard lock(mu_);
    leading_ = false;
  }
  if (lost) {
    log::error("lost the leader lease: stopping", {{"identity", config_.identity}});
  } else if (config_.release_on_stop) {
    if (Status st = release(); !st.ok())
      log::warn("cannot release the leader lease", {{"error", st.error().to_string()}});
  }
  on_stopped();
  return !lost;
}

}  // namespace infergate::op::manager
