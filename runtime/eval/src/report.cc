// The comparison report: runs every combination, then renders JSON, Markdown and HTML with inline SVG.
#include "infergate/runtime/eval/report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/common/sha256.h"
#include "infergate/engine/block_manager.h"
#include "infergate/runtime/eval/target.h"
#include "infergate/runtime/model/quantize.h"
#include "infergate/runtime/planner/plan.h"

namespace infergate::runtime::eval {

namespace {

using Clock = std::chrono::steady_clock;
using engine::KvCacheDtype;
using engine::WeightFormat;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string combo_name(const ComboResult& r) { return r.weight_format + "/" + r.kv_dtype; }

// The release digest of a weight directory: the SHA-256 of its SHA256SUMS (what the signed release
// statement names as its subject).
std::optional<std::string> release_digest(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dir / "SHA256SUMS", ec)) return std::nullopt;
  auto text = read_file(dir / "SHA256SUMS");
  if (!text.ok()) return std::nullopt;
  auto d = sha256(*text);
  if (!d.ok()) return std::nullopt;
  return "sha256:" + d->hex();
}

struct WeightDir {
  std::filesystem::path path;
  std::string source;
  std::optional<TempDir> temp;  // a quantized copy, removed with the report
};

Result<WeightDir> weight_dir_for(WeightFormat wf, const ReportOptions& o) {
  WeightDir w;
  if (wf == WeightFormat::kF16) {
    w.path = o.model_dir;
    w.source = o.model_dir.string();
    return w;
  }
  auto given = o.weight_dirs.find(wf);
  if (given != o.weight_dirs.end()) {
    INFERGATE_ASSIGN_OR_RETURN(WeightFormat actual, directory_weight_format(given->second));
    if (actual != wf) {
      return invalid_argument("the " + std::string(engine::weight_format_name(wf)) + " directory " +
                              given->second.string() + " holds " +
                              std::string(engine::weight_format_name(actual)) + " weights")
          .with_reason("WeightFormatMismatch");
    }
    w.path = given->second;
    w.source = given->second.string();
    return w;
  }
  INFERGATE_ASSIGN_OR_RETURN(TempDir tmp, TempDir::create("infergate-report"));
  model::QuantizeOptions q;
  q.model = o.model_dir;
  q.out = tmp.path() / engine::weight_format_name(wf);
  q.scheme.format = wf == WeightFormat::kInt8 ? model::WeightFormat::kInt8 : model::WeightFormat::kInt4;
  q.scheme.group_size = wf == WeightFormat::kInt8 ? 0 : 128;
  q.scheme.symmetric = wf == WeightFormat::kInt8;
  q.threads = o.threads;
  auto rep = model::quantize_model(q);
  if (!rep.ok()) {
    return std::move(rep).error().context("quantizing " + o.model_dir.string() + " to " +
                                          std::string(engine::weight_format_name(wf)));
  }
  // The quantizer carries the source's other files over; a manifest or release statement among them
  // describes the source, not this copy.
  for (const char* stale : {"SHA256SUMS", "release.dsse.json"}) {
    std::error_code ec;
    std::filesystem::remove(q.out / stale, ec);
  }
  w.path = q.out;
  w.source =
      "quantized from " + o.model_dir.string() + " (" +
      (wf == WeightFormat::kInt8 ? std::string("int8 per channel") : std::string("int4 g128 asymmetric")) +
      ")";
  w.temp.emplace(std::move(tmp));
  return w;
}

Result<std::unique_ptr<EngineTarget>> open_target(const WeightDir& w, WeightFormat wf, KvCacheDtype kv,
                                                  const ReportOptions& o) {
  EngineTargetOptions eo;
  eo.model_dir = w.path;
  eo.weight_format = wf;
  eo.kv_dtype = kv;
  eo.max_context = o.max_context;
  eo.threads = o.threads;
  eo.device = o.device;
  eo.tensor_parallel = o.tensor_parallel;
  std::error_code ec;
  if (o.verify && std::filesystem::is_regular_file(w.path / "SHA256SUMS", ec))
    eo.verified_manifest = w.path / "SHA256SUMS";
  return EngineTarget::open(eo);
}

struct PerfSample {
  double ttft = 0, tpot = 0, tps = 0;
};

