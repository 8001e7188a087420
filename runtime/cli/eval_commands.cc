// `eval` and `report`: thin flag parsing over runtime/eval (compare.h, report.h).
// Exit codes (docs/eval-and-report.md): eval 0 every threshold passed, 1 a threshold failed, 2 usage, 3
// inconclusive (could not run, or a threshold on a metric it could not measure); report 0 written, 1
// could not run or write, 2 usage.
#include <fcntl.h>
#include <unistd.h>

#include <iostream>
#include <memory>

#include "cli/command.h"
#include "infergate/common/fs.h"
#include "infergate/runtime/eval/compare.h"
#include "infergate/runtime/eval/report.h"
#include "infergate/runtime/eval/suite.h"
#include "infergate/runtime/eval/target.h"
#include "infergate/runtime/planner/gpu_catalog.h"

namespace infergate::runtime::cli {
namespace {
namespace ev = infergate::runtime::eval;

constexpr int kExitPassed = 0, kExitFailed = 1, kExitUsage = 2, kExitInconclusive = 3;

// Kubernetes' termination-message file is created by the kubelet in a directory we may not write
// (/dev): it is truncated and written in place, not replaced by a rename.
Status write_termination_message(const std::string& path, const std::string& json) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return errno_error("opening the termination-message file " + path, errno);
  return write_all(fd.get(), json + "\n", path);
}

struct SideFlags {
  std::string target;
  std::string weight_format;
  std::string kv_dtype;
  std::string model;
};

struct EvalFlags {
  SideFlags baseline, candidate;
  std::string suite = "default";
  bool json = false;
  double min_top1 = 0, max_kl = 0, max_ppl = 0, min_retrieval = 0, min_format = 0;
  CLI::Option *o_min_top1 = nullptr, *o_max_kl = nullptr, *o_max_ppl = nullptr, *o_min_retrieval = nullptr,
              *o_min_format = nullptr;
  std::string termination_path;
  int64_t max_context = 0;
  int32_t top_logprobs = 0;
  bool no_noise_floor = false;
  int threads = 0;
  std::string device = "cpu";
  int32_t tensor_parallel = 1;
  double timeout_seconds = 300;
};

void add_side(CLI::App& app, const char* side, SideFlags& f) {
  const std::string s = side;
  app.add_option("--" + s, f.target, "a server's URL (http://host:port) or a model directory")->required();
  app.add_option("--" + s + "-weight-format", f.weight_format,
                 "model directory only: fp16, bf16, int8 or int4 (default: the directory's own format)");
  app.add_option("--" + s + "-kv-cache-dtype", f.kv_dtype,
                 "model directory only: fp16, bf16, fp8, int8, int4 or int4-kivi (default fp16)");
  app.add_option("--" + s + "-model", f.model,
                 "URL only: the model name to ask for (default: the first in /v1/models)");
}

// Builds one side's target; usage errors (flags that do not fit the kind of target, unknown names)
// come back with reason "Usage".
Result<std::unique_ptr<ev::Target>> make_target(const char* side, const SideFlags& f,
                                                const EvalFlags& flags) {
  const std::string s = side;
  if (ev::is_url(f.target)) {
    if (!f.weight_format.empty() || !f.kv_dtype.empty()) {
      return invalid_argument("--" + s + "-weight-format and --" + s +
                              "-kv-cache-dtype apply to a model directory; a server serves its own settings")
          .with_reason("Usage");
    }
    ev::HttpTargetOptions o;
    o.url = f.target;
    o.model = f.model;
    o.timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_seconds * 1000));
    auto t = ev::HttpTarget::connect(o);
    if (!t.ok()) return std::move(t).error().context("--" + s);
    return std::unique_ptr<ev::Target>(std::move(*t));
  }
  if (!f.model.empty()) {
    return invalid_argument("--" + s + "-model applies to a URL, not to a model directory")
        .with_reason("Usage");
  }
  ev::EngineTargetOptions o;
  o.model_dir = f.target;
  if (!f.weight_format.empty()) {
    auto w = engine::parse_weight_format(f.weight_format);
    if (!w.ok()) return std::move(w).error().context("--" + s + "-weight-format").with_reason("Usage");
    o.weight_format = *w;
  }
  if (!f.kv_dtype.empty()) {
    auto d = engine::parse_kv_cache_dtype(f.kv_dtype);
    if (!d.ok()) return std::move(d).error().context("--" + s + "-kv-cache-dtype").with_reason("Usage");
    o.kv_dtype = *d;
  }
  o.max_context = flags.max_context;
  o.threads = flags.threads;
  o.device = flags.device;
  o.tensor_parallel = flags.tensor_parallel;
  std::error_code ec;
  if (!std::filesystem::is_directory(o.model_dir, ec)) {
    return not_found("--" + s + " " + f.target + ": neither an http(s):// URL nor a model directory")
        .with_reason("TargetNotFound");
  }
  auto t = ev::EngineTarget::open(o);
  if (!t.ok()) return std::move(t).error().context("--" + s);
  return std::unique_ptr<ev::Target>(std::move(*t));
}

