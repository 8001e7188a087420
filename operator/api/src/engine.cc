// Engine adapters: the bundled runtime, vLLM, SGLang and llama.cpp's server.
#include "infergate/operator/api/engine.h"

#include <algorithm>

namespace infergate::op::api {
namespace {

Error refuse(std::string reason, std::string message) {
  return invalid_argument(std::move(message)).with_reason(std::move(reason));
}

// User args may add flags, never set one the adapter derives from the spec (two values for one knob
// would make the served configuration differ from the one in status), under any spelling the
// engine's parser accepts, nor one that makes the engine read input the agent did not verify.
Status check_extra_args(const PodConfig& c, const EngineProfile& profile) {
  auto conflict = find_arg_conflict(profile, c.engine.args);
  if (!conflict) return ok_status();
  const std::string spelled = conflict->arg == conflict->flag
                                  ? conflict->flag
                                  : "\"" + conflict->arg + "\" (" + std::string(profile.name) +
                                        " reads it as " + conflict->flag + ")";
  if (conflict->unverified) {
    return refuse("ConflictingEngineArgs",
                  "spec.engine.args: " + spelled + " makes " + std::string(profile.name) +
                      " read input the agent did not verify; the engine reads only the "
                      "verified artifact directory");
  }
  return refuse("ConflictingEngineArgs",
                "spec.engine.args: " + spelled + " is set by " + conflict->field + "; remove it from args");
}

// The checkpoint method of a quantized Hugging Face release, and whether the engine is told it.
// Unquantized weights take no method; a quantized one must name one the engine reads for that
// format. The engine detects a method from config.json by itself and picks its fastest kernel for it
// (vLLM upgrades awq/gptq to Marlin), so only methods it cannot detect are passed explicitly.
Result<std::string> hf_quantization(const PodConfig& c, const EngineProfile& profile) {
  const auto wf = c.serving.weight_format;
  const std::string& q = c.engine.quantization;
  const std::string engine(profile.name);
  if (wf == WeightFormat::kFp16 || wf == WeightFormat::kBf16) {
    if (!q.empty()) {
      return refuse("UnsupportedQuantization", "spec.engine.quantization: \"" + q +
                                                   "\" is set but weightFormat " +
                                                   std::string(to_string(wf)) + " is not quantized");
    }
    return std::string();
  }
  const auto it = profile.quantization_methods.find(wf);
  const std::vector<std::string> none;
  const auto& allowed = it == profile.quantization_methods.end() ? none : it->second;
  std::string list;
  for (const auto& m : allowed) list += (list.empty() ? "" : ", ") + m;
  if (q.empty()) {
    return refuse("UnsupportedWeightFormat",
                  engine + " cannot load infergate's native " + std::string(to_string(wf)) +
                      " format; export the artifact in a format " + engine +
                      " reads and set spec.engine.quantization to one of: " + list);
  }
  if (std::find(allowed.begin(), allowed.end(), q) == allowed.end()) {
    return refuse("UnsupportedQuantization", "spec.engine.quantization: \"" + q + "\" is not a " +
                                                 std::string(to_string(wf)) + " method " + engine +
                                                 " serves as signed (want one of " + list + ")");
  }
  const auto& passed = profile.quantization_passed;
  return std::find(passed.begin(), passed.end(), q) != passed.end() ? q : std::string();
}

// vLLM and SGLang run in the checkpoint's 16-bit dtype and keep an unquantized KV cache in it:
// kvCacheDtype fp16 and bf16 both mean "not quantized" there (a bf16 release with the default fp16
// is the common case, and runs with a bf16 cache). The dtype follows the weights only.
std::string activation_dtype(const PodConfig& c) {
  switch (c.serving.weight_format) {
    case WeightFormat::kFp16: return "float16";
    case WeightFormat::kBf16: return "bfloat16";
    default: return "";  // quantized: the checkpoint's torch_dtype
  }
}

Status refuse_kv(const PodConfig& c, const EngineProfile& profile, std::string_view hint) {
  if (profile.kv_cache_dtype.count(c.serving.kv_cache_dtype)) return ok_status();
  std::string list;
  for (auto d : supported_kv_cache_dtypes(c.engine.kind))
    list += (list.empty() ? "" : ", ") + std::string(to_string(d));
  return refuse("UnsupportedKvCacheDtype",
                std::string(profile.name) + " has no " + std::string(to_string(c.serving.kv_cache_dtype)) +
                    " KV cache (spec.serving.kvCacheDtype; supported: " + list + ")" + std::string(hint));
}

Status refuse_model_file(const PodConfig& c) {
  if (c.engine.model_file.empty()) return ok_status();
  return refuse("InvalidSpec", "spec.engine.modelFile: only the llamacpp engine takes a model file");
}

void append(std::vector<std::string>& to, const std::vector<std::string>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

int engine_port(const Layout& layout, int conventional) {
  return layout.port > 0 ? layout.port : conventional;
}

Result<EngineCommand> bundled(const PodConfig& c, const EngineProfile& profile, std::string_view served,
                              const Layout& layout, const Images& images) {
  if (!c.engine.quantization.empty()) {
    return refuse("UnsupportedQuantization",
                  "spec.engine.quantization: the bundled runtime reads the format from the artifact's "
                  "quantization.json; leave it empty");
  }
  INFERGATE_RETURN_IF_ERROR(refuse_model_file(c));
  INFERGATE_RETURN_IF_ERROR(check_extra_args(c, profile));
  EngineCommand e;
  std::string dir = model_dir(c, layout);
  e.port = engine_port(layout, 8000);
  e.container.image = !c.engine.image.empty()  ? c.engine.image
                      : c.resources.gpus() > 0 ? images.runtime_cuda
                                               : images.runtime;
  e.container.command = profile.command;
  e.container.args = {"serve",
                      "--model",
                      dir,
                      "--weight-format",
                      std::string(to_string(c.serving.weight_format)),
                      "--kv-cache-dtype",
                      profile.kv_cache_dtype.at(c.serving.kv_cache_dtype),
                      "--max-context-length",
                      std::to_string(c.serving.max_context_length),
                      "--max-concurrency",
                      std::to_string(c.serving.max_concurrency),
                      "--verified-manifest",
                      dir + "/SHA256SUMS",
                      "--served-model-name",
                      std::string(served),
                      "--host",
                      layout.listen_host,
                      "--port",
                      std::to_string(e.port)};
  // Hash-while-load reads the verified SHA256SUMS, which only our release format signs: an OMS-only
  // release has none (docs/security.md compares what each format guarantees).
  if (!c.artifact.trust.allows("infergate")) {
    auto it = std::find(e.container.args.begin(), e.container.args.end(), "--verified-manifest");
    e.container.args.erase(it, it + 2);
  }
  append(e.container.args, c.engine.args);
  e.liveness_path = "/healthz";
  e.readiness_path = "/readyz";
  // Tensor parallelism over several GPUs: NCCL's shared-memory transport needs more than the
  // container runtime's 64 MiB /dev/shm.
  e.needs_shared_memory = c.resources.gpus() > 1;
  return e;
}

// vLLM and SGLang take the same knobs under their own flag names.
struct PythonEngineFlags {
  const char* model;
  const char* context;
  const char* concurrency;
  const char* tensor_parallel;
  int port;
};

Result<EngineCommand> python_engine(const PodConfig& c, const EngineProfile& profile, std::string_view served,
                                    const Layout& layout, const PythonEngineFlags& f) {
  INFERGATE_RETURN_IF_ERROR(refuse_kv(c, profile, "; use fp8, or the bundled engine for int8/int4"));
  INFERGATE_RETURN_IF_ERROR(refuse_model_file(c));
  INFERGATE_ASSIGN_OR_RETURN(std::string quant, hf_quantization(c, profile));
  INFERGATE_RETURN_IF_ERROR(check_extra_args(c, profile));
  const std::string dtype = activation_dtype(c);
  EngineCommand e;
  e.port = engine_port(layout, f.port);
  e.container.image = c.engine.image;
  e.container.command = profile.command;
  auto& a = e.container.args;
  a = {f.model,
       model_dir(c, layout),
       "--served-model-name",
       std::string(served),
       "--host",
       layout.listen_host,
       "--port",
       std::to_string(e.port),
       f.context,
       std::to_string(c.serving.max_context_length),
       f.concurrency,
       std::to_string(c.serving.max_concurrency),
       "--kv-cache-dtype",
       profile.kv_cache_dtype.at(c.serving.kv_cache_dtype)};
  if (!profile.metrics_flag.empty()) a.emplace_back(profile.metrics_flag);
  if (!dtype.empty()) append(a, {"--dtype", dtype});
  if (!quant.empty()) append(a, {"--quantization", quant});
  if (c.resources.gpus() > 1) append(a, {f.tensor_parallel, std::to_string(c.resources.gpus())});
  append(a, c.engine.args);
  // The root filesystem is read-only and the artifact is local: caches go to /tmp, nothing is fetched.
  e.container.env = profile.env;
  e.liveness_path = "/health";
  e.readiness_path = "/health";
  e.needs_shared_memory = true;  // worker processes share tensors through /dev/shm
  return e;
}

constexpr PythonEngineFlags kVllmFlags{"--model", "--max-model-len", "--max-num-seqs",
                                       "--tensor-parallel-size", 8000};
constexpr PythonEngineFlags kSglangFlags{"--model-path", "--context-length", "--max-running-requests",
                                         "--tp-size", 30000};

Result<EngineCommand> llamacpp(const PodConfig& c, const EngineProfile& profile, std::string_view served,
                               const Layout& layout) {
  INFERGATE_RETURN_IF_ERROR(refuse_kv(c, profile, "; llama.cpp has no fp8 cache type"));
  if (c.engine.model_file.empty()) {
    return refuse(
        "MissingModelFile",
        "spec.engine.modelFile: llama.cpp serves one GGUF file; name it (relative to the artifact)");
  }
  if (c.engine.model_file.size() < 5 ||
      c.engine.model_file.compare(c.engine.model_file.size() - 5, 5, ".gguf") != 0) {
    return refuse("MissingModelFile",
                  "spec.engine.modelFile: \"" + c.engine.model_file + "\" is not a .gguf file");
  }
  if (!c.engine.quantization.empty()) {
    return refuse("UnsupportedQuantization",
                  "spec.engine.quantization: llama.cpp reads the format from the GGUF file; leave it empty");
  }
  INFERGATE_RETURN_IF_ERROR(check_extra_args(c, profile));
  const std::string cache = profile.kv_cache_dtype.at(c.serving.kv_cache_dtype);
  EngineCommand e;
  e.port = engine_port(layout, 8080);
  e.container.image = c.engine.image;
  e.container.command = profile.command;
  auto& a = e.container.args;
  // llama-server splits -c across its -np slots: ask for context x slots so each request gets the
  // full maxContextLength.
  a = {"--model",
       model_dir(c, layout) + "/" + c.engine.model_file,
       "--alias",
       std::string(served),
       "--host",
       layout.listen_host,
       "--port",
       std::to_string(e.port),
       "--ctx-size",
       std::to_string(c.serving.max_context_length * c.serving.max_concurrency),
       "--parallel",
       std::to_string(c.serving.max_concurrency),
       "--cache-type-k",
       cache,
       "--cache-type-v",
       cache,
       std::string(profile.metrics_flag)};
  // A quantized V cache needs flash attention in llama.cpp. Since build b6327 the flag takes a value
  // (a bare -fa would swallow the next argument); before, it was a switch.
  if (cache == "q8_0" || cache == "q4_0") {
    if (profile.since >= EngineVersion{0, 6327, 0}) {
      append(a, {"--flash-attn", "on"});
    } else {
      append(a, {"--flash-attn"});
    }
  }
  if (c.resources.gpus() > 0) append(a, {"--n-gpu-layers", "999"});
  append(a, c.engine.args);
  e.container.env = profile.env;
  e.liveness_path = "/health";
  e.readiness_path = "/health";
  return e;
}

}  // namespace

std::string model_dir(const PodConfig& config, const Layout& layout) {
  std::string root = layout.model_root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root + "/" + config.artifact.path;
}

ContainerCommand agent_verify_command(const PodConfig& c, const Layout& layout, const Images& images) {
  ContainerCommand cmd;
  cmd.image = images.agent;
  cmd.command = {"infergate-agent"};
  std::string trust = layout.trust_dir;
  if (trust.empty() || trust.back() != '/') trust += '/';
  const TrustSpec& t = c.artifact.trust;
  if (t.formats.empty()) {
    cmd.args = {"verify", model_dir(c, layout), "--public-key", trust};
  } else {
    // The trust Secret may then hold CA certificates and a trusted_root.json beside the keys.
    cmd.args = {"verify", model_dir(c, layout), "--trust-dir", trust};
    for (const auto& f : t.formats) cmd.args.insert(cmd.args.end(), {"--format", f});
    for (const auto& id : t.identities) {
      cmd.args.insert(cmd.args.end(), {"--identity", id.subject, "--issuer", id.issuer});
    }
  }
  if (!c.artifact.trust.expect_name.empty()) {
    cmd.args.insert(cmd.args.end(), {"--expect-name", c.artifact.trust.expect_name});
  }
  if (c.artifact.trust.min_version) {
    cmd.args.insert(cmd.args.end(), {"--min-version", std::to_string(*c.artifact.trust.min_version)});
  }
  cmd.args.insert(cmd.args.end(), {"--expect-weight-format", std::string(to_string(c.serving.weight_format)),
                                   "--termination-log", layout.termination_log});
  return cmd;
}

Result<const EngineProfile*> engine_profile_for(const PodConfig& config) {
  const auto version = image_engine_version(config.engine.kind, config.engine.image);
  const EngineProfile& p = engine_profile(config.engine.kind, version);
  if (version && *version < p.since) {
    return refuse("UnsupportedEngineVersion",
                  "spec.engine.image: " + std::string(p.name) + " " + version->to_string() +
                      " (from the image tag) is older than " + "the releases the operator's " +
                      std::string(p.name) + " adapter knows: " + std::string(p.release));
  }
  return &p;
}

Result<EngineCommand> engine_command(const PodConfig& config, std::string_view served_name,
                                     const Layout& layout, const Images& images) {
  if (config.engine.kind != EngineKind::kBundled && config.engine.image.empty()) {
    return refuse("MissingEngineImage", "spec.engine.image: required for engine kind " +
                                            std::string(to_string(config.engine.kind)));
  }
  INFERGATE_ASSIGN_OR_RETURN(const EngineProfile* profile, engine_profile_for(config));
  Result<EngineCommand> out = internal_error("unreachable");
  switch (config.engine.kind) {
    case EngineKind::kBundled: out = bundled(config, *profile, served_name, layout, images); break;
    case EngineKind::kVllm: out = python_engine(config, *profile, served_name, layout, kVllmFlags); break;
    case EngineKind::kSglang: out = python_engine(config, *profile, served_name, layout, kSglangFlags); break;
    case EngineKind::kLlamacpp: out = llamacpp(config, *profile, served_name, layout); break;
  }
  return out;
}

ContainerCommand agent_install_command(const ContainerCommand& verify, std::string_view dir) {
  ContainerCommand c = verify;
  c.args.insert(c.args.end(), {"--install-agent", std::string(dir)});
  return c;
}

ContainerCommand agent_wrapped(const ContainerCommand& verify, const ContainerCommand& engine,
                               std::string_view dir) {
  const std::string d(dir);
  ContainerCommand c;
  c.image = engine.image;
  c.env = engine.env;
  c.command = {d + "/lib/ld.so", "--library-path", d + "/lib", d + "/bin/infergate-agent", "exec"};
  // verify's arguments are `verify DIR [flags]`; exec takes the same `DIR [flags]`.
  c.command.insert(c.command.end(), verify.args.begin() + (verify.args.empty() ? 0 : 1), verify.args.end());
  c.command.push_back("--");
  c.command.insert(c.command.end(), engine.command.begin(), engine.command.end());
  c.args = engine.args;  // the engine's own arguments stay the container's args
  return c;
}

std::vector<KvCacheDtype> supported_kv_cache_dtypes(EngineKind kind) {
  std::vector<KvCacheDtype> out;
  for (const auto& [dtype, spelling] : engine_profile(kind).kv_cache_dtype) out.push_back(dtype);
  return out;
}

}  // namespace infergate::op::api
