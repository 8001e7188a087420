// eval in URL mode against real `infergate-runtime serve` processes (loopback, port 0): a served model
// agrees with the same settings in process (the same top-1, the same KL, the same perplexity through
// `echo`), and the int4 regression fails the gate.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <thread>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/common/subprocess.h"
#include "infergate/runtime/eval/compare.h"
#include "infergate/runtime/eval/target.h"
#include "testing.h"

namespace infergate::runtime::eval {
namespace {

// The KL bound of the gate in these tests: docs/quant-formats.md's bound for int8 KV.
constexpr double kMaxKl = 0.001;

// A `serve` process on 127.0.0.1:0; its URL read from the "listening on" log line.
class Served {
 public:
  Served(const std::filesystem::path& model, const std::string& kv, const std::filesystem::path& log) {
    SpawnOptions o;
    o.argv = {INFERGATE_RUNTIME_BIN,
              "serve",
              "--model",
              model.string(),
              "--weight-format",
              "fp16",
              "--kv-cache-dtype",
              kv,
              "--max-context-length",
              "1024",
              "--max-concurrency",
              "2",
              "--host",
              "127.0.0.1",
              "--port",
              "0"};
    o.stdout_file = log;
    o.stderr_file = log;
    o.die_with_parent = true;
    auto p = Subprocess::spawn(o);
    EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().to_string());
    if (!p.ok()) return;
    proc_.emplace(std::move(*p));
    const std::regex re("listening on (http://127\\.0\\.0\\.1:[0-9]+)");
    for (int i = 0; i < 600 && url_.empty(); ++i) {
      std::ifstream in(log);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::smatch m;
      if (std::regex_search(text, m, re)) {
        url_ = m[1];
        break;
      }
      if (!proc_->running()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_FALSE(url_.empty()) << "serve did not start; its log: " << read_file(log).value_or("");
  }
  ~Served() {
    if (proc_) proc_->terminate(std::chrono::seconds(10));
  }
  const std::string& url() const { return url_; }

 private:
  std::optional<Subprocess> proc_;
  std::string url_;
};

class EvalAgainstServe : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.emplace(testing::temp_dir());
    model_ = testing::make_tiny_model(dir_->path() / "model", 4);
    suite_path_ = dir_->path() / "tiny.json";
    ASSERT_TRUE(write_file_atomic(suite_path_, testing::kTinySuite).ok());
  }
  std::optional<TempDir> dir_;
  std::filesystem::path model_, suite_path_;
};

TEST_F(EvalAgainstServe, ServedModelAgreesWithInProcessAndTheInt4RegressionFailsTheGate) {
  Served base(model_, "fp16", dir_->path() / "base.log");
  Served cand(model_, "int4", dir_->path() / "cand.log");
  ASSERT_FALSE(base.url().empty() || cand.url().empty());
  auto suite = parse_suite(testing::kTinySuite, "tiny");
  ASSERT_TRUE(suite.ok());

  HttpTargetOptions ho;
  ho.url = base.url();
  auto hb = HttpTarget::connect(ho);
  ho.url = cand.url();
  auto hc = HttpTarget::connect(ho);
  ASSERT_TRUE(hb.ok() && hc.ok()) << (hb.ok() ? "" : hb.error().to_string());
  auto via_http = run_eval(*suite, **hb, **hc, {});
  ASSERT_TRUE(via_http.ok()) << via_http.error().to_string();

  EngineTargetOptions eo;
  eo.model_dir = model_;
  eo.max_context = 1024;
  auto db = EngineTarget::open(eo);
  eo.kv_dtype = engine::KvCacheDtype::kInt4;
  auto dc = EngineTarget::open(eo);
  ASSERT_TRUE(db.ok() && dc.ok());
  auto direct = run_eval(*suite, **db, **dc, {});
  ASSERT_TRUE(direct.ok());

  std::printf(
      "served int4 KV vs fp16: top-1 %.4f mean KL %.4g (in process: %.4f, %.4g); noise floor through the "
      "server: top-1 %.4f KL %.3g\n",
      via_http->metrics.pair.top1_agreement, via_http->metrics.pair.mean_kl,
      direct->metrics.pair.top1_agreement, direct->metrics.pair.mean_kl,
      via_http->noise_floor->top1_agreement, via_http->noise_floor->mean_kl);
  EXPECT_EQ(via_http->metrics.pair.positions, direct->metrics.pair.positions);
  // The server prefills in chunks and batches, so a quantized cache need not be bit-identical to one
  // in-process pass; both see the regression.
  EXPECT_GT(via_http->metrics.pair.mean_kl, kMaxKl);
  EXPECT_GT(direct->metrics.pair.mean_kl, kMaxKl);
  EXPECT_EQ(via_http->noise_floor->top1_agreement, 1.0);

  // A served model against the same settings in process: the HTTP path loses nothing. Both sides key
  // alternatives by the same shown text (U+FFFD for partial characters, equal texts merged keeping the
  // largest logprob), so the only difference left is float rounding between the server's and this
  // process's runs of the same model.
  auto mixed = run_eval(*suite, **hb, **db, {});
  ASSERT_TRUE(mixed.ok()) << mixed.error().to_string();
  std::printf("served fp16 vs in-process fp16: top-1 %.4f mean KL %.3g max KL %.3g\n",
              mixed->metrics.pair.top1_agreement, mixed->metrics.pair.mean_kl, mixed->metrics.pair.max_kl);
  EXPECT_EQ(mixed->metrics.pair.top1_agreement, 1.0);
  EXPECT_LT(mixed->metrics.pair.max_kl, 1e-6);
  EXPECT_EQ(mixed->metrics.retrieval_accuracy, 1.0);
  EXPECT_EQ(mixed->metrics.format_following, 1.0);

  // Perplexity through the servers (prompt logprobs with `echo`) is the in-process perplexity: URL vs
  // URL and DIR vs DIR give the same baseline, candidate and change.
  ASSERT_TRUE(via_http->metrics.perplexity_change.has_value()) << via_http->metrics.perplexity_note;
  ASSERT_TRUE(direct->metrics.perplexity_change.has_value()) << direct->metrics.perplexity_note;
  std::printf("perplexity: URL %.6f -> %.6f (%+.6f), DIR %.6f -> %.6f (%+.6f)\n",
              *via_http->metrics.baseline_perplexity, *via_http->metrics.candidate_perplexity,
              *via_http->metrics.perplexity_change, *direct->metrics.baseline_perplexity,
              *direct->metrics.candidate_perplexity, *direct->metrics.perplexity_change);
  EXPECT_NEAR(*via_http->metrics.baseline_perplexity, *direct->metrics.baseline_perplexity,
              1e-5 * *direct->metrics.baseline_perplexity);
  EXPECT_NEAR(*via_http->metrics.candidate_perplexity, *direct->metrics.candidate_perplexity,
              1e-5 * *direct->metrics.candidate_perplexity);
  EXPECT_NEAR(*via_http->metrics.perplexity_change, *direct->metrics.perplexity_change, 1e-5);
  EXPECT_NE(*via_http->metrics.perplexity_change, 0.0);  // int4 KV does change it
  ASSERT_TRUE(mixed->metrics.perplexity_change.has_value());
  EXPECT_NEAR(*mixed->metrics.perplexity_change, 0.0, 1e-5);

  // The gate as the rollout's Job runs it.
  const auto term = dir_->path() / "termination-log";
  auto r = run_command({INFERGATE_RUNTIME_BIN, "eval", "--baseline", base.url(), "--candidate", cand.url(),
                        "--suite", suite_path_.string(), "--json", "--max-mean-kl", std::to_string(kMaxKl),
                        "--termination-message-path", term.string()},
                       std::chrono::seconds(240));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.code, 1) << r->err;
  Json j = Json::parse(*read_file(term));
  EXPECT_EQ(j["failed"][0]["metric"], "mean_kl");
  EXPECT_EQ(j["passed"], false);

  // A perplexity gate through URLs is conclusive now: the same server on both sides passes it.
  auto ppl = run_command(
      {INFERGATE_RUNTIME_BIN, "eval", "--baseline", base.url(), "--candidate", base.url(), "--suite",
       suite_path_.string(), "--json", "--no-noise-floor", "--max-perplexity-change", "0.05"},
      std::chrono::seconds(240));
  ASSERT_TRUE(ppl.ok());
  EXPECT_EQ(ppl->status.code, 0) << ppl->out << ppl->err;
  Json p = Json::parse(ppl->out);
  EXPECT_EQ(p["passed"], true);
  EXPECT_FALSE(p.contains("inconclusive"));
  ASSERT_TRUE(p["metrics"]["perplexity_change"].is_number()) << ppl->out;
  EXPECT_EQ(p["metrics"]["perplexity_change"].get<double>(), 0.0);
}

}  // namespace
}  // namespace infergate::runtime::eval
