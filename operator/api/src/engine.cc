// Engine adapters: the bundled runtime, vLLM, SGLang and llama.cpp's server.
#include "infergate/operator/api/engine.h"

#include <algorithm>
#include <set>

namespace infergate::op::api {
namespace {

Error refuse(std::string reason, std::string message) {
  return invalid_argument(std::move(message)).with_reason(std::move(reason));
}

// User args may add flags, never repeat one the adapter derives from the spec: two values for the
// same knob would make the served configuration differ from the one in status.
Status check_extra_args(const PodConfig& c, const std::vector<std::string>& managed) {
  for (const auto& arg : c.engine.args) {
    for (const auto& flag : managed) {
      if (arg == flag || arg.rfind(flag + "=", 0) == 0) {
        return refuse(
            "ConflictingEngineArgs",
            "spec.engine.args: " + flag + " is set by the operator from the spec; remove it from args");
      }
    }
  }
  return ok_status();
}

Result<std::string> hf_quantization(const PodConfig& c, std::string_view engine,
                                    const std::set<std::string>& int8_methods,
                                    const std::set<std::string>& int4_methods) {
  const auto wf = c.serving.weight_format;
  const std::string& q = c.engine.quantization;
  if (wf == WeightFormat::kFp16 || wf == WeightFormat::kBf16) {
    if (!q.empty()) {
      return refuse("UnsupportedQuantization", "spec.engine.quantization: \"" + q +
                                                   "\" is set but weightFormat " +
                                                   std::string(to_string(wf)) + " is not quantized");
    }
    return std::string();
  }
  const auto& allowed = wf == WeightFormat::kInt8 ? int8_methods : int4_methods;
  std::string list;
  for (const auto& m : allowed) list += (list.empty() ? "" : ", ") + m;
  if (q.empty()) {
    return refuse("UnsupportedWeightFormat",
                  std::string(engine) + " cannot load infergate's native " + std::string(to_string(wf)) +
                      " format; export the artifact in a format " + std::string(engine) +
                      " reads and set spec.engine.quantization to one of: " + list);
  }
  if (!allowed.count(q)) {
    return refuse("UnsupportedQuantization", "spec.engine.quantization: \"" + q + "\" is not a " +
                                                 std::string(to_string(wf)) + " method of " +
                                                 std::string(engine) + " (want one of " + list + ")");
  }
  return q;
}

// vLLM and SGLang have one activation dtype and cannot keep a 16-bit KV cache in the other 16-bit type.
Result<std::string> activation_dtype(const PodConfig& c, std::string_view engine) {
  const auto wf = c.serving.weight_format;
  const auto kv = c.serving.kv_cache_dtype;
  std::string wdt = wf == WeightFormat::kFp16 ? "float16" : wf == WeightFormat::kBf16 ? "bfloat16" : "";
  std::string kdt = kv == KvCacheDtype::kFp16 ? "float16" : kv == KvCacheDtype::kBf16 ? "bfloat16" : "";
  if (!wdt.empty() && !kdt.empty() && wdt != kdt) {
    return refuse("UnsupportedKvCacheDtype",
                  std::string(engine) + " keeps a 16-bit KV cache in the model's dtype: weightFormat " +
                      std::string(to_string(wf)) + " with kvCacheDtype " + std::string(to_string(kv)) +
                      " cannot run");
  }
  return wdt.empty() ? kdt : wdt;
}

Status refuse_kv(const PodConfig& c, std::string_view engine, std::string_view hint) {
  auto ok = supported_kv_cache_dtypes(c.engine.kind);
  if (std::find(ok.begin(), ok.end(), c.serving.kv_cache_dtype) != ok.end()) return ok_status();
  std::string list;
  for (auto d : ok) list += (list.empty() ? "" : ", ") + std::string(to_string(d));
  return refuse("UnsupportedKvCacheDtype", std::string(engine) + " has no " +
                                               std::string(to_string(c.serving.kv_cache_dtype)) +
                                               " KV cache (supported: " + list + ")" + std::string(hint));
}

void append(std::vector<std::string>& to, const std::vector<std::string>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

Result<EngineCommand> bundled(const PodConfig& c, std::string_view served, const Layout& layout,
                              const Images& images) {
  if (!c.engine.quantization.empty()) {
    return refuse("UnsupportedQuantization",
                  "spec.engine.quantization: the bundled runtime reads the format from the artifact's "
                  "quantization.json; leave it empty");
  }
  if (!c.engine.model_file.empty()) {
    return refuse("InvalidSpec", "spec.engine.modelFile: only the llamacpp engine takes a model file");
  }
  INFERGATE_RETURN_IF_ERROR(check_extra_args(
      c, {"--model", "--weight-format", "--kv-cache-dtype", "--max-context-length", "--max-concurrency",
          "--verified-manifest", "--served-model-name", "--host", "--port"}));
  EngineCommand e;
  std::string dir = model_dir(c, layout);
  e.port = layout.port > 0 ? layout.port : 8000;
  e.container.image = !c.engine.image.empty()  ? c.engine.image
                      : c.resources.gpus() > 0 ? images.runtime_cuda
                                               : images.runtime;
  e.container.command = {"infergate-runtime"};
  e.container.args = {"serve",
                      "--model",
                      dir,
                      "--weight-format",
                      std::string(to_string(c.serving.weight_format)),
                      "--kv-cache-dtype",
                      std::string(to_string(c.serving.kv_cache_dtype)),
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

Result<EngineCommand> vllm(const PodConfig& c, std::string_view served, const Layout& layout) {
  INFERGATE_RETURN_IF_ERROR(refuse_kv(c, "vLLM", "; use fp8, or the bundled engine for int8/int4"));
  if (!c.engine.model_file.empty()) {
    return refuse("InvalidSpec", "spec.engine.modelFile: only the llamacpp engine takes a model file");
  }
  INFERGATE_ASSIGN_OR_RETURN(
      std::string quant,
      hf_quantization(c, "vLLM",
                      {"bitsandbytes", "compressed-tensors", "experts_int8", "gptq", "gptq_marlin"},
                      {"awq", "awq_marlin", "bitsandbytes", "compressed-tensors", "gptq", "gptq_marlin"}));
  INFERGATE_ASSIGN_OR_RETURN(std::string dtype, activation_dtype(c, "vLLM"));
  INFERGATE_RETURN_IF_ERROR(check_extra_args(
      c, {"--model", "--served-model-name", "--host", "--port", "--max-model-len", "--max-num-seqs",
          "--kv-cache-dtype", "--dtype", "--quantization", "--tensor-parallel-size", "-tp"}));
  EngineCommand e;
  e.port = layout.port > 0 ? layout.port : 8000;
  e.container.image = c.engine.image;
  e.container.command = {"python3", "-m", "vllm.entrypoints.openai.api_server"};
  auto& a = e.container.args;
  a = {"--model",
       model_dir(c, layout),
       "--served-model-name",
       std::string(served),
       "--host",
       layout.listen_host,
       "--port",
       std::to_string(e.port),
       "--max-model-len",
       std::to_string(c.serving.max_context_length),
       "--max-num-seqs",
       std::to_string(c.serving.max_concurrency),
       "--kv-cache-dtype",
       c.serving.kv_cache_dtype == KvCacheDtype::kFp8 ? "fp8" : "auto"};
  if (!dtype.empty()) append(a, {"--dtype", dtype});
  if (!quant.empty()) append(a, {"--quantization", quant});
  if (c.resources.gpus() > 1) append(a, {"--tensor-parallel-size", std::to_string(c.resources.gpus())});
  append(a, c.engine.args);
  // The root filesystem is read-only and the artifact is local: caches go to /tmp, nothing is fetched.
  e.container.env = {{"HOME", "/tmp"},
                     {"XDG_CACHE_HOME", "/tmp/.cache"},
                     {"HF_HUB_OFFLINE", "1"},
                     {"VLLM_NO_USAGE_STATS", "1"}};
  e.liveness_path = "/health";
  e.readiness_path = "/health";
  e.needs_shared_memory = true;
  return e;
}

Result<EngineCommand> sglang(const PodConfig& c, std::string_view served, const Layout& layout) {
  INFERGATE_RETURN_IF_ERROR(refuse_kv(c, "SGLang", "; use fp8, or the bundled engine for int8/int4"));
  if (!c.engine.model_file.empty()) {
    return refuse("InvalidSpec", "spec.engine.modelFile: only the llamacpp engine takes a model file");
  }
  INFERGATE_ASSIGN_OR_RETURN(
      std::string quant,
      hf_quantization(c, "SGLang", {"bitsandbytes", "compressed-tensors", "gptq", "w8a8_int8"},
                      {"awq", "awq_marlin", "bitsandbytes", "compressed-tensors", "gptq", "gptq_marlin"}));
  INFERGATE_ASSIGN_OR_RETURN(std::string dtype, activation_dtype(c, "SGLang"));
  INFERGATE_RETURN_IF_ERROR(check_extra_args(
      c, {"--model-path", "--served-model-name", "--host", "--port", "--context-length",
          "--max-running-requests", "--kv-cache-dtype", "--dtype", "--quantization", "--tp-size", "--tp"}));
  EngineCommand e;
  e.port = layout.port > 0 ? layout.port : 30000;
  e.container.image = c.engine.image;
  e.container.command = {"python3", "-m", "sglang.launch_server"};
  auto& a = e.container.args;
  a = {"--model-path",
       model_dir(c, layout),
       "--served-model-name",
       std::string(served),
       "--host",
       layout.listen_host,
       "--port",
       std::to_string(e.port),
       "--context-length",
       std::to_string(c.serving.max_context_length),
       "--max-running-requests",
       std::to_string(c.serving.max_concurrency),
       "--kv-cache-dtype",
       c.serving.kv_cache_dtype == KvCacheDtype::kFp8 ? "fp8_e4m3" : "auto"};
  if (!dtype.empty()) append(a, {"--dtype", dtype});
  if (!quant.empty()) append(a, {"--quantization", quant});
  if (c.resources.gpus() > 1) append(a, {"--tp-size", std::to_string(c.resources.gpus())});
  append(a, c.engine.args);
  e.container.env = {{"HOME", "/tmp"}, {"XDG_CACHE_HOME", "/tmp/.cache"}, {"HF_HUB_OFFLINE", "1"}};
  e.liveness_path = "/health";
  e.readiness_path = "/health";
  e.needs_shared_memory = true;
  return e;
}

Result<EngineCommand> llamacpp(const PodConfig& c, std::string_view served, const Layout& layout) {
  INFERGATE_RETURN_IF_ERROR(refuse_kv(c, "llama.cpp", "; llama.cpp has no fp8 cache type"));
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
  INFERGATE_RETURN_IF_ERROR(check_extra_args(
      c,
      {"-m", "--model", "--host", "--port", "-c", "--ctx-size", "-np", "--parallel", "-ctk", "--cache-type-k",
       "-ctv", "--cache-type-v", "-a", "--alias", "-fa", "--flash-attn", "-ngl", "--n-gpu-layers"}));
  std::string cache;
  switch (c.serving.kv_cache_dtype) {
    case KvCacheDtype::kFp16: cache = "f16"; break;
    case KvCacheDtype::kBf16: cache = "bf16"; break;
    case KvCacheDtype::kInt8: cache = "q8_0"; break;
    case KvCacheDtype::kInt4: cache = "q4_0"; break;
    case KvCacheDtype::kFp8: break;  // refused above
  }
  EngineCommand e;
  e.port = layout.port > 0 ? layout.port : 8080;
  e.container.image = c.engine.image;  // the llama.cpp server image's entrypoint is llama-server
  auto& a = e.container.args;
  // llama-server splits -c across its -np slots: ask for context x slots so each request gets the
  // full maxContextLength.
  a = {"--model",        model_dir(c, layout) + "/" + c.engine.model_file,
       "--alias",        std::string(served),
       "--host",         layout.listen_host,
       "--port",         std::to_string(e.port),
       "--ctx-size",     std::to_string(c.serving.max_context_length * c.serving.max_concurrency),
       "--parallel",     std::to_string(c.serving.max_concurrency),
       "--cache-type-k", cache,
       "--cache-type-v", cache};
  // A quantized V cache needs flash attention in llama.cpp.
  if (cache == "q8_0" || cache == "q4_0") append(a, {"--flash-attn", "on"});
  if (c.resources.gpus() > 0) append(a, {"--n-gpu-layers", "999"});
  append(a, c.engine.args);
  e.container.env = {{"HOME", "/tmp"}};
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

Result<EngineCommand> engine_command(const PodConfig& config, std::string_view served_name,
                                     const Layout& layout, const Images& images) {
  if (config.engine.kind != EngineKind::kBundled && config.engine.image.empty()) {
    return refuse("MissingEngineImage", "spec.engine.image: required for engine kind " +
                                            std::string(to_string(config.engine.kind)));
  }
  Result<EngineCommand> out = internal_error("unreachable");
  switch (config.engine.kind) {
    case EngineKind::kBundled: out = bundled(config, served_name, layout, images); break;
    case EngineKind::kVllm: out = vllm(config, served_name, layout); break;
    case EngineKind::kSglang: out = sglang(config, served_name, layout); break;
    case EngineKind::kLlamacpp: out = llamacpp(config, served_name, layout); break;
  }
  return out;
}

std::vector<KvCacheDtype> supported_kv_cache_dtypes(EngineKind kind) {
  switch (kind) {
    case EngineKind::kBundled:
      return {KvCacheDtype::kFp16, KvCacheDtype::kBf16, KvCacheDtype::kFp8, KvCacheDtype::kInt8,
              KvCacheDtype::kInt4};
    case EngineKind::kVllm:
    case EngineKind::kSglang: return {KvCacheDtype::kFp16, KvCacheDtype::kBf16, KvCacheDtype::kFp8};
    case EngineKind::kLlamacpp:
      return {KvCacheDtype::kFp16, KvCacheDtype::kBf16, KvCacheDtype::kInt8, KvCacheDtype::kInt4};
  }
  return {};
}

}  // namespace infergate::op::api
