// The engine tables. Every row names the source it was read from; "(sources)" below abbreviates:
//   vLLM    vllm-project/vllm vllm/engine/arg_utils.py and vllm/config/cache.py (~v0.11, 2025-10),
//           vllm/utils/argparse_utils.py (FlexibleArgumentParser: `--a_b` is `--a-b`, `--a=b`
//           kept, argparse's allow_abbrev left on), vllm/v1/metrics/loggers.py (metric names; the
//           TPOT histogram was renamed inter_token_latency in v0.11, hidden in v0.12, removed 2026-01),
//           vllm/entrypoints/openai/cli_args.py (--host, --port), prometheus_fastapi_instrumentator's
//           http_requests_total{handler,status} beside them on /metrics.
//   SGLang  sgl-project/sglang python/sglang/srt/server_args.py (plain argparse: prefixes accepted,
//           no underscore rewriting; --model-path has the alias --model, --tp-size the alias
//           --tensor-parallel-size), python/sglang/srt/metrics/collector.py (names; /metrics only
//           with --enable-metrics), server_args_config_parser.py (--config FILE.yaml).
//   llama.cpp ggml-org/llama.cpp common/arg.cpp (exact names, `--a_b` is `--a-b`, no `--a=b`; every
//           option also read from a LLAMA_ARG_* variable; -fa takes on|off|auto since build b6327,
//           2025-08-31, a bare switch before), tools/server (llamacpp:* counters and gauges only,
//           no latency histograms, no request counter; /metrics only with --metrics).
#include "infergate/operator/api/engine_profile.h"

