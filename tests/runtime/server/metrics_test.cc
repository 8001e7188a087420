// The Prometheus exposition: the contract's names, buckets, and promtool's lint.
#include "infergate/runtime/server/metrics.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "infergate/common/fs.h"
#include "infergate/common/subprocess.h"

namespace infergate::runtime::server {
namespace {

TEST(Metrics, ExposesEveryContractName) {
  Metrics m;
  m.set_model_info({"tiny", "int8", "int8", "sha256:ab", true});
  m.observe_ttft(0.02);
  m.observe_tpot(0.004);
  m.observe_e2e(0.5);
  m.observe_queue_time(0.001);
  m.request_finished();
  m.request_error("queue_full");
  m.add_prompt_tokens(10);
  m.add_generation_tokens(5);
  m.set_running(2);
  m.set_waiting(1);
  m.set_kv_blocks(3, 100);
  m.set_weight_bytes(1234);
  m.add_preemptions(1);
  const std::string text = m.render();
  for (const char* name :
       {"infergate_time_to_first_token_seconds_bucket", "infergate_time_per_output_token_seconds_bucket",
        "infergate_e2e_request_latency_seconds_bucket", "infergate_request_queue_time_seconds_bucket",
        "infergate_requests_total", "infergate_request_errors_total{reason=\"queue_full\"}",
        "infergate_prompt_tokens_total", "infergate_generation_tokens_total",
        "infergate_num_requests_running", "infergate_num_requests_waiting", "infergate_kv_cache_blocks_used",
        "infergate_kv_cache_blocks_capacity", "infergate_weight_bytes", "infergate_preemptions_total",
        "infergate_model_info{"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name << "\n" << text;
  }
  EXPECT_NE(text.find("le=\"0.075\""), std::string::npos);
  EXPECT_NE(text.find("le=\"60\""), std::string::npos);
  EXPECT_NE(text.find("verified=\"true\""), std::string::npos);
  EXPECT_NE(text.find("release_digest=\"sha256:ab\""), std::string::npos);
  EXPECT_DOUBLE_EQ(m.errors_total("queue_full"), 1);
  EXPECT_DOUBLE_EQ(m.errors_total("other"), 0);
}

TEST(Metrics, BucketsAreTheContractsLatencyBuckets) {
  const std::vector<double> want = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
                                    1,     1.5,  2,     3,    5,     7.5, 10,   20,  30,  60};
  EXPECT_EQ(latency_buckets(), want);
}

TEST(Metrics, PromtoolAcceptsTheExposition) {
  if (!std::filesystem::exists(INFERGATE_PROMTOOL)) GTEST_SKIP() << "promtool is not installed";
  Metrics m;
  m.set_model_info({"tiny", "fp16", "fp16", "", false});
  m.observe_ttft(0.1);
  m.request_error("invalid_value");
  auto dir = TempDir::create("metrics");
  ASSERT_TRUE(dir.ok());
  auto file = dir->path() / "metrics.txt";
  ASSERT_TRUE(write_file_atomic(file, m.render()).ok());
  auto r =
      run_command({"/bin/sh", "-c", std::string(INFERGATE_PROMTOOL) + " check metrics < " + file.string()},
                  std::chrono::seconds(30));
  ASSERT_TRUE(r.ok());
  // No finding at all: every name follows Prometheus' conventions (the blocks gauge is `_capacity`, not
  // `_total`, which is reserved for counters).
  EXPECT_EQ(r->status.code, 0) << r->out << r->err;
  EXPECT_EQ(r->out + r->err, "");
}

}  // namespace
}  // namespace infergate::runtime::server
