// The report on a tiny generated model: every combination runs, the numbers in the HTML and Markdown
// are the JSON's, the capacity arithmetic holds, and the HTML renders in headless Chromium.
#include "infergate/runtime/eval/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/common/subprocess.h"
#include "infergate/engine/block_manager.h"
#include "testing.h"

namespace infergate::runtime::eval {
namespace {

constexpr const char* kSuite = R"({
  "name": "report-tiny", "top_logprobs": 10, "max_tokens": 8,
  "perplexity_text": "Bread is one of the oldest prepared foods. Flour and water are mixed into a dough.",
  "tasks": [
    {"id": "code", "kind": "code", "prompt": "def add(a, b):\n    return"},
    {"id": "needle", "kind": "needle", "max_tokens": 4, "haystack": "The bus came at seven. Rain fell.",
     "needle": "The gate code is 7341.", "question": "What is the gate code?", "answer": "7341",
     "context_words": [40], "depths": [0.5]},
    {"id": "json", "kind": "json", "required_keys": ["a"], "prompt": "JSON: {"}
  ]})";

// Usable memory of the GPU the capacity group plans for: room for the planner's reserves (CUDA
// context and graphs, 1 GiB) and a few thousand sequences of the tiny model.
constexpr int64_t kMemory = int64_t{2} << 30;

class ReportOnModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir(testing::temp_dir());
    const auto model = testing::make_tiny_model(dir_->path() / "model", 4);
    // A manifest, so the security group has a verified load and a release digest for fp16.
    auto sums = run_command({"/bin/sh", "-c",
                             "cd '" + model.string() +
                                 "' && find . -type f ! -name SHA256SUMS -print0 | sort -z | "
                                 "xargs -0 sha256sum > SHA256SUMS"});
    ASSERT_TRUE(sums.ok() && sums->status.success());
    ReportOptions o;
    o.model_dir = model;
    auto s = parse_suite(kSuite, "report-tiny");
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    o.suite = *s;
    o.max_context = 512;
    o.memory_bytes = kMemory;
    o.chart_concurrency = 4;
    o.perf_tokens = 8;
    o.progress = [](const std::string& line) { progress_->push_back(line); };
    progress_ = new std::vector<std::string>();
    auto rep = run_report(o);
    ASSERT_TRUE(rep.ok()) << rep.error().to_string();
    report_ = new Report(std::move(*rep));
    ASSERT_TRUE(write_report(*report_, dir_->path() / "out").ok());
    json_ = new Json(Json::parse(*read_file(dir_->path() / "out" / "report.json")));
    html_ = new std::string(*read_file(dir_->path() / "out" / "report.html"));
    md_ = new std::string(*read_file(dir_->path() / "out" / "report.md"));
  }
  static void TearDownTestSuite() {
    delete report_;
    delete json_;
    delete html_;
    delete md_;
    delete progress_;
    delete dir_;
  }
  static const Json* row(const std::string& w, const std::string& kv) {
    for (const auto& r : (*json_)["rows"]) {
      if (r["weight_format"] == w && r["kv_dtype"] == kv) return &r;
    }
    return nullptr;
  }
  static TempDir* dir_;
  static Report* report_;
  static Json* json_;
  static std::string *html_, *md_;
  static std::vector<std::string>* progress_;
};
TempDir* ReportOnModel::dir_ = nullptr;
Report* ReportOnModel::report_ = nullptr;
Json* ReportOnModel::json_ = nullptr;
std::string* ReportOnModel::html_ = nullptr;
std::string* ReportOnModel::md_ = nullptr;
std::vector<std::string>* ReportOnModel::progress_ = nullptr;

TEST_F(ReportOnModel, RunsEveryWeightFormatAndKvDtypeWithProgress) {
  ASSERT_EQ((*json_)["rows"].size(), 12u);
  for (const char* w : {"fp16", "int8", "int4"}) {
    for (const char* kv : {"fp16", "fp8", "int8", "int4"}) EXPECT_NE(row(w, kv), nullptr) << w << "/" << kv;
  }
  EXPECT_EQ((*json_)["max_context"], 512);
  bool first = false, last = false, quantizing = false;
  for (const auto& l : *progress_) {
    first |= l.rfind("[1/12] fp16 weights x fp16 KV", 0) == 0;
    last |= l.rfind("[12/12] int4 weights x int4 KV: done", 0) == 0;
    quantizing |= l.find("quantizing") != std::string::npos;
  }
  EXPECT_TRUE(first && last && quantizing);
}

