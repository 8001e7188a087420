// `infergate-operator local ...`: the operator on one machine. `run` watches a directory of
// InferenceModel YAML and reconciles each model with the same reconciler the cluster runs, on the
// LocalPlatform (pods as processes, a router in front); `get` prints kubectl-like tables from the
// state directory. A library, so tests run the local operator in-process or as the binary.
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "infergate/common/clock.h"
#include "infergate/operator/api/engine.h"
#include "infergate/operator/local/local_platform.h"
#include "infergate/operator/local/model_store.h"

namespace infergate::op::local {

struct RunOptions {
  std::filesystem::path manifests_dir;
  std::filesystem::path state_dir = ".infergate";
  std::filesystem::path volumes_dir;  // default <state>/volumes
  std::filesystem::path keys_dir;     // default <state>/keys
  std::filesystem::path bin_dir;      // default: beside this executable, then PATH
  std::string router_address = "127.0.0.1:8080";
  int workers = 2;
  std::chrono::milliseconds grace{10000};
  std::chrono::milliseconds scan_period{1000};
  std::chrono::milliseconds resync_period{30000};
  BackoffPolicy backoff;
  std::map<std::string, std::string> env;  // extra environment for pods and jobs (KEY=VALUE flags)
};

struct GetOptions {
  std::filesystem::path state_dir = ".infergate";
  std::string what = "models";  // models | pods | events | errors | endpoints
  std::string name;             // one model (models) or one model's pods (pods)
  std::string output;           // "" (table), "wide", "yaml", "json"
};

void add_run_flags(CLI::App& app, RunOptions& options);
void add_get_flags(CLI::App& app, GetOptions& options);

// Exit codes of `local run`.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;

// The local operator: a model store over the directory, the local platform, the reconciler and its
// work queue, the router's front door, and a loop that scans the directory and writes the tables'
// sources (<state>/pods.json, <state>/errors.json, <state>/router.json).
class LocalOperator {
 public:
  static Result<std::unique_ptr<LocalOperator>> create(RunOptions options,
                                                       Clock& clock = SystemClock::instance());
  ~LocalOperator();
  // Blocks until stop(); then stops every pod (SIGTERM, SIGKILL after the grace) and returns.
  Status run();
  void stop();

  LocalPlatform& platform() { return *platform_; }
  LocalModelStore& models() { return *models_; }
  std::string router_url() const;
  const RunOptions& options() const { return options_; }

 private:
  struct Impl;
  LocalOperator() = default;
  RunOptions options_;
  std::unique_ptr<LocalModelStore> models_;
  std::unique_ptr<LocalPlatform> platform_;
  std::unique_ptr<Impl> impl_;
};

// What `infergate-operator local run` does: build, run until SIGINT/SIGTERM, stop cleanly.
int run_local(const RunOptions& options);
// What `infergate-operator local get` does; prints to `out`. Exit 0, or 1 with a message on `err`.
int get_local(const GetOptions& options, std::ostream& out, std::ostream& err);

// "3m", "2h", "5d" as kubectl prints ages.
std::string format_age(std::chrono::seconds age);

}  // namespace infergate::op::local