int run_eval_command(const EvalFlags& f) {
  ev::Thresholds th;
  if (f.o_min_top1->count()) th.min_top1_agreement = f.min_top1;
  if (f.o_max_kl->count()) th.max_mean_kl = f.max_kl;
  if (f.o_max_ppl->count()) th.max_perplexity_change = f.max_ppl;
  if (f.o_min_retrieval->count()) th.min_retrieval_accuracy = f.min_retrieval;
  if (f.o_min_format->count()) th.min_format_following = f.min_format;

  const std::string& suite_name = f.suite;
  // Every way out writes the same JSON to the termination-message file (when asked) and, with --json,
  // to stdout; a human message goes to stderr.
  auto finish = [&](int code, const std::string& json) {
    if (!f.termination_path.empty()) {
      Status s = write_termination_message(f.termination_path, json);
      if (!s.ok()) std::cerr << "infergate-runtime eval: " << s.error().to_string() << "\n";
    }
    if (f.json) std::cout << json << "\n";
    return code;
  };
  auto fail = [&](int code, const Error& e) {
    std::cerr << "infergate-runtime eval: " << e.to_string() << "\n";
    return finish(code, ev::error_json(suite_name, e));
  };

  if (Status s = ev::validate_thresholds(th); !s.ok()) return fail(kExitUsage, s.error());
  if (f.top_logprobs < 0 || f.top_logprobs > 20) {
    return fail(kExitUsage, invalid_argument("--top-logprobs: must be between 1 and 20 (0: the suite's)"));
  }
  if (!(f.timeout_seconds > 0))
    return fail(kExitUsage, invalid_argument("--request-timeout: must be positive"));
  auto suite = ev::load_suite(f.suite);
  if (!suite.ok()) {
    // A name or file the user gave that is not a suite is a usage error; an unreadable file is not.
    return fail(suite.error().reason() == "SuiteUnreadable" ? kExitInconclusive : kExitUsage, suite.error());
  }
  auto side_error = [&](Error e) {
    return fail(e.reason() == "Usage" || e.reason() == "BadTarget" ? kExitUsage : kExitInconclusive, e);
  };
  auto baseline = make_target("baseline", f.baseline, f);
  if (!baseline.ok()) return side_error(std::move(baseline).error());
  auto candidate = make_target("candidate", f.candidate, f);
  if (!candidate.ok()) return side_error(std::move(candidate).error());

  ev::EvalOptions options;
  options.top_logprobs = f.top_logprobs;
  options.noise_floor = !f.no_noise_floor;
  options.progress = [](const std::string& line) { std::cerr << "eval " << line << "\n"; };
  auto result = ev::run_eval(*suite, **baseline, **candidate, options);
  if (!result.ok()) return fail(kExitInconclusive, result.error());
  ev::apply_thresholds(*result, th);
  // The result names the suite as the caller asked for it (a bundled name, or the file's path), so the
  // rollout can check that the check ran the suite its spec names; a file's inner name is for people.
  result->suite = f.suite;
  if (!f.json) std::cout << ev::result_table(*result, th);
  const int code = !result->failed.empty()       ? kExitFailed
                   : !result->unmeasured.empty() ? kExitInconclusive
                                                 : kExitPassed;
  return finish(code, ev::result_json(*result));
}