TEST_F(ReportOnModel, CapacityFollowsTheRuntimesByteArithmetic) {
  const Json& f16 = *row("fp16", "fp16");
  EXPECT_GT(f16["capacity"]["weight_bytes"].get<int64_t>(),
            row("int8", "fp16")->at("capacity")["weight_bytes"].get<int64_t>());
  EXPECT_GT(row("int8", "fp16")->at("capacity")["weight_bytes"].get<int64_t>(),
            row("int4", "fp16")->at("capacity")["weight_bytes"].get<int64_t>());
  auto bpt = [&](const char* kv) {
    return row("fp16", kv)->at("capacity")["kv_bytes_per_token"].get<double>();
  };
  EXPECT_GT(bpt("fp16"), bpt("int8"));
  EXPECT_GT(bpt("int8"), bpt("int4"));
  EXPECT_LT(bpt("fp8"), bpt("fp16"));
  for (const auto& r : (*json_)["rows"]) {
    const auto& c = r["capacity"];
    const int64_t per_seq = engine::blocks_for_tokens(512) * c["kv_block_bytes"].get<int64_t>() +
                            c["kv_staging_bytes"].get<int64_t>();
    // The peak is weights, the KV pages of the most sequences that fit, the workspace and reserves,
    // within the memory planned for (that no more fit is checked against `plan` below).
    const int64_t n = c["max_concurrency"].get<int64_t>();
    ASSERT_GT(n, 0) << r["weight_format"] << "/" << r["kv_dtype"];
    EXPECT_EQ(c["peak_memory_bytes"].get<int64_t>(), c["weight_bytes"].get<int64_t>() + n * per_seq +
                                                         c["workspace_bytes"].get<int64_t>() +
                                                         c["reserve_bytes"].get<int64_t>());
    EXPECT_LE(c["peak_memory_bytes"].get<int64_t>(), kMemory);
    EXPECT_GT(c["reserve_bytes"].get<int64_t>(), int64_t{1} << 30);  // CUDA context and graphs, 512 MiB each
    EXPECT_GT(c["workspace_bytes"].get<int64_t>(), 0);
    EXPECT_DOUBLE_EQ(c["kv_bytes_per_token"].get<double>(), c["kv_block_bytes"].get<double>() / 16.0);
  }
  // Memory curves rise with context, one per KV dtype, lower bytes per token lower.
  ASSERT_EQ((*json_)["memory_curves"].size(), 4u);
  for (const auto& c : (*json_)["memory_curves"]) {
    const auto& pts = c["points"];
    for (size_t i = 1; i < pts.size(); ++i) EXPECT_GT(pts[i][1].get<int64_t>(), pts[i - 1][1].get<int64_t>());
  }
}

// The capacity group is what `infergate-runtime plan --json` prints for the same settings: weights,
// KV pages, workspace and reserves, the most sequences at the context, and the total at that many.
TEST_F(ReportOnModel, CapacityIsWhatThePlanCommandPrintsForTheSameSettings) {
  for (const auto& r : (*json_)["rows"]) {
    const auto& c = r["capacity"];
    const std::string combo = r["weight_format"].get<std::string>() + "/" + r["kv_dtype"].get<std::string>();
    auto out = run_command(
        {INFERGATE_RUNTIME_BIN, "plan", "--model", (*json_)["model"].get<std::string>(), "--gpu-memory",
         std::to_string(kMemory), "--weight-format", r["weight_format"].get<std::string>(),
         "--kv-cache-dtype", r["kv_dtype"].get<std::string>(), "--max-context-length", "512",
         "--max-concurrency", std::to_string(c["max_concurrency"].get<int64_t>()), "--json"},
        std::chrono::seconds(60));
    ASSERT_TRUE(out.ok()) << out.error().to_string();
    ASSERT_EQ(out->status.code, 0) << combo << ": " << out->err;
    auto plan = parse_json(out->out, "plan --json");
    ASSERT_TRUE(plan.ok()) << plan.error().to_string();
    const Json& p = *plan;
    EXPECT_EQ(p["max_concurrency_at_context"], c["max_concurrency"]) << combo << "\n" << p.dump(1);
    EXPECT_EQ(p["total_bytes"], c["peak_memory_bytes"]) << combo;
    EXPECT_EQ(p["fits"], true) << combo;
    EXPECT_EQ(p["weights"]["bytes"], c["weight_bytes"]) << combo;
    EXPECT_EQ(p["kv_cache"]["block_bytes"], c["kv_block_bytes"]) << combo;
    EXPECT_EQ(p["kv_cache"]["staging_bytes_per_sequence"], c["kv_staging_bytes"]) << combo;
    EXPECT_EQ(p["workspace"]["bytes"], c["workspace_bytes"]) << combo;
    EXPECT_EQ(p["reserves"]["bytes"], c["reserve_bytes"]) << combo;
  }
}