// Each prompt generates perf_tokens tokens (greedy, end-of-sequence ignored); of perf_repeats runs the
// fastest counts. TTFT: mean over prompts; time per output token: decode time / decode tokens over all
// prompts; throughput: generated tokens / generation time.
Result<PerfSample> measure(EngineTarget& t, const ReportOptions& o) {
  double ttft_sum = 0, decode_s = 0, total_s = 0;
  int64_t decode_tokens = 0, tokens = 0, prompts = 0;
  for (const Task& task : o.suite.tasks) {
    std::optional<Completion> best;
    for (int32_t rep = 0; rep < std::max(1, o.perf_repeats); ++rep) {
      CompletionRequest req{task.prompt, o.perf_tokens, 0, o.suite.seed, 0};
      INFERGATE_ASSIGN_OR_RETURN(Completion c, t.complete(req));
      if (!best || c.seconds < best->seconds) best = std::move(c);
    }
    if (best->tokens.empty()) continue;
    ++prompts;
    ttft_sum += best->first_token_seconds;
    decode_s += best->seconds - best->first_token_seconds;
    decode_tokens += static_cast<int64_t>(best->tokens.size()) - 1;
    total_s += best->seconds;
    tokens += static_cast<int64_t>(best->tokens.size());
  }
  if (prompts == 0) return failed_precondition("no prompt produced a token");
  PerfSample s;
  s.ttft = ttft_sum / static_cast<double>(prompts);
  s.tpot = decode_tokens > 0 ? decode_s / static_cast<double>(decode_tokens) : 0;
  s.tps = total_s > 0 ? static_cast<double>(tokens) / total_s : 0;
  return s;
}

namespace planner = infergate::runtime::planner;

// The capacity group's numbers are the planner's: what `infergate-runtime plan` prints for the same
// model directory, formats, context, concurrency and GPU memory (one GPU). `m` is the weight
// directory's config.json, so a compressed copy's own scheme (group size, zero points) is planned.
Result<planner::Plan> plan_for(const planner::LoadedModel& m, WeightFormat wf, KvCacheDtype kv,
                               int64_t context, int64_t concurrency, const ReportOptions& o) {
  planner::PlanInput in;
  in.config = m.config;
  in.model_name = m.name;
  if (!o.gpu.empty()) {
    in.gpu = o.gpu;
  } else {
    in.gpu_memory_bytes = o.memory_bytes;
  }
  INFERGATE_ASSIGN_OR_RETURN(planner::WeightFormat pwf,
                             planner::parse_weight_format(engine::weight_format_name(wf)));
  if (m.weights && m.weights->format == pwf) {
    in.weights = *m.weights;
  } else {
    in.weights.format = pwf;
  }
  INFERGATE_ASSIGN_OR_RETURN(in.kv_cache_dtype, planner::parse_kv_dtype(engine::kv_cache_dtype_name(kv)));
  in.max_context_length = context;
  in.max_concurrency = std::max<int64_t>(1, concurrency);
  return planner::plan(in);
}

}  // namespace

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt("%.0f B", b) : fmt("%.2f ", b) + units[u];
}

