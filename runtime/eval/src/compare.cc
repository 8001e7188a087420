// The lockstep comparison, the metrics, thresholds, and the result's JSON and table.
#include "infergate/runtime/eval/compare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "infergate/common/json.h"
#include "infergate/engine/quality.h"

namespace infergate::runtime::eval {

namespace {

using Clock = std::chrono::steady_clock;

// Token texts as small integers, shared by both sides of a comparison, so the engine's quality
// helpers (which key tokens by id) compare what an OpenAI server identifies by text.
class Interner {
 public:
  int32_t id(const std::string& text) {
    auto [it, inserted] = ids_.try_emplace(text, static_cast<int32_t>(ids_.size()));
    return it->second;
  }

 private:
  std::unordered_map<std::string, int32_t> ids_;
};

std::vector<engine::TokenLogprob> top_list(const GeneratedToken& g, Interner& interner) {
  std::vector<engine::TokenLogprob> out;
  if (g.top.empty()) {
    out.push_back({interner.id(g.text), static_cast<float>(g.logprob)});
    return out;
  }
  for (const auto& t : g.top) out.push_back({interner.id(t.text), static_cast<float>(t.logprob)});
  return out;
}

struct LockstepOutcome {
  int32_t resyncs = 0;
  std::string a_text, b_text;  // the first round's free-running completions
};

// Compares b against a on one prompt, adding every compared position to the accumulators.
Result<LockstepOutcome> lockstep(const Task& task, Target& a, Target& b, int32_t k, uint64_t seed,
                                 int32_t b_chunk, Interner& interner,
                                 std::vector<engine::QualityAccumulator*> accs) {
  LockstepOutcome out;
  std::string context = task.prompt;
  int32_t remaining = task.max_tokens;
  bool first = true;
  while (remaining > 0) {
    CompletionRequest ra{context, remaining, k, seed, 0};
    CompletionRequest rb{context, remaining, k, seed, b_chunk};
    auto ca = a.complete(ra);
    if (!ca.ok()) return std::move(ca).error().context("task " + task.id + ": baseline " + a.describe());
    auto cb = b.complete(rb);
    if (!cb.ok()) return std::move(cb).error().context("task " + task.id + ": " + b.describe());
    if (first) {
      out.a_text = ca->text;
      out.b_text = cb->text;
      first = false;
    }
    const size_t n = std::min(ca->tokens.size(), cb->tokens.size());
    size_t consumed = 0;
    bool diverged = false;
    for (size_t i = 0; i < n; ++i) {
      const auto pa = top_list(ca->tokens[i], interner);
      const auto pb = top_list(cb->tokens[i], interner);
      for (auto* acc : accs) acc->add_top_logprobs(pa, pb);
      consumed = i + 1;
      if (ca->tokens[i].text != cb->tokens[i].text) {
        diverged = true;
        break;
      }
    }
    // Agreed to the end (or one side ran out of context): every position both produced is compared.
    if (!diverged || consumed == 0) break;
    for (size_t i = 0; i < consumed; ++i) context += ca->tokens[i].text;
    remaining -= static_cast<int32_t>(consumed);
    ++out.resyncs;
  }
  return out;
}

PairMetrics pair_metrics(const engine::QualityMetrics& m) {
  return PairMetrics{m.positions, m.top1_agreement, m.mean_kl, m.max_kl};
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// 6 significant digits: enough for a gate, short in the termination message.
Json num(double v) {
  if (!std::isfinite(v)) return nullptr;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return std::strtod(buf, nullptr);
}
Json opt(const std::optional<double>& v) { return v ? num(*v) : Json(nullptr); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

}  // namespace

bool follows_json_format(std::string_view prompt, std::string_view output,
                         const std::vector<std::string>& keys) {
  std::string text;
  const std::string p = trim(prompt);
  if (!p.empty() && p.back() == '{') text = "{";
  text += output;
  const size_t start = text.find('{');
  if (start == std::string::npos) return false;
  for (size_t end = text.find('}', start); end != std::string::npos; end = text.find('}', end + 1)) {
    Json j = Json::parse(text.begin() + static_cast<std::ptrdiff_t>(start),
                         text.begin() + static_cast<std::ptrdiff_t>(end) + 1, nullptr, false);
    if (j.is_discarded()) continue;
    if (!j.is_object()) return false;
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return j.contains(k); });
  }
  return false;
}

Status validate_thresholds(const Thresholds& t) {
  auto check = [](const std::optional<double>& v, const char* flag, bool at_most_one) -> Status {
    if (!v) return ok_status();
    if (std::isnan(*v) || *v < 0 || (at_most_one && *v > 1)) {
      return invalid_argument(std::string(flag) + ": " + fmt("%g", *v) + " is not a valid threshold (" +
                              (at_most_one ? "a fraction between 0 and 1" : "a number >= 0") + ")")
          .with_reason("InvalidThreshold");
    }
    return ok_status();
  };
  INFERGATE_RETURN_IF_ERROR(check(t.min_top1_agreement, "--min-top1-agreement", true));
  INFERGATE_RETURN_IF_ERROR(check(t.max_mean_kl, "--max-mean-kl", false));
  INFERGATE_RETURN_IF_ERROR(check(t.max_perplexity_change, "--max-perplexity-change", false));
  INFERGATE_RETURN_IF_ERROR(check(t.min_retrieval_accuracy, "--min-retrieval-accuracy", true));
  INFERGATE_RETURN_IF_ERROR(check(t.min_format_following, "--min-format-following", true));
  return ok_status();
}

Result<EvalResult> run_eval(const Suite& suite, Target& baseline, Target& candidate,
                            const EvalOptions& options) {
  const auto t0 = Clock::now();
  EvalResult r;
  r.suite = suite.name;
  r.baseline = baseline.describe();
  r.candidate = candidate.describe();
  const int32_t k = options.top_logprobs > 0 ? options.top_logprobs : suite.top_logprobs;
  Interner interner;
  engine::QualityAccumulator all, noise;
  size_t needles = 0, needles_passed = 0, formats = 0, formats_passed = 0;
  for (size_t i = 0; i < suite.tasks.size(); ++i) {
    const Task& task = suite.tasks[i];
    engine::QualityAccumulator mine;
    INFERGATE_ASSIGN_OR_RETURN(
        LockstepOutcome o, lockstep(task, baseline, candidate, k, suite.seed, 0, interner, {&all, &mine}));
    if (options.noise_floor) {
      auto nf = lockstep(task, baseline, baseline, k, suite.seed, options.noise_floor_prefill_chunk, interner,
                         {&noise});
      if (!nf.ok()) return std::move(nf).error().context("noise floor");
    }
    TaskResult t;
    t.id = task.id;
    t.kind = task.kind;
    const engine::QualityMetrics m = mine.result();
    t.positions = m.positions;
    t.top1_agreement = m.top1_agreement;
    t.mean_kl = m.mean_kl;
    t.resyncs = o.resyncs;
    t.baseline_text = o.a_text;
    t.candidate_text = o.b_text;
    const bool same = trim(o.a_text) == trim(o.b_text);
    if (task.kind == TaskKind::kNeedle) {
      t.baseline_correct = o.a_text.find(task.answer) != std::string::npos;
      t.candidate_correct = o.b_text.find(task.answer) != std::string::npos;
      t.passed = t.candidate_correct || same;
      ++needles;
      needles_passed += t.passed;
    } else if (task.kind == TaskKind::kJson) {
      t.baseline_correct = follows_json_format(task.prompt, o.a_text, task.required_keys);
      t.candidate_correct = follows_json_format(task.prompt, o.b_text, task.required_keys);
      t.passed = t.candidate_correct || same;
      ++formats;
      formats_passed += t.passed;
    }
    if (options.progress) {
      options.progress("[" + std::to_string(i + 1) + "/" + std::to_string(suite.tasks.size()) + "] " +
                       task.id + ": " + std::to_string(t.positions) + " positions, top-1 " +
                       fmt("%.4f", t.top1_agreement) + ", mean KL " + fmt("%.3g", t.mean_kl) + ", " +
                       std::to_string(t.resyncs) + " resyncs");
    }
    r.tasks.push_back(std::move(t));
  }
  r.metrics.pair = pair_metrics(all.result());
  if (options.noise_floor) r.noise_floor = pair_metrics(noise.result());
  if (needles)
    r.metrics.retrieval_accuracy = static_cast<double>(needles_passed) / static_cast<double>(needles);
  if (formats)
    r.metrics.format_following = static_cast<double>(formats_passed) / static_cast<double>(formats);

  auto sb = baseline.score_text(suite.perplexity_text);
  auto sc = sb.ok() ? candidate.score_text(suite.perplexity_text) : Result<TextScore>(sb.error());
  if (sb.ok() && sc.ok()) {
    r.metrics.baseline_perplexity = sb->perplexity();
    r.metrics.candidate_perplexity = sc->perplexity();
    if (sb->tokens != sc->tokens) {
      r.metrics.perplexity_note = "the two sides tokenized the perplexity text differently (" +
                                  std::to_string(sb->tokens) + " and " + std::to_string(sc->tokens) +
                                  " tokens)";
    } else {
      r.metrics.perplexity_change =
          (*r.metrics.candidate_perplexity - *r.metrics.baseline_perplexity) / *r.metrics.baseline_perplexity;
    }
  } else {
    const Error& e = sb.ok() ? sc.error() : sb.error();
    if (e.reason() != "ScoringUnsupported") return Error(e).context("perplexity");
    r.metrics.perplexity_note = e.message();
  }
  if (options.progress) {
    options.progress(r.metrics.perplexity_change
                         ? "perplexity: baseline " + fmt("%.4f", *r.metrics.baseline_perplexity) +
                               ", candidate " + fmt("%.4f", *r.metrics.candidate_perplexity)
                         : "perplexity not measured: " + r.metrics.perplexity_note);
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

void apply_thresholds(EvalResult& r, const Thresholds& t) {
  r.failed.clear();
  r.unmeasured.clear();
  auto at_least = [&](const char* name, const std::optional<double>& value,
                      const std::optional<double>& min) {
    if (!min) return;
    if (!value) {
      r.unmeasured.emplace_back(name);
    } else if (!(*value >= *min)) {
      r.failed.push_back({name, *value, *min, ">="});
    }
  };
  auto at_most = [&](const char* name, const std::optional<double>& value, const std::optional<double>& max) {
    if (!max) return;
    if (!value) {
      r.unmeasured.emplace_back(name);
    } else if (!(*value <= *max)) {
      r.failed.push_back({name, *value, *max, "<="});
    }
  };
  at_least("top1_agreement", r.metrics.pair.top1_agreement, t.min_top1_agreement);
  at_most("mean_kl", r.metrics.pair.mean_kl, t.max_mean_kl);
  at_most("perplexity_change", r.metrics.perplexity_change, t.max_perplexity_change);
  at_least("retrieval_accuracy", r.metrics.retrieval_accuracy, t.min_retrieval_accuracy);
  at_least("format_following", r.metrics.format_following, t.min_format_following);
  r.passed = r.failed.empty() && r.unmeasured.empty();
}

std::string result_json(const EvalResult& r) {
  Json metrics = {{"top1_agreement", num(r.metrics.pair.top1_agreement)},
                  {"mean_kl", num(r.metrics.pair.mean_kl)},
                  {"perplexity_change", opt(r.metrics.perplexity_change)},
                  {"retrieval_accuracy", opt(r.metrics.retrieval_accuracy)},
                  {"format_following", opt(r.metrics.format_following)}};
  Json noise = nullptr;
  if (r.noise_floor) {
    noise = {{"top1_agreement", num(r.noise_floor->top1_agreement)},
             {"mean_kl", num(r.noise_floor->mean_kl)}};
  }
  Json failed = Json::array();
  for (const auto& f : r.failed) {
    failed.push_back(
        {{"metric", f.metric}, {"value", num(f.value)}, {"threshold", num(f.threshold)}, {"op", f.op}});
  }
  Json j = {{"suite", r.suite.substr(0, kMaxSuiteChars)},
            {"passed", r.passed},
            {"metrics", metrics},
            {"noise_floor", noise},
            {"failed", failed}};
  if (!r.unmeasured.empty()) {
    j["inconclusive"] = true;
    j["unmeasured"] = r.unmeasured;
  }
  // Five metrics at most fail, the suite name is capped: this stays far below the limit.
  return dump_json(j);
}

std::string error_json(std::string_view suite, const Error& error) {
  std::string message = error.to_string();
  if (message.size() > 3000) message = message.substr(0, 3000) + "...";
  Json j = {
      {"suite", std::string(suite.substr(0, kMaxSuiteChars))},
      {"passed", false},
      {"inconclusive", true},
      {"error",
       {{"reason", error.reason().empty() ? std::string(error_code_name(error.code())) : error.reason()},
        {"message", message}}}};
  std::string out = dump_json(j);
  // Multi-byte characters escaped by dump_json can only grow the text a little; cut the message further.
  while (out.size() > kMaxResultJsonBytes && message.size() > 100) {
    message.resize(message.size() / 2);
    j["error"]["message"] = message + "...";
    out = dump_json(j);
  }
  return out;
}

std::string result_table(const EvalResult& r, const Thresholds& t) {
  std::string out;
  out += "suite " + r.suite + "\n  baseline:  " + r.baseline + "\n  candidate: " + r.candidate + "\n\n";
  auto opt_str = [](const std::optional<double>& v, const char* f) {
    return v ? fmt(f, *v) : std::string("-");
  };
  auto thr = [](const std::optional<double>& v, const char* op) {
    return v ? std::string(op) + " " + fmt("%g", *v) : std::string("");
  };
  out += pad("metric", 22) + pad("candidate", 14) + pad("noise floor", 14) + pad("threshold", 14) + "\n";
  out += pad("top1_agreement", 22) + pad(fmt("%.4f", r.metrics.pair.top1_agreement), 14) +
         pad(r.noise_floor ? fmt("%.4f", r.noise_floor->top1_agreement) : "-", 14) +
         pad(thr(t.min_top1_agreement, ">="), 14) + "\n";
  out += pad("mean_kl", 22) + pad(fmt("%.3g", r.metrics.pair.mean_kl), 14) +
         pad(r.noise_floor ? fmt("%.3g", r.noise_floor->mean_kl) : "-", 14) +
         pad(thr(t.max_mean_kl, "<="), 14) + "\n";
  out += pad("max_kl", 22) + pad(fmt("%.3g", r.metrics.pair.max_kl), 14) +
         pad(r.noise_floor ? fmt("%.3g", r.noise_floor->max_kl) : "-", 14) + "\n";
  out += pad("perplexity_change", 22) + pad(opt_str(r.metrics.perplexity_change, "%+.4f"), 14) +
         pad("-", 14) + pad(thr(t.max_perplexity_change, "<="), 14) + "\n";
  out += pad("retrieval_accuracy", 22) + pad(opt_str(r.metrics.retrieval_accuracy, "%.4f"), 14) +
         pad("-", 14) + pad(thr(t.min_retrieval_accuracy, ">="), 14) + "\n";
  out += pad("format_following", 22) + pad(opt_str(r.metrics.format_following, "%.4f"), 14) + pad("-", 14) +
         pad(thr(t.min_format_following, ">="), 14) + "\n";
  out += "positions compared: " + std::to_string(r.metrics.pair.positions) +
         (r.noise_floor ? " (noise floor " + std::to_string(r.noise_floor->positions) + ")" : std::string()) +
         "\n";
  if (r.metrics.baseline_perplexity && r.metrics.candidate_perplexity) {
    out += "perplexity: baseline " + fmt("%.4f", *r.metrics.baseline_perplexity) + ", candidate " +
           fmt("%.4f", *r.metrics.candidate_perplexity) + "\n";
  }
  if (!r.metrics.perplexity_note.empty())
    out += "perplexity not measured: " + r.metrics.perplexity_note + "\n";
  out += "\n" + pad("task", 30) + pad("kind", 15) + pad("positions", 11) + pad("top-1", 9) +
         pad("mean KL", 11) + pad("resyncs", 9) + "correct (base/cand)\n";
  for (const auto& task : r.tasks) {
    std::string correct = "-";
    if (task.kind == TaskKind::kNeedle || task.kind == TaskKind::kJson) {
      correct = std::string(task.baseline_correct ? "yes" : "no") + "/" +
                (task.candidate_correct ? "yes" : "no") + (task.passed ? "" : "  REGRESSED");
    }
    out += pad(task.id, 30) + pad(std::string(task_kind_name(task.kind)), 15) +
           pad(std::to_string(task.positions), 11) + pad(fmt("%.4f", task.top1_agreement), 9) +
           pad(fmt("%.3g", task.mean_kl), 11) + pad(std::to_string(task.resyncs), 9) + correct + "\n";
  }
  out += "\n";
  if (r.passed) {
    out += "PASSED";
  } else if (!r.failed.empty()) {
    out += "FAILED:";
    for (const auto& f : r.failed) {
      out += " " + f.metric + " " + fmt("%.6g", f.value) + " (must be " + f.op + " " +
             fmt("%g", f.threshold) + ")";
    }
  } else {
    out += "INCONCLUSIVE: not measured:";
    for (const auto& m : r.unmeasured) out += " " + m;
  }
  out += " (" + fmt("%.1f", r.seconds) + " s)\n";
  return out;
}

}  // namespace infergate::runtime::eval