TEST_F(ReportOnModel, PerformanceIsMeasuredAsRatiosToTheFp16Baseline) {
  const Json& base = (*json_)["rows"][0];
  EXPECT_EQ(base["weight_format"], "fp16");
  EXPECT_EQ(base["kv_dtype"], "fp16");
  EXPECT_EQ(base["performance"]["ttft_ratio"], 1.0);
  EXPECT_EQ(base["performance"]["throughput_ratio"], 1.0);
  for (const auto& r : (*json_)["rows"]) {
    const auto& p = r["performance"];
    EXPECT_GT(p["ttft_seconds"].get<double>(), 0);
    EXPECT_GT(p["tpot_seconds"].get<double>(), 0);
    EXPECT_GT(p["tokens_per_second"].get<double>(), 0);
    EXPECT_NEAR(p["throughput_ratio"].get<double>(),
                p["tokens_per_second"].get<double>() / base["performance"]["tokens_per_second"].get<double>(),
                1e-9);
    EXPECT_NEAR(p["tpot_ratio"].get<double>(),
                p["tpot_seconds"].get<double>() / base["performance"]["tpot_seconds"].get<double>(), 1e-9);
  }
}

TEST_F(ReportOnModel, QualityAndSecurityGroupsAreFilled) {
  EXPECT_TRUE((*json_)["noise_floor"]["top1_agreement"].is_number());
  const Json& int4kv = *row("fp16", "int4");
  const Json& int8kv = *row("fp16", "int8");
  EXPECT_GT(int4kv["quality"]["mean_kl"].get<double>(), int8kv["quality"]["mean_kl"].get<double>());
  EXPECT_GT(int8kv["quality"]["positions"].get<int64_t>(), 0);
  EXPECT_TRUE(int8kv["quality"]["retrieval_accuracy"].is_number());
  EXPECT_TRUE(int8kv["quality"]["format_following"].is_number());
  EXPECT_TRUE(int8kv["quality"]["perplexity_change"].is_number());
  // fp16 came from a directory with a manifest: verified while loading, with its digest.
  const Json& f16 = *row("fp16", "fp8");
  EXPECT_EQ(f16["security"]["verified"], true);
  EXPECT_EQ(f16["security"]["release_digest"].get<std::string>().rfind("sha256:", 0), 0u);
  EXPECT_EQ(f16["security"]["release_digest"].get<std::string>().size(), 7u + 64u);
  EXPECT_GT(f16["security"]["verification_seconds"].get<double>(), 0);
  // The quantized copies are made locally: nothing to verify them against.
  EXPECT_EQ((*row("int8", "fp16"))["security"]["verified"], false);
  EXPECT_TRUE((*row("int8", "fp16"))["security"]["release_digest"].is_null());
  EXPECT_NE((*row("int4", "fp16"))["weights_source"].get<std::string>().find("quantized from"),
            std::string::npos);
}

