// An in-memory Platform, ModelStore and EventSink for the reconciler's tests: workloads become pods at
// once, each pod's verification and readiness chosen by a policy; jobs report what a policy says;
// HTTP answers come from a function (the pods' /metrics, a Prometheus server). Every change is logged.
// TEST FIXTURE ONLY.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "infergate/common/clock.h"
#include "infergate/operator/platform/platform.h"

namespace infergate::op::testing {

struct FakePod {
  int verify_exit_code = 0;
  std::string verify_message;  // the agent's JSON verdict
  bool ready = true;
  std::string waiting_reason;
  int restarts = 0;  // with a clock: the last one ended now, the pod started when it was applied
};

inline std::string verified_verdict(const std::string& digest = "sha256:" + std::string(64, 'a')) {
  return R"({"reason":"Verified","releaseDigest":")" + digest +
         R"(","name":"glm-4-9b","version":3,"weightFormat":"int8"})";
}

class FakePlatform final : public platform::Platform {
 public:
  std::function<FakePod(const platform::WorkloadSpec&, int index)> pods = [](const platform::WorkloadSpec&,
                                                                             int) {
    return FakePod{0, verified_verdict(), true, "", 0};
  };
  // What a job looks like once started (exists is set by the platform).
  std::function<platform::JobState(const platform::JobSpec&)> jobs = [](const platform::JobSpec&) {
    return platform::JobState{};
  };
  std::function<Result<platform::HttpResponse>(const std::string& url)> http = [](const std::string& url) {
    return Result<platform::HttpResponse>(Error(ErrorCode::kUnavailable, "no server at " + url));
  };

  // With a clock, pods start when their workload is applied and a restarted container last ended at
  // the time of the observation (what a crash loop looks like).
  const Clock* clock = nullptr;

  std::string_view name() const override { return "fake"; }
  api::Layout layout() const override { return api::Layout{}; }

  Result<platform::WorkloadState> observe_workload(const platform::ModelRef&, const std::string& w) override {
    std::lock_guard lock(mu_);
    platform::WorkloadState s;
    auto it = workloads_.find(w);
    if (it == workloads_.end()) return s;
    const platform::WorkloadSpec& spec = it->second;
    s.exists = true;
    s.template_hash = spec.template_hash();
    s.revision = spec.revision;
    s.replicas = spec.replicas;
    s.updated_replicas = spec.replicas;
    s.observed_current = true;
    s.surge = spec.surge;
    for (int i = 0; i < spec.replicas; ++i) {
      FakePod f = pods(spec, i);
      platform::PodState p;
      p.name = spec.name + "-" + spec.revision + "-" + std::to_string(i);
      p.revision = spec.revision;
      p.verify.phase = f.verify_exit_code == 0 ? platform::VerifyState::Phase::kSucceeded
                                               : platform::VerifyState::Phase::kFailed;
      p.verify.exit_code = f.verify_exit_code;
      p.verify.termination_message = f.verify_message;
      p.ready = f.verify_exit_code == 0 && f.ready && f.waiting_reason.empty();
      p.phase = p.ready ? platform::PodState::Phase::kRunning : platform::PodState::Phase::kPending;
      p.waiting_reason = f.waiting_reason;
      p.restarts = f.restarts;
      if (clock) {
        p.started_at = started_[w];
        if (f.restarts > 0) p.last_terminated_at = clock->wall_now();
      }
      p.address = spec.name + "-" + std::to_string(i) + ":8000";
      if (p.ready) ++s.ready_replicas;
      s.pods.push_back(p);
    }
    s.available_replicas = s.ready_replicas;
    return s;
  }
  Result<platform::EndpointState> observe_endpoint(const platform::ModelRef&, const std::string& e) override {
    std::lock_guard lock(mu_);
    platform::EndpointState s;
    s.url = "http://" + e + ".svc";
    auto it = endpoints_.find(e);
    if (it == endpoints_.end()) return s;
    s.exists = true;
    s.hash = it->second.hash();
    return s;
  }
  Result<std::vector<std::string>> list_workloads(const platform::ModelRef&) override {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    for (const auto& [k, v] : workloads_) out.push_back(k);
    return out;
  }
  Result<platform::TrustState> check_trust(const platform::ModelRef&, const api::TrustSpec&) override {
    return platform::TrustState::kPresent;
  }
  Status apply_workload(const platform::ModelRef&, const platform::WorkloadSpec& spec) override {
    std::lock_guard lock(mu_);
    workloads_[spec.name] = spec;
    if (clock) started_[spec.name] = clock->wall_now();
    log_.push_back("apply " + spec.name + " " + spec.revision + " x" + std::to_string(spec.replicas));
    if (spec.track == api::Track::kCanary) ++canary_applies_;
    return ok_status();
  }
  Status scale_workload(const platform::ModelRef&, const std::string& w, int32_t replicas) override {
    std::lock_guard lock(mu_);
    workloads_[w].replicas = replicas;
    log_.push_back("scale " + w + " x" + std::to_string(replicas));
    return ok_status();
  }
  Status delete_workload(const platform::ModelRef&, const std::string& w) override {
    std::lock_guard lock(mu_);
    if (workloads_.erase(w)) log_.push_back("delete " + w);
    return ok_status();
  }
  Status apply_endpoint(const platform::ModelRef&, const platform::EndpointSpec& spec) override {
    std::lock_guard lock(mu_);
    endpoints_[spec.name] = spec;
    log_.push_back("endpoint " + spec.name);
    return ok_status();
  }
  Result<platform::DisruptionBudgetState> observe_disruption_budget(const platform::ModelRef&,
                                                                    const std::string& name) override {
    std::lock_guard lock(mu_);
    platform::DisruptionBudgetState s;
    auto it = budgets_.find(name);
    if (it == budgets_.end()) return s;
    s.exists = true;
    s.hash = it->second.hash();
    return s;
  }
  Status apply_disruption_budget(const platform::ModelRef&,
                                 const platform::DisruptionBudgetSpec& spec) override {
    std::lock_guard lock(mu_);
    budgets_[spec.name] = spec;
    log_.push_back("budget " + spec.name + " maxUnavailable " + std::to_string(spec.max_unavailable));
    return ok_status();
  }
  std::optional<platform::DisruptionBudgetSpec> budget(const std::string& name) const {
    std::lock_guard lock(mu_);
    auto it = budgets_.find(name);
    if (it == budgets_.end()) return std::nullopt;
    return it->second;
  }
  Status cleanup(const platform::ModelRef&) override {
    std::lock_guard lock(mu_);
    workloads_.clear();
    endpoints_.clear();
    budgets_.clear();
    jobs_.clear();
    return ok_status();
  }
  Status apply_job(const platform::ModelRef&, const platform::JobSpec& spec) override {
    std::lock_guard lock(mu_);
    if (jobs_.count(spec.name)) return ok_status();
    jobs_[spec.name] = spec;
    log_.push_back("job " + spec.name);
    return ok_status();
  }
  Result<platform::JobState> observe_job(const platform::ModelRef&, const std::string& name) override {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(name);
    if (it == jobs_.end()) return platform::JobState{};
    platform::JobState s = jobs(it->second);
    s.exists = true;
    s.hash = it->second.hash();
    return s;
  }
  Status delete_job(const platform::ModelRef&, const std::string& name) override {
    std::lock_guard lock(mu_);
    if (jobs_.erase(name)) log_.push_back("delete job " + name);
    return ok_status();
  }
  std::string pod_url(const platform::ModelRef&, const platform::PodState& pod) override {
    return "http://" + pod.address;
  }
  Result<platform::HttpResponse> http_get(const platform::ModelRef&, const std::string& url,
                                          std::chrono::milliseconds) override {
    return http(url);
  }

