// `generate`: load a model (optionally hashing it against a verified manifest while loading) and
// generate from one prompt. Thin flag parsing over runtime/engine (engine.h).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "infergate/common/json.h"
#include "infergate/engine/engine.h"
#include "infergate/runtime/model/model.h"

namespace infergate::runtime::cli {
namespace {
namespace e = infergate::runtime::engine;

// Exit codes: 0 generated; 1 refused or failed (the reason word is printed); 2 usage (CLI11);
// 3 the model's bytes did not match the verified manifest (or the manifest itself was refused).
constexpr int kExitFailed = 1;
constexpr int kExitVerification = 3;

bool is_verification_failure(const Error& err) {
  const std::string& r = err.reason();
  return r == "DigestMismatch" || r == "UnlistedFile" || r == "ManifestMalformed" ||
         r == "ManifestTooLarge" || r == "UnsafePath" || r == "DuplicateEntry";
}

int fail(const Error& err, bool json) {
  if (json) {
    Json d = Json::object();
    for (const auto& [k, v] : err.details()) d[k] = v;
    Json j = {{"error",
               {{"code", std::string(error_code_name(err.code()))},
                {"reason", err.reason()},
                {"message", err.message()},
                {"details", d}}}};
    std::cout << dump_json(j) << "\n";
  }
  std::cerr << "infergate-runtime generate: " << err.to_string() << "\n";
  return is_verification_failure(err) ? kExitVerification : kExitFailed;
}

struct GenerateFlags {
  std::string model, weight_format, kv_dtype, prompt, device = "cpu";
  std::string manifest;
  std::string smooth_keys = "auto";
  int32_t max_tokens = 32;
  uint64_t seed = 0;
  double temperature = 0.0;
  int32_t top_k = 0;
  double top_p = 1.0;
  int32_t logprobs = 0;
  std::vector<std::string> stop;
  int64_t max_context = 0;
  int threads = 0;
  int32_t tensor_parallel = 1;
  std::string cuda_graphs = "on";
  bool json = false;
  bool ignore_eos = false;
};

int run_generate(const GenerateFlags& f) {
  auto wf = e::parse_weight_format(f.weight_format);
  if (!wf.ok()) return fail(wf.error(), f.json);
  auto kv = e::parse_kv_cache_dtype(f.kv_dtype);
  if (!kv.ok()) return fail(kv.error(), f.json);
  e::EngineConfig config;
  config.model_dir = f.model;
  config.weight_format = *wf;
  config.kv_dtype = *kv;
  config.max_sequences = 1;
  config.device = f.device;
  config.tensor_parallel = f.tensor_parallel;
  config.cuda_graphs = f.cuda_graphs == "on";
  config.threads = f.threads;
  auto smooth = e::parse_smooth_keys(f.smooth_keys);
  if (!smooth.ok()) return fail(smooth.error(), f.json);
  config.smooth_keys = *smooth;
  if (!f.manifest.empty()) config.verified_manifest = f.manifest;
  e::SamplingParams params;
  params.max_tokens = f.max_tokens;
  params.seed = f.seed;
  params.temperature = f.temperature;
  params.top_k = f.top_k;
  params.top_p = f.top_p;
  params.top_logprobs = f.logprobs;
  params.stop_strings = f.stop;
  params.ignore_eos = f.ignore_eos;
  if (auto s = e::validate_sampling(params); !s.ok()) return fail(s.error(), f.json);

  // The context this one request needs (unless given): prompt plus max_tokens, which the model must
  // support; the KV pool is sized for exactly that.
  config.max_context = f.max_context;
  auto loaded = [&]() -> Result<e::LoadedEngine> {
    if (config.max_context > 0) return e::load_engine(config);
    config.max_context = 1;  // a placeholder pool, resized below once the prompt is tokenized
    return e::load_engine(config);
  }();
  if (!loaded.ok()) return fail(loaded.error(), f.json);
  std::vector<int32_t> prompt = loaded->engine->tokenize(f.prompt);
  if (f.max_context == 0) {
    // A pool that fits this request, over the loaded weights (no second read).
    e::EngineOptions eo;
    eo.kv_dtype = config.kv_dtype;
    eo.max_sequences = 1;
    eo.max_context = static_cast<int64_t>(prompt.size()) + params.max_tokens;
    auto engine = e::Engine::reconfigure(std::move(loaded->engine), eo);
    if (!engine.ok()) return fail(engine.error(), f.json);
    loaded->engine = std::move(*engine);
  }
  e::Engine& engine = *loaded->engine;
  const bool stream = !f.json;
  auto result = e::generate(engine, prompt, params, [&](std::string_view piece) {
    if (stream) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
  });
  if (!result.ok()) return fail(result.error(), f.json);
  const e::GenerationResult& r = *result;
  const auto& tok = engine.model().tokenizer();
  const double tps = r.tokens.size() > 1 && r.decode_seconds > 0
                         ? static_cast<double>(r.tokens.size() - 1) / r.decode_seconds
                         : 0.0;
  if (f.json) {
    Json tokens = Json::array();
    for (const auto& t : r.tokens) {
      Json top = Json::array();
      for (const auto& a : t.top) {
        top.push_back(
            {{"id", a.token}, {"text", std::string(tok.token_bytes(a.token))}, {"logprob", a.logprob}});
      }
      Json jt = {{"id", t.token}, {"text", std::string(tok.token_bytes(t.token))}, {"logprob", t.logprob}};
      if (params.top_logprobs > 0) jt["top_logprobs"] = top;
      tokens.push_back(jt);
    }
    const auto& info = engine.info();
    Json j = {{"model", f.model},
              {"architecture", info.architecture},
              {"weight_format", std::string(e::weight_format_name(info.weight_format))},
              {"kv_cache_dtype", std::string(e::kv_cache_dtype_name(info.kv_dtype))},
              {"kv_key_smoothing", e::smooth_keys_enabled(config.smooth_keys, config.kv_dtype)},
              {"verified", loaded->report.verified},
              {"prompt_tokens", r.prompt_tokens.size()},
              {"completion_tokens", r.tokens.size()},
              {"text", r.text},
              {"finish_reason", std::string(e::finish_reason_name(r.finish))},
              {"tokens", tokens},
              {"weight_bytes", info.weight_bytes},
              {"kv_bytes", info.kv_bytes},
              {"timing",
               {{"load_seconds", loaded->report.load_seconds},
                {"hash_seconds", loaded->report.hash_seconds},
                {"time_to_first_token_seconds", r.prefill_seconds},
                {"decode_seconds", r.decode_seconds},
                {"decode_tokens_per_second", tps}}}};
    std::cout << dump_json(j) << "\n";
  } else {
    std::printf("\n");
    std::fprintf(
        stderr,
        "[%zu prompt + %zu generated tokens, finish: %s; load %.3f s%s, first token %.3f s, %.1f tok/s]\n",
        r.prompt_tokens.size(), r.tokens.size(), std::string(e::finish_reason_name(r.finish)).c_str(),
        loaded->report.load_seconds, loaded->report.verified ? " (verified)" : "", r.prefill_seconds, tps);
    if (params.top_logprobs > 0 || f.logprobs > 0) {
      for (const auto& t : r.tokens) {
        std::fprintf(stderr, "%6d %-16s %9.4f", t.token,
                     dump_json(Json(std::string(tok.token_bytes(t.token)))).c_str(), t.logprob);
        for (const auto& a : t.top) std::fprintf(stderr, "  %d:%.3f", a.token, a.logprob);
        std::fprintf(stderr, "\n");
      }
    }
  }
  return 0;
}

const bool kGenerate = register_command(
    {"generate", "generate text from one prompt with a model in a given weight format and KV-cache dtype",
     [](CLI::App& app) {
       auto f = std::make_shared<GenerateFlags>();
       app.add_option("--model", f->model, "model directory (Hugging Face layout)")->required();
       app.add_option("--weight-format", f->weight_format,
                      "fp16 or bf16 (dense checkpoints; converted at load if stored otherwise), int8 or int4 "
                      "(checkpoints written by `quantize` in that format), fp32 (reference)")
           ->required();
       app.add_option("--kv-cache-dtype", f->kv_dtype,
                      "fp16, bf16, fp8, int8, int4, int4-kivi (or fp32, reference)")
           ->required();
       app.add_option("--prompt", f->prompt, "prompt text")->required();
       app.add_option("--max-tokens", f->max_tokens, "tokens to generate at most")->capture_default_str();
       app.add_option("--seed", f->seed, "seed of the sampling generator")->capture_default_str();
       app.add_option("--temperature", f->temperature, "0: greedy")->capture_default_str();
       app.add_option("--top-k", f->top_k, "0: no limit")->capture_default_str();
       app.add_option("--top-p", f->top_p, "nucleus mass in (0, 1]")->capture_default_str();
       app.add_option("--logprobs", f->logprobs, "report the top-K log-probabilities of each token (0..20)")
           ->capture_default_str();
       app.add_option("--stop", f->stop, "stop string (repeatable)");
       app.add_flag("--ignore-eos", f->ignore_eos, "keep generating past the model's end-of-sequence tokens");
       app.add_option("--max-context-length", f->max_context,
                      "KV pool context (default: prompt + max tokens); refused beyond the model's")
           ->capture_default_str();
       app.add_option(
              "--kv-key-smoothing", f->smooth_keys,
              "auto (on for fp8/int8/int4 KV), on or off: rescale outlier key channels into the queries "
              "at load")
           ->capture_default_str();
       app.add_option(
           "--verified-manifest", f->manifest,
           "SHA256SUMS of the model directory: hash every file while loading, refuse on a mismatch");
       app.add_option("--device", f->device, "cpu, cuda, or auto (CUDA when a GPU is present)")
           ->capture_default_str();
       app.add_option("--tensor-parallel", f->tensor_parallel, "GPUs to split the model over (--device cuda)")
           ->capture_default_str()
           ->check(CLI::Range(1, 64));
       app.add_option("--cuda-graphs", f->cuda_graphs,
                      "on or off: decode steps replay captured CUDA graphs (--device cuda)")
           ->capture_default_str()
           ->check(CLI::IsMember({"on", "off"}));
       app.add_option("--threads", f->threads, "CPU threads (0: all cores)")->capture_default_str();
       app.add_flag("--json", f->json, "print one JSON object instead of streaming text");
       return [f]() { return run_generate(*f); };
     }});

}  // namespace
}  // namespace infergate::runtime::cli