const bool kEval = register_command(
    {"eval", "compare a candidate with a baseline (each a server URL or a model directory) on a fixed suite",
     [](CLI::App& app) {
       auto f = std::make_shared<EvalFlags>();
       add_side(app, "baseline", f->baseline);
       add_side(app, "candidate", f->candidate);
       app.add_option("--suite", f->suite, "a bundled suite's name (default) or a suite file (.json)")
           ->capture_default_str();
       app.add_flag("--json", f->json, "print the result as one JSON object (and no table)");
       f->o_min_top1 =
           app.add_option("--min-top1-agreement", f->min_top1, "fail below this top-1 agreement (0..1)");
       f->o_max_kl =
           app.add_option("--max-mean-kl", f->max_kl, "fail above this mean KL of the top logprobs (nats)");
       f->o_max_ppl = app.add_option("--max-perplexity-change", f->max_ppl,
                                     "fail above this relative perplexity change ((cand - base) / base)");
       f->o_min_retrieval = app.add_option("--min-retrieval-accuracy", f->min_retrieval,
                                           "fail below this needle retrieval accuracy");
       f->o_min_format = app.add_option("--min-format-following", f->min_format,
                                        "fail below this JSON format-following rate");
       app.add_option("--termination-message-path", f->termination_path,
                      "also write the JSON result here (at most 4096 bytes; Kubernetes reads it as the "
                      "termination message)");
       app.add_option("--max-context-length", f->max_context,
                      "model directories: context to allocate (0: the model's)")
           ->capture_default_str();
       app.add_option("--top-logprobs", f->top_logprobs, "alternatives per token, 1..20 (0: the suite's)")
           ->capture_default_str();
       app.add_flag("--no-noise-floor", f->no_noise_floor,
                    "skip the noise-floor run (the baseline against itself)");
       app.add_option("--threads", f->threads, "model directories: CPU threads (0: the kernels' default)");
       app.add_option("--device", f->device,
                      "model directories: cpu, cuda, or auto (CUDA when a GPU is present)")
           ->capture_default_str();
       app.add_option("--tensor-parallel", f->tensor_parallel, "model directories: GPUs to split over (cuda)")
           ->capture_default_str()
           ->check(CLI::Range(1, 64));
       app.add_option("--request-timeout", f->timeout_seconds, "URLs: seconds per request")
           ->capture_default_str();
       return [f]() { return run_eval_command(*f); };
     }});

struct ReportFlags {
  std::string model, out = "report", int8_model, int4_model, suite = "default", memory = "80GiB", gpu;
  std::vector<std::string> weight_formats = {"fp16", "int8", "int4"};
  std::vector<std::string> kv_dtypes = {"fp16", "fp8", "int8", "int4"};
  int64_t max_context = 0;
  int32_t chart_concurrency = 1, perf_tokens = 32, perf_repeats = 3;
  int threads = 0;
  std::string device = "cpu";
  int32_t tensor_parallel = 1;
  bool no_verify = false;
};

int report_fail(int code, const Error& e) {
  std::cerr << "infergate-runtime report: " << e.to_string() << "\n";
  return code;
}