TEST_F(ReportOnModel, HtmlAndMarkdownShowTheJsonsNumbers) {
  const std::regex cell(R"re(<td data-metric="([a-z_0-9]+)" data-value="([^"]+)">([^<]*)</td>)re");
  const std::regex tr(R"re(<tr data-combo="([^"]+)"[^>]*>(.*?)</tr>)re");
  size_t checked = 0;
  for (auto it = std::sregex_iterator(html_->begin(), html_->end(), tr); it != std::sregex_iterator(); ++it) {
    const std::string combo = (*it)[1];
    const std::string cells = (*it)[2];
    const Json* r = nullptr;
    if (combo != "noise-floor") {
      const size_t slash = combo.find('/');
      r = row(combo.substr(0, slash), combo.substr(slash + 1));
      ASSERT_NE(r, nullptr) << combo;
    }
    for (auto c = std::sregex_iterator(cells.begin(), cells.end(), cell); c != std::sregex_iterator(); ++c) {
      const std::string metric = (*c)[1];
      const double shown = std::stod((*c)[2]);
      double expected = 0;
      if (!r) {
        expected = (*json_)["noise_floor"][metric].get<double>();
      } else {
        bool found = false;
        for (const char* g : {"capacity", "performance", "quality", "security"}) {
          if ((*r)[g].contains(metric)) {
            const Json& v = (*r)[g][metric];
            expected = v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>();
            found = true;
          }
        }
        ASSERT_TRUE(found) << metric;
      }
      EXPECT_DOUBLE_EQ(shown, expected) << combo << " " << metric;
      // The visible text is the same number, formatted, and the Markdown shows the same text in that row.
      const std::string text = (*c)[3];
      EXPECT_FALSE(text.empty());
      if (r) {
        const std::string md_row = "| " + (*r)["weight_format"].get<std::string>() + " | " +
                                   (*r)["kv_dtype"].get<std::string>() + " |";
        bool in_md = false;
        for (size_t pos = md_->find(md_row); pos != std::string::npos; pos = md_->find(md_row, pos + 1)) {
          const std::string line = md_->substr(pos, md_->find('\n', pos) - pos);
          in_md |= line.find(" " + text + " |") != std::string::npos;
        }
        EXPECT_TRUE(in_md) << combo << " " << metric << " '" << text << "'";
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 12u * 12u);
  // Charts: a line per KV dtype, a point per combination, with the JSON's coordinates.
  size_t lines = 0, points = 0;
  for (size_t p = html_->find("<polyline class=\"series\""); p != std::string::npos;
       p = html_->find("<polyline class=\"series\"", p + 1))
    ++lines;
  const std::regex point(
      R"re(<circle class="point" data-combo="([^"]+)" data-x="([^"]+)" data-y="([^"]+)")re");
  for (auto it = std::sregex_iterator(html_->begin(), html_->end(), point); it != std::sregex_iterator();
       ++it) {
    const std::string combo = (*it)[1];
    const size_t slash = combo.find('/');
    const Json* r = row(combo.substr(0, slash), combo.substr(slash + 1));
    ASSERT_NE(r, nullptr);
    EXPECT_DOUBLE_EQ(std::stod((*it)[2]), (*r)["capacity"]["kv_bytes_per_token"].get<double>());
    EXPECT_DOUBLE_EQ(std::stod((*it)[3]), (*r)["quality"]["mean_kl"].get<double>());
    ++points;
  }
  EXPECT_EQ(lines, 4u);
  EXPECT_EQ(points, 12u);
  for (const char* g : {"## Capacity", "## Performance", "## Quality", "## Security", "| noise floor |"}) {
    EXPECT_NE(md_->find(g), std::string::npos) << g;
  }
}

TEST_F(ReportOnModel, HtmlRendersInHeadlessChromium) {
  const std::filesystem::path chromium = "/usr/bin/chromium";
  std::error_code ec;
  if (!std::filesystem::exists(chromium, ec))
    GTEST_SKIP() << "chromium is not installed (Debian package chromium)";
  const auto html = dir_->path() / "out" / "report.html";
  const auto png = dir_->path() / "shot.png";
  const std::vector<std::string> common = {chromium.string(),
                                           "--headless",
                                           "--no-sandbox",
                                           "--disable-gpu",
                                           "--disable-dev-shm-usage",
                                           "--hide-scrollbars",
                                           "--user-data-dir=" + (dir_->path() / "chromium-profile").string()};
  auto argv = common;
  argv.push_back("--dump-dom");
  argv.push_back("file://" + html.string());
  auto dom = run_command(argv, std::chrono::seconds(90));
  ASSERT_TRUE(dom.ok()) << dom.error().to_string();
  ASSERT_TRUE(dom->status.success()) << dom->err;
  EXPECT_NE(dom->out.find("id=\"memory-chart\""), std::string::npos);
  EXPECT_NE(dom->out.find("id=\"quality-chart\""), std::string::npos);
  EXPECT_NE(dom->out.find("<table id=\"security\">"), std::string::npos);

  argv = common;
  argv.push_back("--window-size=1400,900");
  argv.push_back("--screenshot=" + png.string());
  argv.push_back("file://" + html.string());
  auto shot = run_command(argv, std::chrono::seconds(90));
  ASSERT_TRUE(shot.ok() && shot->status.success()) << (shot.ok() ? shot->err : shot.error().to_string());
  // The four memory lines and the weight-format points are drawn in their own colours.
  auto colours =
      run_command({INFERGATE_SYSTEM_PYTHON, std::string(INFERGATE_EVAL_TEST_DIR) + "/png_colours.py",
                   png.string(), "1f77b4", "d62728", "2ca02c", "9467bd"},
                  std::chrono::seconds(120));
  ASSERT_TRUE(colours.ok() && colours->status.success())
      << (colours.ok() ? colours->err : colours.error().to_string());
  Json c = Json::parse(colours->out);
  EXPECT_EQ(c["width"], 1400);
  for (const char* hex : {"1f77b4", "d62728", "2ca02c", "9467bd"})
    EXPECT_GT(c[hex].get<int>(), 50) << hex << " " << colours->out;
}

}  // namespace
}  // namespace infergate::runtime::eval