Result<int64_t> parse_bytes(std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(v) || v <= 0) {
    return invalid_argument("\"" + s + "\" is not a memory size (e.g. 141GB, 80GiB, 512MiB)");
  }
  std::string unit(end);
  static const std::vector<std::pair<std::string, double>> units = {
      {"", 1},      {"B", 1},        {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
      {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  for (const auto& [name, mult] : units) {
    if (unit == name) {
      const double bytes = v * mult;
      if (bytes >= 9.0e18) return invalid_argument("\"" + s + "\" is too large");
      return static_cast<int64_t>(bytes);
    }
  }
  return invalid_argument("\"" + s + "\": unknown unit \"" + unit +
                          "\" (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)");
}

Result<Report> run_report(const ReportOptions& o) {
  const auto t0 = Clock::now();
  if (o.gpu.empty() && o.memory_bytes <= 0) return invalid_argument("the memory budget must be positive");
  int64_t memory_bytes = o.memory_bytes;
  std::string gpu_name;
  if (!o.gpu.empty()) {
    INFERGATE_ASSIGN_OR_RETURN(planner::GpuSpec g, planner::find_gpu(o.gpu));
    memory_bytes = g.usable_bytes;
    gpu_name = g.name;
  }
  if (o.suite.tasks.empty()) return invalid_argument("the suite has no tasks");
  if (o.perf_tokens < 2) return invalid_argument("perf_tokens must be at least 2");
  if (o.kv_dtypes.empty() || o.weight_formats.empty()) return invalid_argument("nothing to run");
  for (WeightFormat wf : o.weight_formats) {
    if (wf != WeightFormat::kF16 && wf != WeightFormat::kInt8 && wf != WeightFormat::kInt4) {
      return invalid_argument("the report runs fp16, int8 and int4 weights, not " +
                              std::string(engine::weight_format_name(wf)));
    }
  }
  INFERGATE_ASSIGN_OR_RETURN(WeightFormat own, directory_weight_format(o.model_dir));
  if (own != WeightFormat::kF16) {
    return invalid_argument(o.model_dir.string() + " holds " + std::string(engine::weight_format_name(own)) +
                            " weights; the report needs the dense checkpoint (give compressed copies with "
                            "--int8-model / --int4-model)")
        .with_reason("WeightFormatMismatch");
  }
  auto say = [&](const std::string& line) {
    if (o.progress) o.progress(line);
  };

  std::vector<WeightFormat> wfs = {WeightFormat::kF16};
  for (WeightFormat wf : o.weight_formats) {
    if (std::find(wfs.begin(), wfs.end(), wf) == wfs.end()) wfs.push_back(wf);
  }
  std::vector<KvCacheDtype> kvs = {KvCacheDtype::kF16};
  for (KvCacheDtype kv : o.kv_dtypes) {
    if (std::find(kvs.begin(), kvs.end(), kv) == kvs.end()) kvs.push_back(kv);
  }
  auto asked = [&](WeightFormat wf, KvCacheDtype kv) {
    return (wf == WeightFormat::kF16 && kv == KvCacheDtype::kF16) ||
           (std::find(o.weight_formats.begin(), o.weight_formats.end(), wf) != o.weight_formats.end() &&
            std::find(o.kv_dtypes.begin(), o.kv_dtypes.end(), kv) != o.kv_dtypes.end());
  };
  size_t total = 0;
  for (WeightFormat wf : wfs) {
    for (KvCacheDtype kv : kvs) total += asked(wf, kv);
  }

  Report rep;
  rep.model = o.model_dir.string();
  rep.suite = o.suite.name;
  rep.memory_bytes = memory_bytes;
  rep.gpu = gpu_name;
  rep.chart_concurrency = o.chart_concurrency;
  rep.perf_tokens = o.perf_tokens;

  say("[1/" + std::to_string(total) + "] fp16 weights x fp16 KV (baseline): loading " + o.model_dir.string());
  WeightDir base_dir;
  base_dir.path = o.model_dir;
  base_dir.source = o.model_dir.string();
  INFERGATE_ASSIGN_OR_RETURN(auto baseline, open_target(base_dir, WeightFormat::kF16, KvCacheDtype::kF16, o));
  rep.max_context = baseline->engine().max_context();
  rep.architecture = baseline->engine().info().architecture;
  const int64_t ctx = rep.max_context;

  // Memory versus context per KV dtype, with fp16 weights: the planner's total at each context.
  auto dense = planner::load_model(o.model_dir);
  if (!dense.ok()) return std::move(dense).error().context("planning " + o.model_dir.string());
  for (KvCacheDtype kv : kvs) {
    if (std::find(o.kv_dtypes.begin(), o.kv_dtypes.end(), kv) == o.kv_dtypes.end()) continue;
    MemoryCurve curve;
    curve.kv_dtype = engine::kv_cache_dtype_name(kv);
    for (int i = 1; i <= 16; ++i) {
      const int64_t tokens = std::max<int64_t>(1, ctx * i / 16);
      auto p = plan_for(*dense, WeightFormat::kF16, kv, tokens, o.chart_concurrency, o);
      if (!p.ok()) return std::move(p).error().context("planning the memory chart");
      curve.points.emplace_back(tokens, p->total_bytes);
    }
    rep.memory_curves.push_back(std::move(curve));
  }

  std::optional<PerfSample> base_perf;
  size_t index = 0;
  for (WeightFormat wf : wfs) {
    std::optional<WeightDir> dir;
    std::optional<planner::LoadedModel> loaded_weights;
    for (KvCacheDtype kv : kvs) {
      if (!asked(wf, kv)) continue;
      ++index;
      const std::string label = "[" + std::to_string(index) + "/" + std::to_string(total) + "] " +
                                std::string(engine::weight_format_name(wf)) + " weights x " +
                                std::string(engine::kv_cache_dtype_name(kv)) + " KV";
      const bool is_base = wf == WeightFormat::kF16 && kv == KvCacheDtype::kF16;
      if (!dir) {
        if (wf != WeightFormat::kF16 && !o.weight_dirs.count(wf))
          say(label + ": quantizing " + o.model_dir.string());
        INFERGATE_ASSIGN_OR_RETURN(WeightDir d, weight_dir_for(wf, o));
        dir.emplace(std::move(d));
      }
      std::unique_ptr<EngineTarget> owned;
      EngineTarget* target = baseline.get();
      if (!is_base) {
        say(label + ": loading");
        auto t = open_target(*dir, wf, kv, o);
        if (!t.ok()) return std::move(t).error().context(label);
        owned = std::move(*t);
        target = owned.get();
      }
      ComboResult r;
      r.weight_format = engine::weight_format_name(wf);
      r.kv_dtype = engine::kv_cache_dtype_name(kv);
      r.weights_source = dir->source;
      r.is_baseline = is_base;
      // capacity: the planner on this weight directory's own config (its quantization scheme),
      // then again at the most sequences that fit, for the peak
      if (!loaded_weights) {
        auto m = planner::load_model(dir->path);
        if (!m.ok()) return std::move(m).error().context(label + ": planning");
        loaded_weights = std::move(*m);
      }
      auto at_one = plan_for(*loaded_weights, wf, kv, ctx, 1, o);
      if (!at_one.ok()) return std::move(at_one).error().context(label + ": planning");
      r.max_concurrency = at_one->max_concurrency_at_context;
      auto at_peak = plan_for(*loaded_weights, wf, kv, ctx, r.max_concurrency, o);
      if (!at_peak.ok()) return std::move(at_peak).error().context(label + ": planning");
      r.weight_bytes = at_peak->weights.total();
      r.kv_bytes_per_token = at_peak->kv.bytes_per_token();
      r.kv_block_bytes = at_peak->kv.block_bytes();
      r.kv_staging_bytes = at_peak->kv.staging_bytes();
      r.peak_memory_bytes = at_peak->total_bytes;
      r.workspace_bytes = at_peak->workspace.total();
      r.reserve_bytes = at_peak->reserves.total();
      if (r.weight_bytes != target->engine().info().weight_bytes) {
        // One memory model: the planner and the engine must agree on every weight byte.
        return internal_error(label + ": the planner counts " + std::to_string(r.weight_bytes) +
                              " weight bytes, the engine holds " +
                              std::to_string(target->engine().info().weight_bytes));
      }
      // security
      r.verified = target->load_report().verified;
      r.release_digest = release_digest(dir->path).value_or("");
      r.verification_seconds = target->load_report().hash_seconds;
      r.load_seconds = target->load_report().load_seconds;
      // performance
      say(label + ": timing " + std::to_string(o.suite.tasks.size()) + " prompts x " +
          std::to_string(o.perf_tokens) + " tokens");
      auto perf = measure(*target, o);
      if (!perf.ok()) return std::move(perf).error().context(label + ": performance");
      if (is_base) base_perf = *perf;
      r.ttft_seconds = perf->ttft;
      r.tpot_seconds = perf->tpot;
      r.tokens_per_second = perf->tps;
      r.ttft_ratio = base_perf->ttft > 0 ? perf->ttft / base_perf->ttft : 1;
      r.tpot_ratio = base_perf->tpot > 0 ? perf->tpot / base_perf->tpot : 1;
      r.throughput_ratio = base_perf->tps > 0 ? perf->tps / base_perf->tps : 1;
      // quality
      if (!is_base) {
        say(label + ": quality on suite " + o.suite.name);
        EvalOptions eo;
        eo.noise_floor = !rep.noise_floor.has_value();
        auto q = run_eval(o.suite, *baseline, *target, eo);
        if (!q.ok()) return std::move(q).error().context(label + ": quality");
        if (q->noise_floor) rep.noise_floor = q->noise_floor;
        r.quality = q->metrics.pair;
        r.perplexity = q->metrics.candidate_perplexity;
        r.perplexity_change = q->metrics.perplexity_change;
        r.retrieval_accuracy = q->metrics.retrieval_accuracy;
        r.format_following = q->metrics.format_following;
      } else {
        auto s = baseline->score_text(o.suite.perplexity_text);
        if (!s.ok()) return std::move(s).error().context(label + ": perplexity");
        r.perplexity = s->perplexity();
        r.perplexity_change = 0.0;
        if (o.suite.count(TaskKind::kNeedle)) r.retrieval_accuracy = 1.0;
        if (o.suite.count(TaskKind::kJson)) r.format_following = 1.0;
      }
      say(label + ": done (top-1 " + fmt("%.4f", r.quality.top1_agreement) + ", mean KL " +
          fmt("%.3g", r.quality.mean_kl) + ", " + fmt("%.1f", r.tokens_per_second) + " tokens/s)");
      rep.rows.push_back(std::move(r));
    }
  }
  if (!rep.noise_floor) {
    // Only fp16/fp16 was asked: the noise floor is still worth its row.
    EvalOptions eo;
    auto q = run_eval(o.suite, *baseline, *baseline, eo);
    if (!q.ok()) return std::move(q).error().context("noise floor");
    rep.noise_floor = q->noise_floor;
  }
  rep.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return rep;
}

// ---- JSON -----------------------------------------------------------------------------------------

namespace {

Json opt_json(const std::optional<double>& v) { return v && std::isfinite(*v) ? Json(*v) : Json(nullptr); }
Json pair_json(const PairMetrics& m) {
  return Json{{"positions", m.positions},
              {"top1_agreement", m.top1_agreement},
              {"mean_kl", m.mean_kl},
              {"max_kl", m.max_kl}};
}

}  // namespace

std::string report_json(const Report& rep) {
  Json rows = Json::array();
  for (const auto& r : rep.rows) {
    rows.push_back({{"weight_format", r.weight_format},
                    {"kv_dtype", r.kv_dtype},
                    {"weights_source", r.weights_source},
                    {"capacity",
                     {{"weight_bytes", r.weight_bytes},
                      {"kv_bytes_per_token", r.kv_bytes_per_token},
                      {"kv_block_bytes", r.kv_block_bytes},
                      {"kv_staging_bytes", r.kv_staging_bytes},
                      {"max_concurrency", r.max_concurrency},
                      {"peak_memory_bytes", r.peak_memory_bytes},
                      {"workspace_bytes", r.workspace_bytes},
                      {"reserve_bytes", r.reserve_bytes}}},
                    {"performance",
                     {{"ttft_seconds", r.ttft_seconds},
                      {"tpot_seconds", r.tpot_seconds},
                      {"tokens_per_second", r.tokens_per_second},
                      {"ttft_ratio", r.ttft_ratio},
                      {"tpot_ratio", r.tpot_ratio},
                      {"throughput_ratio", r.throughput_ratio}}},
                    {"quality",
                     {{"baseline", r.is_baseline},
                      {"positions", r.quality.positions},
                      {"top1_agreement", r.quality.top1_agreement},
                      {"mean_kl", r.quality.mean_kl},
                      {"max_kl", r.quality.max_kl},
                      {"perplexity", opt_json(r.perplexity)},
                      {"perplexity_change", opt_json(r.perplexity_change)},
                      {"retrieval_accuracy", opt_json(r.retrieval_accuracy)},
                      {"format_following", opt_json(r.format_following)}}},
                    {"security",
                     {{"verified", r.verified},
                      {"release_digest", r.release_digest.empty() ? Json(nullptr) : Json(r.release_digest)},
                      {"verification_seconds", r.verification_seconds},
                      {"load_seconds", r.load_seconds}}}});
  }
  Json curves = Json::array();
  for (const auto& c : rep.memory_curves) {
    Json pts = Json::array();
    for (const auto& [t, b] : c.points) pts.push_back({t, b});
    curves.push_back({{"kv_dtype", c.kv_dtype}, {"concurrency", rep.chart_concurrency}, {"points", pts}});
  }
  Json j = {{"model", rep.model},
            {"architecture", rep.architecture},
            {"suite", rep.suite},
            {"max_context", rep.max_context},
            {"memory_bytes", rep.memory_bytes},
            {"gpu", rep.gpu.empty() ? Json(nullptr) : Json(rep.gpu)},
            {"perf_tokens", rep.perf_tokens},
            {"seconds", rep.seconds},
            {"noise_floor", rep.noise_floor ? pair_json(*rep.noise_floor) : Json(nullptr)},
            {"rows", rows},
            {"memory_curves", curves}};
  return dump_json(j, 2) + "\n";
}

// ---- Markdown ---------------------------------------------------------------------------------------

namespace {

std::string opt_fmt(const std::optional<double>& v, const char* f) {
  return v ? fmt(f, *v) : std::string("-");
}

// The cells of each group, shared by the Markdown and HTML renderings so that both show the same text.
struct Cell {
  std::string metric;  // JSON field (for data-metric)
  std::string text;
  std::optional<double> value;  // the exact number behind the text
};

std::vector<std::string> group_names() { return {"capacity", "performance", "quality", "security"}; }

std::vector<std::string> headers(const std::string& group) {
  if (group == "capacity")
    return {"weight bytes", "KV bytes/token", "max concurrency", "peak memory", "workspace", "reserves"};
  if (group == "performance")
    return {"TTFT", "time/output token", "tokens/s", "TTFT ratio", "TPOT ratio", "throughput ratio"};
  if (group == "quality")
    return {"top-1 agreement", "mean KL", "perplexity", "perplexity change", "retrieval", "format-following"};
  return {"verified", "release digest", "verification time", "load time"};
}

std::vector<Cell> cells(const std::string& group, const ComboResult& r) {
  if (group == "capacity") {
    return {{"weight_bytes", human_bytes(static_cast<double>(r.weight_bytes)),
             static_cast<double>(r.weight_bytes)},
            {"kv_bytes_per_token", fmt("%.1f", r.kv_bytes_per_token), r.kv_bytes_per_token},
            {"max_concurrency", std::to_string(r.max_concurrency), static_cast<double>(r.max_concurrency)},
            {"peak_memory_bytes", human_bytes(static_cast<double>(r.peak_memory_bytes)),
             static_cast<double>(r.peak_memory_bytes)},
            {"workspace_bytes", human_bytes(static_cast<double>(r.workspace_bytes)),
             static_cast<double>(r.workspace_bytes)},
            {"reserve_bytes", human_bytes(static_cast<double>(r.reserve_bytes)),
             static_cast<double>(r.reserve_bytes)}};
  }
  if (group == "performance") {
    return {{"ttft_seconds", fmt("%.2f ms", r.ttft_seconds * 1e3), r.ttft_seconds},
            {"tpot_seconds", fmt("%.2f ms", r.tpot_seconds * 1e3), r.tpot_seconds},
            {"tokens_per_second", fmt("%.1f", r.tokens_per_second), r.tokens_per_second},
            {"ttft_ratio", fmt("%.2fx", r.ttft_ratio), r.ttft_ratio},
            {"tpot_ratio", fmt("%.2fx", r.tpot_ratio), r.tpot_ratio},
            {"throughput_ratio", fmt("%.2fx", r.throughput_ratio), r.throughput_ratio}};
  }
  if (group == "quality") {
    if (r.is_baseline) {
      return {{"top1_agreement", "baseline", std::nullopt},
              {"mean_kl", "baseline", std::nullopt},
              {"perplexity", opt_fmt(r.perplexity, "%.4f"), r.perplexity},
              {"perplexity_change", "baseline", std::nullopt},
              {"retrieval_accuracy", "baseline", std::nullopt},
              {"format_following", "baseline", std::nullopt}};
    }
    return {{"top1_agreement", fmt("%.4f", r.quality.top1_agreement), r.quality.top1_agreement},
            {"mean_kl", fmt("%.3g", r.quality.mean_kl), r.quality.mean_kl},
            {"perplexity", opt_fmt(r.perplexity, "%.4f"), r.perplexity},
            {"perplexity_change", opt_fmt(r.perplexity_change, "%+.4f"), r.perplexity_change},
            {"retrieval_accuracy", opt_fmt(r.retrieval_accuracy, "%.3f"), r.retrieval_accuracy},
            {"format_following", opt_fmt(r.format_following, "%.3f"), r.format_following}};
  }
  return {{"verified", r.verified ? "yes" : "no", r.verified ? 1.0 : 0.0},
          {"release_digest", r.release_digest.empty() ? "-" : r.release_digest.substr(0, 19) + "...",
           std::nullopt},
          {"verification_seconds", fmt("%.3f s", r.verification_seconds), r.verification_seconds},
          {"load_seconds", fmt("%.3f s", r.load_seconds), r.load_seconds}};
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num_attr(double v) { return fmt("%.17g", v); }

// "one h200 (140.4 GiB usable)" / "one GPU of 64.00 MiB": what the capacity group planned for.
std::string budget_text(const Report& rep) {
  const std::string mem = human_bytes(static_cast<double>(rep.memory_bytes));
  return rep.gpu.empty() ? "one GPU of " + mem : "one " + rep.gpu + " (" + mem + " usable)";
}

}  // namespace

std::string report_markdown(const Report& rep) {
  std::string md = "# infergate comparison report\n\n";
  md += "Model `" + rep.model + "` (" + rep.architecture + "), suite `" + rep.suite + "`, context " +
        std::to_string(rep.max_context) + " tokens, capacity planned for " + budget_text(rep) + ", " +
        std::to_string(rep.perf_tokens) + " tokens per prompt timed. Baseline: fp16 weights x fp16 KV; " +
        "performance ratios are to it, measured in the same run. Generated in " + fmt("%.1f", rep.seconds) +
        " s.\n";
  for (const auto& g : group_names()) {
    md += "\n## " + std::string(1, static_cast<char>(std::toupper(g[0]))) + g.substr(1) +
          "\n\n| weights | KV |";
    for (const auto& h : headers(g)) md += " " + h + " |";
    md += "\n|---|---|";
    for (size_t i = 0; i < headers(g).size(); ++i) md += "---:|";
    md += "\n";
    for (const auto& r : rep.rows) {
      md += "| " + r.weight_format + " | " + r.kv_dtype + " |";
      for (const auto& c : cells(g, r)) md += " " + c.text + " |";
      md += "\n";
    }
    if (g == "quality" && rep.noise_floor) {
      md += "| noise floor | (fp16 twice) | " + fmt("%.4f", rep.noise_floor->top1_agreement) + " | " +
            fmt("%.3g", rep.noise_floor->mean_kl) + " | - | - | - | - |\n";
    }
  }
  md += "\nWeights: ";
  std::string sources;
  for (const auto& r : rep.rows) {
    if (r.kv_dtype == rep.rows.front().kv_dtype)
      sources += (sources.empty() ? "" : "; ") + r.weight_format + " from " + r.weights_source;
  }
  md += sources + ".\n";
  return md;
}

// ---- HTML with inline SVG -------------------------------------------------------------------------

namespace {

// Distinct, fixed colours (the rendering test looks for them in a screenshot).
const char* series_colour(size_t i) {
  static const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                  "#ff7f0e", "#8c564b", "#e377c2"};
  return colours[i % 7];
}

struct Axis {
  double lo = 0, hi = 1;
  double map(double v, double out_lo, double out_hi) const {
    return hi > lo ? out_lo + (v - lo) / (hi - lo) * (out_hi - out_lo) : (out_lo + out_hi) / 2;
  }
};

std::string svg_frame(const std::string& id, const std::string& title, const std::string& xlabel,
                      const std::string& ylabel, const Axis& x, const Axis& y,
                      const std::function<std::string(double)>& xt,
                      const std::function<std::string(double)>& yt) {
  std::string s = "<svg id=\"" + id +
                  "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"360\" "
                  "viewBox=\"0 0 640 360\" role=\"img\" aria-label=\"" +
                  html_escape(title) + "\">\n";
  s += "<rect x=\"0\" y=\"0\" width=\"640\" height=\"360\" fill=\"#ffffff\"/>\n";
  s += "<text x=\"320\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">" +
       html_escape(title) + "</text>\n";
  s += "<line x1=\"80\" y1=\"300\" x2=\"600\" y2=\"300\" stroke=\"#333\"/>\n<line x1=\"80\" y1=\"40\" "
       "x2=\"80\" y2=\"300\" stroke=\"#333\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double xv = x.lo + (x.hi - x.lo) * i / 4, yv = y.lo + (y.hi - y.lo) * i / 4;
    const double px = x.map(xv, 80, 600), py = y.map(yv, 300, 40);
    s += "<text x=\"" + fmt("%.1f", px) + "\" y=\"316\" text-anchor=\"middle\" font-size=\"10\">" + xt(xv) +
         "</text>\n";
    s += "<text x=\"74\" y=\"" + fmt("%.1f", py + 3) + "\" text-anchor=\"end\" font-size=\"10\">" + yt(yv) +
         "</text>\n";
    s += "<line x1=\"80\" y1=\"" + fmt("%.1f", py) + "\" x2=\"600\" y2=\"" + fmt("%.1f", py) +
         "\" stroke=\"#eee\"/>\n";
  }
  s += "<text x=\"340\" y=\"340\" text-anchor=\"middle\" font-size=\"12\">" + html_escape(xlabel) +
       "</text>\n";
  s += "<text x=\"16\" y=\"170\" text-anchor=\"middle\" font-size=\"12\" transform=\"rotate(-90 16 170)\">" +
       html_escape(ylabel) + "</text>\n";
  return s;
}

Axis range_of(const std::vector<double>& v, bool from_zero) {
  Axis a;
  if (v.empty()) return a;
  a.lo = from_zero ? 0 : *std::min_element(v.begin(), v.end());
  a.hi = *std::max_element(v.begin(), v.end());
  if (a.hi <= a.lo) a.hi = a.lo + (a.lo == 0 ? 1 : std::fabs(a.lo) * 0.1);
  return a;
}

std::string memory_chart(const Report& rep) {
  std::vector<double> xs, ys;
  for (const auto& c : rep.memory_curves) {
    for (const auto& [t, b] : c.points) {
      xs.push_back(static_cast<double>(t));
      ys.push_back(static_cast<double>(b));
    }
  }
  const Axis x = range_of(xs, true), y = range_of(ys, true);
  std::string s = svg_frame(
      "memory-chart",
      "Memory vs context length (fp16 weights, " + std::to_string(rep.chart_concurrency) +
          (rep.chart_concurrency == 1 ? " sequence)" : " sequences)"),
      "context length (tokens)", "memory (weights, KV, workspace, reserves)", x, y,
      [](double v) { return fmt("%.0f", v); }, [](double v) { return human_bytes(v); });
  for (size_t i = 0; i < rep.memory_curves.size(); ++i) {
    const auto& c = rep.memory_curves[i];
    std::string pts;
    for (const auto& [t, b] : c.points) {
      pts += fmt("%.1f", x.map(static_cast<double>(t), 80, 600)) + "," +
             fmt("%.1f", y.map(static_cast<double>(b), 300, 40)) + " ";
    }
    s += "<polyline class=\"series\" data-kv-dtype=\"" + html_escape(c.kv_dtype) + "\" data-points=\"" +
         std::to_string(c.points.size()) + "\" fill=\"none\" stroke=\"" + series_colour(i) +
         "\" stroke-width=\"3\" points=\"" + pts + "\"/>\n";
    s += "<rect x=\"" + std::to_string(96 + 90 * i) + "\" y=\"46\" width=\"12\" height=\"12\" fill=\"" +
         series_colour(i) + "\"/><text x=\"" + std::to_string(112 + 90 * i) +
         "\" y=\"56\" font-size=\"11\">" + html_escape(c.kv_dtype) + " KV</text>\n";
  }
  return s + "</svg>\n";
}

std::string quality_chart(const Report& rep) {
  std::vector<double> xs, ys;
  for (const auto& r : rep.rows) {
    xs.push_back(r.kv_bytes_per_token);
    ys.push_back(r.quality.mean_kl);
  }
  Axis x = range_of(xs, true);
  const Axis y = range_of(ys, true);
  x.hi *= 1.15;  // room for the labels of the rightmost points
  std::string s = svg_frame(
      "quality-chart", "Quality vs KV bytes per token (mean KL to fp16/fp16; lower is better)",
      "KV bytes per token", "mean KL (nats)", x, y, [](double v) { return fmt("%.0f", v); },
      [](double v) { return fmt("%.2g", v); });
  std::vector<std::string> formats;
  for (const auto& r : rep.rows) {
    if (std::find(formats.begin(), formats.end(), r.weight_format) == formats.end())
      formats.push_back(r.weight_format);
  }
  for (const auto& r : rep.rows) {
    const size_t series =
        static_cast<size_t>(std::find(formats.begin(), formats.end(), r.weight_format) - formats.begin());
    const double px = x.map(r.kv_bytes_per_token, 80, 600), py = y.map(r.quality.mean_kl, 300, 40);
    s += "<circle class=\"point\" data-combo=\"" + html_escape(combo_name(r)) + "\" data-x=\"" +
         num_attr(r.kv_bytes_per_token) + "\" data-y=\"" + num_attr(r.quality.mean_kl) + "\" cx=\"" +
         fmt("%.1f", px) + "\" cy=\"" + fmt("%.1f", py) + "\" r=\"7\" fill=\"" + series_colour(series) +
         "\"><title>" + html_escape(combo_name(r)) + ": " + fmt("%.3g", r.quality.mean_kl) +
         "</title></circle>\n";
    s += "<text x=\"" + fmt("%.1f", px + 9) + "\" y=\"" + fmt("%.1f", py - 6) + "\" font-size=\"9\">" +
         html_escape(combo_name(r)) + "</text>\n";
  }
  for (size_t i = 0; i < formats.size(); ++i) {
    s += "<circle cx=\"" + std::to_string(102 + 110 * i) + "\" cy=\"52\" r=\"6\" fill=\"" + series_colour(i) +
         "\"/><text x=\"" + std::to_string(112 + 110 * i) + "\" y=\"56\" font-size=\"11\">" +
         html_escape(formats[i]) + " weights</text>\n";
  }
  return s + "</svg>\n";
}

}  // namespace

std::string report_html(const Report& rep) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>infergate report: " +
      html_escape(rep.model) +
      "</title>\n<style>\n"
      "body{font-family:sans-serif;margin:24px;color:#222}\n"
      "table{border-collapse:collapse;margin:8px 0 24px}\n"
      "th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}\n"
      "th:first-child,td:first-child,th:nth-child(2),td:nth-child(2){text-align:left}\n"
      "tr.baseline{background:#f3f7fb}\ntr.noise{background:#f7f7f7;font-style:italic}\n"
      ".charts{display:flex;flex-wrap:wrap;gap:16px}\n</style>\n</head>\n<body>\n";
  h += "<h1>infergate comparison report</h1>\n<p>Model <code>" + html_escape(rep.model) + "</code> (" +
       html_escape(rep.architecture) + "), suite <code>" + html_escape(rep.suite) + "</code>, context " +
       std::to_string(rep.max_context) + " tokens, capacity planned for " + html_escape(budget_text(rep)) +
       ", " + std::to_string(rep.perf_tokens) +
       " tokens per prompt timed. Baseline: fp16 weights x fp16 KV; performance ratios are to it, measured "
       "in the "
       "same run. Generated in " +
       fmt("%.1f", rep.seconds) + " s.</p>\n";
  h += "<div class=\"charts\">\n" + memory_chart(rep) + quality_chart(rep) + "</div>\n";
  for (const auto& g : group_names()) {
    h += "<h2>" + std::string(1, static_cast<char>(std::toupper(g[0]))) + g.substr(1) +
         "</h2>\n<table id=\"" + g + "\">\n<tr><th>weights</th><th>KV</th>";
    for (const auto& hd : headers(g)) h += "<th>" + html_escape(hd) + "</th>";
    h += "</tr>\n";
    for (const auto& r : rep.rows) {
      h += "<tr data-combo=\"" + html_escape(combo_name(r)) + "\"" +
           (r.is_baseline ? " class=\"baseline\"" : "") + "><td>" + html_escape(r.weight_format) +
           "</td><td>" + html_escape(r.kv_dtype) + "</td>";
      for (const auto& c : cells(g, r)) {
        h += "<td data-metric=\"" + c.metric + "\"" +
             (c.value ? " data-value=\"" + num_attr(*c.value) + "\"" : "") + ">" + html_escape(c.text) +
             "</td>";
      }
      h += "</tr>\n";
    }
    if (g == "quality" && rep.noise_floor) {
      h += "<tr class=\"noise\" data-combo=\"noise-floor\"><td>noise floor</td><td>fp16 twice</td>"
           "<td data-metric=\"top1_agreement\" data-value=\"" +
           num_attr(rep.noise_floor->top1_agreement) + "\">" + fmt("%.4f", rep.noise_floor->top1_agreement) +
           "</td><td data-metric=\"mean_kl\" data-value=\"" + num_attr(rep.noise_floor->mean_kl) + "\">" +
           fmt("%.3g", rep.noise_floor->mean_kl) + "</td><td>-</td><td>-</td><td>-</td><td>-</td></tr>\n";
    }
    h += "</table>\n";
  }
  h += "<p>Weights:</p>\n<ul>\n";
  for (const auto& r : rep.rows) {
    if (r.kv_dtype == rep.rows.front().kv_dtype) {
      h += "<li>" + html_escape(r.weight_format) + ": " + html_escape(r.weights_source) + "</li>\n";
    }
  }
  h += "</ul>\n</body>\n</html>\n";
  return h;
}

Status write_report(const Report& rep, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return errno_error("creating " + dir.string(), ec.value());
  INFERGATE_RETURN_IF_ERROR(write_file_atomic(dir / "report.json", report_json(rep)));
  INFERGATE_RETURN_IF_ERROR(write_file_atomic(dir / "report.md", report_markdown(rep)));
  INFERGATE_RETURN_IF_ERROR(write_file_atomic(dir / "report.html", report_html(rep)));
  return ok_status();
}

}  // namespace infergate::runtime::eval
