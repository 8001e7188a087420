// Engine adapters: how the serving knobs of an InferenceModel become a container command for each
// engine (the bundled infergate-runtime, vLLM, SGLang, llama.cpp's server), and the agent's verify
// command for the init step. Each adapter refuses, with a reason word, what its engine cannot run;
// nothing here knows about Kubernetes (paths come from a Layout the platform provides).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/operator/api/engine_profile.h"
#include "infergate/operator/api/names.h"

namespace infergate::op::api {

// Where a platform puts things inside a pod (Kubernetes) or on disk (local processes).
struct Layout {
  std::string model_root = "/models";                    // the artifact volume's mount point
  std::string trust_dir = "/etc/infergate/trust";        // the trust Secret's mount point (*.pem)
  std::string termination_log = "/dev/termination-log";  // where the agent writes its JSON verdict
  std::string listen_host = "0.0.0.0";
  int port = 0;  // 0: the engine's conventional port
};

struct ContainerCommand {
  std::string image;
  std::vector<std::string> command;  // empty: the image's entrypoint
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
};

struct EngineCommand {
  ContainerCommand container;
  int port = 8000;
  std::string liveness_path;
  std::string readiness_path;
  bool needs_shared_memory = false;  // vLLM/SGLang use /dev/shm between worker processes
};

// The model directory the engine and the agent read: "<model_root>/<artifact.path>".
std::string model_dir(const PodConfig& config, const Layout& layout);

// `infergate-agent verify <dir> --public-key <trust_dir>/ [--expect-name N] [--min-version V]
//  --expect-weight-format F --termination-log <path>`.
ContainerCommand agent_verify_command(const PodConfig& config, const Layout& layout, const Images& images);

// The profile row (engine_profile.h) for the spec's engine at the version its image tag names; an
// image older than every row is refused (UnsupportedEngineVersion).
Result<const EngineProfile*> engine_profile_for(const PodConfig& config);

// The serving container for config.engine.kind. Refusals (reason words): UnsupportedKvCacheDtype,
// UnsupportedWeightFormat, UnsupportedQuantization, MissingModelFile, ConflictingEngineArgs,
// MissingEngineImage, UnsupportedEngineVersion. `served_name` is the model name clients use in requests.
Result<EngineCommand> engine_command(const PodConfig& config, std::string_view served_name,
                                     const Layout& layout, const Images& images);

// ---- Verification on every start: the serving container runs through the agent ----
// The init step installs a self-contained agent (its binary, shared libraries and loader) into an
// emptyDir; the serving container starts as `<dir>/lib/ld.so --library-path <dir>/lib
// <dir>/bin/infergate-agent exec <the verify flags> -- <engine command> <engine args>`, so the tree is
// verified again in the same container immediately before the engine starts, at every restart, in
// any engine's image (no change to third-party images; the engine inherits none of our libraries).
inline constexpr std::string_view kAgentInstallDir = "/infergate";
// The verify step with `--install-agent <dir>`.
ContainerCommand agent_install_command(const ContainerCommand& verify, std::string_view dir);
// The engine's container (image, env, args unchanged), its command started through the installed
// agent: command `<dir>/lib/ld.so ... exec <verify flags> -- <engine command>`, args the engine's.
ContainerCommand agent_wrapped(const ContainerCommand& verify, const ContainerCommand& engine,
                               std::string_view dir);

// The KV-cache dtypes an engine can run (what the CRD's CEL rule lists too).
std::vector<KvCacheDtype> supported_kv_cache_dtypes(EngineKind kind);

}  // namespace infergate::op::api
