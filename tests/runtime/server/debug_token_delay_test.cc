// serve --debug-token-delay-ms, the testing aid that slows a server on purpose (the rollout's
// performance-gate tests run a canary with it): every generated token is held at least the delay, the
// output is unchanged, a negative value is refused as a usage error, and it is off by default.
#include <gtest/gtest.h>

#include <sstream>

#include "infergate/common/json.h"
#include "infergate/common/subprocess.h"
#include "testing.h"

namespace infergate::runtime::server {
namespace {

using namespace std::chrono_literals;

// sum and count of a histogram in Prometheus text.
std::pair<double, double> histogram(const std::string& metrics, const std::string& name) {
  double sum = -1, count = -1;
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + "_sum", 0) == 0) sum = std::stod(line.substr(line.rfind(' ') + 1));
    if (line.rfind(name + "_count", 0) == 0) count = std::stod(line.substr(line.rfind(' ') + 1));
  }
  return {sum, count};
}

std::string complete(const Server& s) {
  auto r =
      testing::post(s, "/v1/completions",
                    R"({"prompt":"The river valley below the old mill","max_tokens":6,"temperature":0})");
  EXPECT_EQ(r.status, 200) << r.body;
  auto j = parse_json(r.body, "response");
  return j.ok() ? (*j)["choices"][0].value("text", "") : "";
}

TEST(DebugTokenDelay, HoldsEveryGeneratedTokenAtLeastTheDelayAndLeavesTheOutputAlone) {
  ServeOptions plain = testing::tiny_options();
  ASSERT_EQ(plain.debug_token_delay, 0ms) << "off by default";
  ServeOptions slowed = plain;
  slowed.debug_token_delay = 60ms;
  auto fast = testing::start(plain);
  auto slow = testing::start(slowed);
  ASSERT_TRUE(fast && slow);
  EXPECT_EQ(complete(*slow), complete(*fast)) << "greedy output does not depend on the delay";
  const std::string metrics = testing::get(*slow, "/metrics").body;
  auto [tpot_sum, tpot_count] = histogram(metrics, "infergate_time_per_output_token_seconds");
  ASSERT_GT(tpot_count, 0) << metrics;  // up to 6 tokens: the first is TTFT, then the intervals
  EXPECT_GE(tpot_sum / tpot_count, 0.060) << "each token after the first waited the delay";
  auto [ttft_sum, ttft_count] = histogram(metrics, "infergate_time_to_first_token_seconds");
  ASSERT_EQ(ttft_count, 1);
  EXPECT_GE(ttft_sum, 0.060) << "the first token waited too";
}

TEST(DebugTokenDelay, ANegativeDelayIsRefusedAsAUsageError) {
  auto r = run_command({INFERGATE_RUNTIME_BIN, "serve", "--model", testing::tiny_model().string(), "--port",
                        "0", "--debug-token-delay-ms", "-5"},
                       60s);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->status.code, 2) << r->err;
  EXPECT_NE(r->err.find("--debug-token-delay-ms"), std::string::npos) << r->err;
}

}  // namespace
}  // namespace infergate::runtime::server