int run_report_command(const ReportFlags& f) {
  ev::ReportOptions o;
  o.model_dir = f.model;
  o.weight_formats.clear();
  for (const auto& name : f.weight_formats) {
    auto w = engine::parse_weight_format(name);
    if (!w.ok()) return report_fail(kExitUsage, std::move(w).error().context("--weight-formats"));
    o.weight_formats.push_back(*w);
  }
  o.kv_dtypes.clear();
  for (const auto& name : f.kv_dtypes) {
    auto d = engine::parse_kv_cache_dtype(name);
    if (!d.ok()) return report_fail(kExitUsage, std::move(d).error().context("--kv-cache-dtypes"));
    o.kv_dtypes.push_back(*d);
  }
  if (!f.int8_model.empty()) o.weight_dirs[engine::WeightFormat::kInt8] = f.int8_model;
  if (!f.int4_model.empty()) o.weight_dirs[engine::WeightFormat::kInt4] = f.int4_model;
  auto mem = ev::parse_bytes(f.memory);
  if (!mem.ok()) return report_fail(kExitUsage, std::move(mem).error().context("--memory"));
  o.memory_bytes = *mem;
  if (!f.gpu.empty()) {
    auto g = infergate::runtime::planner::find_gpu(f.gpu);
    if (!g.ok()) return report_fail(kExitUsage, std::move(g).error().context("--gpu"));
    o.gpu = g->name;
  }
  if (f.chart_concurrency < 1)
    return report_fail(kExitUsage, invalid_argument("--chart-concurrency: must be >= 1"));
  if (f.perf_tokens < 2) return report_fail(kExitUsage, invalid_argument("--perf-tokens: must be >= 2"));
  if (f.perf_repeats < 1) return report_fail(kExitUsage, invalid_argument("--perf-repeats: must be >= 1"));
  if (f.max_context < 0)
    return report_fail(kExitUsage, invalid_argument("--max-context-length: must not be negative"));
  auto suite = ev::load_suite(f.suite);
  if (!suite.ok()) return report_fail(kExitUsage, suite.error());
  o.suite = std::move(*suite);
  o.max_context = f.max_context;
  o.chart_concurrency = f.chart_concurrency;
  o.perf_tokens = f.perf_tokens;
  o.perf_repeats = f.perf_repeats;
  o.threads = f.threads;
  o.device = f.device;
  o.tensor_parallel = f.tensor_parallel;
  o.verify = !f.no_verify;
  o.progress = [](const std::string& line) { std::cerr << "report " << line << "\n"; };
  auto rep = ev::run_report(o);
  if (!rep.ok()) return report_fail(1, rep.error());
  if (Status s = ev::write_report(*rep, f.out); !s.ok()) return report_fail(1, s.error());
  std::cout << ev::report_markdown(*rep) << "\nwrote "
            << (std::filesystem::path(f.out) / "report.html").string() << ", report.md, report.json\n";
  return 0;
}

const bool kReport = register_command(
    {"report",
     "run every weight format x KV dtype on a model and write an HTML/Markdown/JSON comparison report",
     [](CLI::App& app) {
       auto f = std::make_shared<ReportFlags>();
       app.add_option("--model", f->model, "the dense model directory (the fp16 baseline)")->required();
       app.add_option("--out", f->out, "output directory (report.html, report.md, report.json)")
           ->capture_default_str();
       app.add_option("--int8-model", f->int8_model,
                      "an int8 copy of the model (default: quantized into a temp dir)");
       app.add_option("--int4-model", f->int4_model,
                      "an int4 copy of the model (default: quantized into a temp dir)");
       app.add_option("--weight-formats", f->weight_formats, "weight formats to run")
           ->delimiter(',')
           ->capture_default_str();
       app.add_option("--kv-cache-dtypes", f->kv_dtypes, "KV dtypes to run (int4-kivi too)")
           ->delimiter(',')
           ->capture_default_str();
       app.add_option("--suite", f->suite, "a bundled suite or a suite file")->capture_default_str();
       auto* memory = app.add_option("--memory", f->memory,
                                     "usable GPU memory the capacity group plans for (e.g. 141GB, 80GiB)")
                          ->capture_default_str();
       app.add_option("--gpu", f->gpu, "plan capacity for a catalogue GPU instead (h100, h200, ...)")
           ->excludes(memory);
       app.add_option("--max-context-length", f->max_context, "the configured context (0: the model's)")
           ->capture_default_str();
       app.add_option("--chart-concurrency", f->chart_concurrency, "sequences in the memory-vs-context chart")
           ->capture_default_str();
       app.add_option("--perf-tokens", f->perf_tokens, "tokens generated per prompt when timing")
           ->capture_default_str();
       app.add_option("--perf-repeats", f->perf_repeats, "runs per prompt when timing (the fastest counts)")
           ->capture_default_str();
       app.add_option("--threads", f->threads, "CPU threads (0: the kernels' default)");
       app.add_option("--device", f->device, "cpu, cuda, or auto (CUDA when a GPU is present)")
           ->capture_default_str();
       app.add_option("--tensor-parallel", f->tensor_parallel, "GPUs to split each model over (cuda)")
           ->capture_default_str()
           ->check(CLI::Range(1, 64));
       app.add_flag("--no-verify", f->no_verify,
                    "do not hash-while-load against the directories' SHA256SUMS");
       return [f]() { return run_report_command(*f); };
     }});

}  // namespace
}  // namespace infergate::runtime::cli