  // Inspection.
  std::optional<platform::WorkloadSpec> workload(const std::string& name) const {
    std::lock_guard lock(mu_);
    auto it = workloads_.find(name);
    if (it == workloads_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<platform::JobSpec> job(const std::string& name) const {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(name);
    if (it == jobs_.end()) return std::nullopt;
    return it->second;
  }
  size_t job_count() const {
    std::lock_guard lock(mu_);
    return jobs_.size();
  }
  std::vector<std::string> log() const {
    std::lock_guard lock(mu_);
    return log_;
  }
  int canary_applies() const {
    std::lock_guard lock(mu_);
    return canary_applies_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, platform::WorkloadSpec> workloads_;
  std::map<std::string, WallTime> started_;
  std::map<std::string, platform::DisruptionBudgetSpec> budgets_;
  std::map<std::string, platform::EndpointSpec> endpoints_;
  std::map<std::string, platform::JobSpec> jobs_;
  std::vector<std::string> log_;
  int canary_applies_ = 0;
};

// One model object in memory, with resourceVersion and 409 on a stale status write.
class FakeModelStore final : public platform::ModelStore {
 public:
  void put(Json object) {
    std::lock_guard lock(mu_);
    object["metadata"]["resourceVersion"] = std::to_string(++rv_);
    if (object_.is_object() && object_.contains("status") && !object.contains("status"))
      object["status"] = object_["status"];
    object_ = std::move(object);
  }
  Json object() const {
    std::lock_guard lock(mu_);
    return object_;
  }
  Json status() const {
    std::lock_guard lock(mu_);
    return object_.value("status", Json::object());
  }
  int writes() const {
    std::lock_guard lock(mu_);
    return writes_;
  }
  Result<std::optional<Json>> get(const std::string&, const std::string&) override {
    std::lock_guard lock(mu_);
    if (object_.is_null()) return std::optional<Json>();
    return std::optional<Json>(object_);
  }
  Result<std::optional<Json>> get_fresh(const std::string& ns, const std::string& n) override {
    return get(ns, n);
  }
  Result<Json> write_status(const Json& base, const Json& status) override {
    std::lock_guard lock(mu_);
    if (base["metadata"]["resourceVersion"] != object_["metadata"]["resourceVersion"])
      return Error(ErrorCode::kConflict, "stale", "Conflict");
    object_["status"] = status;
    object_["metadata"]["resourceVersion"] = std::to_string(++rv_);
    ++writes_;
    return object_;
  }

 private:
  mutable std::mutex mu_;
  Json object_;
  int rv_ = 0;
  int writes_ = 0;
};

class RecordingEvents final : public platform::EventSink {
 public:
  void emit(const platform::ModelRef&, const platform::EventRecord& e) override {
    std::lock_guard lock(mu_);
    events_.push_back(e);
  }
  std::vector<platform::EventRecord> events() const {
    std::lock_guard lock(mu_);
    return events_;
  }
  bool has(const std::string& reason) const {
    std::lock_guard lock(mu_);
    for (const auto& e : events_) {
      if (e.reason == reason) return true;
    }
    return false;
  }
  std::string message(const std::string& reason) const {
    std::lock_guard lock(mu_);
    for (const auto& e : events_) {
      if (e.reason == reason) return e.message;
    }
    return "";
  }

 private:
  mutable std::mutex mu_;
  std::vector<platform::EventRecord> events_;
};

}  // namespace infergate::op::testing