namespace infergate::op::api {
namespace {

SeriesSelector series(std::string name, std::map<std::string, std::vector<std::string>> labels = {}) {
  return SeriesSelector{std::move(name), std::move(labels)};
}

// The operator's own knobs, spelled the way each engine spells them.
OwnedFlag flag(std::string field, std::vector<std::string> spellings) {
  return OwnedFlag{std::move(field), std::move(spellings)};
}

constexpr const char* kModel = "spec.artifact (the verified model directory)";
constexpr const char* kName = "the operator (the served model name)";
constexpr const char* kListen = "the operator (the pod's port and address)";
constexpr const char* kContext = "spec.serving.maxContextLength";
constexpr const char* kConcurrency = "spec.serving.maxConcurrency";
constexpr const char* kKv = "spec.serving.kvCacheDtype";
constexpr const char* kDtype = "spec.serving.weightFormat";
constexpr const char* kQuant = "spec.engine.quantization";
constexpr const char* kTp = "spec.resources (one tensor-parallel rank per GPU)";
constexpr const char* kMetrics = "the operator (the performance gate scrapes /metrics)";
constexpr const char* kUnverified = "nothing: it loads input the agent did not verify";

// A writable cache for everything Python engines write at start (Torch inductor, Triton, Hugging
// Face, vLLM's own): the root filesystem is read-only; /tmp is an emptyDir.
std::map<std::string, std::string> python_env() {
  return {{"HOME", "/tmp"},
          // getpass.getuser() reads LOGNAME/USER before the passwd database, which has no entry for
          // the pod's uid 65532: without these Torch's inductor (vLLM >= 0.20, torch >= 2.11) dies at
          // start (vllm-project/vllm#44548; on v0.22 / v0.23, vllm-project/vllm#46734).
          {"USER", "infergate"},
          {"LOGNAME", "infergate"},
          {"XDG_CACHE_HOME", "/tmp/.cache"},
          {"TORCHINDUCTOR_CACHE_DIR", "/tmp/.cache/torchinductor"},
          {"TRITON_CACHE_DIR", "/tmp/.cache/triton"},
          {"HF_HOME", "/tmp/.cache/huggingface"},
          {"HF_HUB_OFFLINE", "1"},  // the artifact is local: never reach a hub
          {"TRANSFORMERS_OFFLINE", "1"}};
}

EngineProfile bundled_row() {
  EngineProfile p;
  p.kind = EngineKind::kBundled;
  p.name = "the bundled runtime";
  p.release = "this release";
  p.command = {"infergate-runtime"};
  p.grammar = {.equals_form = true};  // CLI11
  p.owned = {flag(kModel, {"--model"}),
             flag(kDtype, {"--weight-format"}),
             flag(kKv, {"--kv-cache-dtype"}),
             flag(kContext, {"--max-context-length"}),
             flag(kConcurrency, {"--max-concurrency"}),
             flag("the operator (hash-while-load)", {"--verified-manifest"}),
             flag(kName, {"--served-model-name"}),
             flag(kListen, {"--host", "--port"})};
  p.kv_cache_dtype = {{KvCacheDtype::kFp16, "fp16"},
                      {KvCacheDtype::kBf16, "bf16"},
                      {KvCacheDtype::kFp8, "fp8"},
                      {KvCacheDtype::kInt8, "int8"},
                      {KvCacheDtype::kInt4, "int4"}};
  p.metrics.ttft = {series("infergate_time_to_first_token_seconds")};
  p.metrics.tpot = {series("infergate_time_per_output_token_seconds")};
  p.metrics.requests = {series("infergate_requests_total")};
  p.metrics.errors = {series("infergate_request_errors_total")};
  return p;
}

EngineProfile vllm_row() {
  EngineProfile p;
  p.kind = EngineKind::kVllm;
  p.name = "vLLM";
  p.release = "v0.6.0 and later";
  p.since = {0, 6, 0};
  p.command = {"python3", "-m", "vllm.entrypoints.openai.api_server"};
  p.grammar = {.equals_form = true,
               .underscores_are_dashes = true,
               .abbreviations = true,
               .attached_short_values = true};
  p.owned = {flag(kModel, {"--model"}),
             flag(kName, {"--served-model-name"}),
             flag(kListen, {"--host", "--port", "--uds"}),
             flag(kContext, {"--max-model-len"}),
             flag(kConcurrency, {"--max-num-seqs"}),
             flag(kKv, {"--kv-cache-dtype"}),
             flag(kDtype, {"--dtype"}),
             flag(kQuant, {"--quantization", "-q"}),
             flag(kTp, {"--tensor-parallel-size", "-tp"})};
  // --trust-remote-code stays allowed: the code it runs is the artifact's own (verified) Python files,
  // and HF_HUB_OFFLINE keeps a hub's out (Kimi K2's tokenizer needs it).
  p.unverified_inputs = {
      flag(kUnverified, {"--config"}),  // a YAML file of more flags, read before this check could see them
      flag(kUnverified,
           {"--tokenizer", "--hf-config-path", "--download-dir", "--load-format",
            "--model-loader-extra-config", "--revision", "--code-revision", "--tokenizer-revision",
            "--speculative-config", "--lora-modules", "--qlora-adapter-name-or-path", "--hf-token"})};
  p.kv_cache_dtype = {
      {KvCacheDtype::kFp16, "auto"}, {KvCacheDtype::kBf16, "auto"}, {KvCacheDtype::kFp8, "fp8"}};
  // experts_int8 is not here: it quantizes bf16 weights while loading, so what is served is not the
  // signed int8 release.
  p.quantization_methods = {
      {WeightFormat::kInt8, {"compressed-tensors", "gptq", "gptq_marlin", "bitsandbytes"}},
      {WeightFormat::kInt4,
       {"awq", "awq_marlin", "compressed-tensors", "gptq", "gptq_marlin", "bitsandbytes"}}};
  // awq and gptq are left to the engine, which reads quant_method from config.json and upgrades it
  // to the Marlin kernels where the GPU has them; naming awq/gptq explicitly keeps the slow kernels.
  p.quantization_passed = {"awq_marlin", "gptq_marlin", "bitsandbytes"};
  p.env = python_env();
  p.env["VLLM_NO_USAGE_STATS"] = "1";
  p.env["VLLM_CACHE_ROOT"] = "/tmp/.cache/vllm";
  p.metrics.ttft = {series("vllm:time_to_first_token_seconds")};
  p.metrics.tpot = {series("vllm:inter_token_latency_seconds"), series("vllm:time_per_output_token_seconds")};
  p.metrics.requests = {series("vllm:request_success_total")};
  p.metrics.errors = {series("http_requests_total", {{"handler", {"/v1/completions", "/v1/chat/completions"}},
                                                     {"status", {"5xx"}}})};
  p.metrics.errors_in_requests = false;  // a request that failed never finished, so it is not a success
  return p;
}

EngineProfile sglang_row() {
  EngineProfile p;
  p.kind = EngineKind::kSglang;
  p.name = "SGLang";
  p.release = "v0.4.0 and later";
  p.since = {0, 4, 0};
  p.command = {"python3", "-m", "sglang.launch_server"};
  p.grammar = {.equals_form = true,
               .underscores_are_dashes = false,
               .abbreviations = true,
               .attached_short_values = true};
  p.owned = {flag(kModel, {"--model-path", "--model"}),
             flag(kName, {"--served-model-name"}),
             flag(kListen, {"--host", "--port"}),
             flag(kContext, {"--context-length"}),
             flag(kConcurrency, {"--max-running-requests"}),
             flag(kKv, {"--kv-cache-dtype"}),
             flag(kDtype, {"--dtype"}),
             flag(kQuant, {"--quantization"}),
             flag(kTp, {"--tp-size", "--tensor-parallel-size", "--tp"}),
             flag(kMetrics, {"--enable-metrics"})};
  p.unverified_inputs = {flag(kUnverified, {"--config"}),
                         flag(kUnverified, {"--tokenizer-path", "--download-dir", "--load-format",
                                            "--revision", "--speculative-draft-model-path", "--lora-paths"})};
  // SGLang has no plain "fp8": fp8_e4m3 is the format vLLM's "fp8" means.
  p.kv_cache_dtype = {
      {KvCacheDtype::kFp16, "auto"}, {KvCacheDtype::kBf16, "auto"}, {KvCacheDtype::kFp8, "fp8_e4m3"}};
  p.quantization_methods = {
      {WeightFormat::kInt8, {"compressed-tensors", "gptq", "w8a8_int8", "bitsandbytes"}},
      {WeightFormat::kInt4,
       {"awq", "awq_marlin", "compressed-tensors", "gptq", "gptq_marlin", "bitsandbytes"}}};
  p.quantization_passed = {"awq_marlin", "gptq_marlin", "w8a8_int8", "bitsandbytes"};
  p.env = python_env();
  p.metrics_flag = "--enable-metrics";
  p.metrics.ttft = {series("sglang:time_to_first_token_seconds")};
  p.metrics.tpot = {series("sglang:inter_token_latency_seconds"),
                    series("sglang:time_per_output_token_seconds")};
  p.metrics.requests = {series("sglang:num_requests_total")};
  // Aborted requests (a client that went away counts too): an upper bound of the failures.
  p.metrics.errors = {series("sglang:num_aborted_requests_total")};
  p.metrics.errors_in_requests = false;
  return p;
}

EngineProfile llamacpp_row(bool flash_attn_takes_value) {
  EngineProfile p;
  p.kind = EngineKind::kLlamacpp;
  p.name = "llama.cpp";
  p.release = flash_attn_takes_value ? "build b6327 and later (-fa on|off|auto)"
                                     : "builds before b6327 (-fa is a bare switch)";
  p.since = flash_attn_takes_value ? EngineVersion{0, 6327, 0} : EngineVersion{0, 0, 0};
  p.command = {"/app/llama-server"};  // the server images' entrypoint (.devops/*.Dockerfile)
  p.grammar = {.equals_form = false,
               .underscores_are_dashes = true,
               .abbreviations = false,
               .attached_short_values = false};
  p.owned = {flag(kModel, {"--model", "-m"}),
             flag(kName, {"--alias", "-a"}),
             flag(kListen, {"--host", "--port"}),
             flag(kContext, {"--ctx-size", "-c"}),
             flag(kConcurrency, {"--parallel", "-np"}),
             flag(kKv, {"--cache-type-k", "-ctk", "--cache-type-v", "-ctv"}),
             flag(kKv, {"--flash-attn", "-fa"}),
             flag(kTp, {"--n-gpu-layers", "--gpu-layers", "-ngl"}),
             flag(kMetrics, {"--metrics"})};
  p.unverified_inputs = {flag(kUnverified, {"--hf-repo",
                                            "-hf",
                                            "-hfr",
                                            "--hf-file",
                                            "-hff",
                                            "--hf-repo-draft",
                                            "-hfd",
                                            "-hfrd",
                                            "--hf-repo-v",
                                            "-hfv",
                                            "-hfrv",
                                            "--hf-file-v",
                                            "-hffv",
                                            "--model-url",
                                            "-mu",
                                            "--mmproj-url",
                                            "-mmu",
                                            "--docker-repo",
                                            "-dr",
                                            "--models-dir",
                                            "--models-preset",
                                            "--model-draft",
                                            "-md",
                                            "--lora",
                                            "--lora-scaled",
                                            "--control-vector",
                                            "--control-vector-scaled",
                                            "--mmproj",
                                            "-mm"})};
  p.env_flag_prefixes = {"LLAMA_ARG_", "LLAMA_OFFLINE"};
  p.kv_cache_dtype = {{KvCacheDtype::kFp16, "f16"},
                      {KvCacheDtype::kBf16, "bf16"},
                      {KvCacheDtype::kInt8, "q8_0"},
                      {KvCacheDtype::kInt4, "q4_0"}};
  p.env = {{"HOME", "/tmp"}};
  p.metrics_flag = "--metrics";
  // No latency histograms and no request counter: none of the three measurements.
  return p;
}

}  // namespace

const std::vector<EngineProfile>& engine_profiles() {
  static const std::vector<EngineProfile> rows = {bundled_row(), vllm_row(), sglang_row(),
                                                  llamacpp_row(false), llamacpp_row(true)};
  return rows;
}

}  // namespace infergate::op::api
