// Leader election on a coordination.k8s.io/v1 Lease (client-go's tools/leaderelection).
//
// Guarantees:
//  - at most one replica acts: a candidate takes the lease only when it is free, or when the holder's
//    record has not changed for lease_duration by the candidate's own clock (no clock-skew trust);
//  - a leader that cannot renew stops acting within renew_deadline: is_leader() turns false as soon
//    as the last successful renewal is older than renew_deadline, even if the loop thread is stuck,
//    and writes through a LeaderGuard stop with it (fencing);
//  - renew_deadline < lease_duration, so a cut-off leader stops before anyone else can take over;
//  - on a clean stop the lease is released (holder cleared), so the next replica takes over within
//    one retry period instead of a lease duration.
// All timing goes through the Clock; tests drive it with a FakeClock.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>

#include "infergate/common/clock.h"
#include "infergate/operator/client/client.h"
#include "infergate/operator/workqueue/stop_signal.h"

namespace infergate::op::manager {

struct LeaderElectionConfig {
  std::string namespace_ = "default";
  std::string name = "infergate-operator-leader";
  std::string identity;  // unique per replica (hostname plus a random suffix)
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  bool release_on_stop = true;
};

Status validate(const LeaderElectionConfig& config);

class LeaderElector {
 public:
  LeaderElector(client::Client& client, LeaderElectionConfig config, Clock& clock);

  // Campaigns until `stop`; while leading, renews every retry period. Calls on_started once when it
  // becomes leader and on_stopped once when it stops leading (lost, or stopped while leading).
  // Returns false if leadership was lost, true on a clean stop.
  bool run(workqueue::StopSignal& stop, const std::function<void()>& on_started,
           const std::function<void()>& on_stopped);

  bool is_leader() const;
  // The holder last seen in the lease ("" when free or unknown).
  std::string observed_holder() const;
  const LeaderElectionConfig& config() const { return config_; }

  // One attempt to take or renew the lease: true when we hold it afterwards.
  Result<bool> try_acquire_or_renew();
  // Gives the lease up if we hold it.
  Status release();

 private:
  client::Client& client_;
  LeaderElectionConfig config_;
  Clock& clock_;
  mutable std::mutex mu_;
  bool leading_ = false;
  MonoTime last_renew_{};
  Json observed_spec_;
  MonoTime observed_at_{};
};

// "2026-11-29T19:30:00.123456Z", the MicroTime format of Lease times.
std::string format_micro_time(WallTime t);

}  // namespace infergate::op::manager
