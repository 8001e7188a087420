// Prometheus text parsing and the histogram arithmetic of the performance gate.
#include "infergate/operator/rollout/metrics_text.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <cmath>

namespace infergate::op::rollout {
namespace {

using infergate::testing::refused;

const char* kExposition = R"(# HELP infergate_time_to_first_token_seconds Time to first token.
# TYPE infergate_time_to_first_token_seconds histogram
infergate_time_to_first_token_seconds_bucket{model="m",le="0.1"} 10
infergate_time_to_first_token_seconds_bucket{model="m",le="0.2"} 50
infergate_time_to_first_token_seconds_bucket{model="m",le="0.5"} 90
infergate_time_to_first_token_seconds_bucket{model="m",le="+Inf"} 100
infergate_time_to_first_token_seconds_sum{model="m"} 21.5
infergate_time_to_first_token_seconds_count{model="m"} 100
infergate_requests_total 100 1700000000000
infergate_request_errors_total{reason="bad \"x\"\\y"} 2
)";

TEST(MetricsText, ParsesSamplesLabelsEscapesAndTimestamps) {
  auto s = parse_prometheus_text(kExposition);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  ASSERT_EQ(s->size(), 8u);
  EXPECT_EQ((*s)[0].labels.at("le"), "0.1");
  EXPECT_TRUE(std::isinf((*s)[3].value) == false);
  EXPECT_EQ((*s)[7].labels.at("reason"), "bad \"x\"\\y");
  EXPECT_EQ(*sum_of(*s, "infergate_requests_total"), 100);
  EXPECT_FALSE(sum_of(*s, "nope").has_value());
}

TEST(MetricsText, RefusesAMalformedLineNamingIt) {
  auto s = parse_prometheus_text("a 1\nb{x=\"1\" 2\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("line 2"), std::string::npos) << s.error().message();
  EXPECT_EQ(s.error().reason(), "MalformedMetrics");
  EXPECT_TRUE(refused(parse_prometheus_text("a one\n"), "MalformedMetrics",
                      {"metrics line 1", "malformed value for a"}));
  EXPECT_TRUE(refused(parse_prometheus_text("{x=\"1\"} 1\n"), "MalformedMetrics",
                      {"metrics line 1", "expected a metric name"}));
}

TEST(MetricsText, HistogramSumsSeriesAndInterpolatesTheQuantile) {
  auto s = parse_prometheus_text(kExposition);
  ASSERT_TRUE(s.ok());
  auto h = extract_histogram(*s, "infergate_time_to_first_token_seconds");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->count, 100);
  // p95: rank 95 lies in (0.5, +Inf]: the largest finite bound, as histogram_quantile answers.
  EXPECT_DOUBLE_EQ(*quantile(0.95, *h), 0.5);
  // p50: rank 50 is the top of (0.1, 0.2]: 0.2. p30: 0.1 + 0.1 * (30 - 10) / 40 = 0.15.
  EXPECT_DOUBLE_EQ(*quantile(0.5, *h), 0.2);
  EXPECT_DOUBLE_EQ(*quantile(0.3, *h), 0.15);
  // p5 in the first bucket, from 0: 0.1 * 5 / 10.
  EXPECT_DOUBLE_EQ(*quantile(0.05, *h), 0.05);
  EXPECT_FALSE(quantile(0.95, Histogram{}).has_value());
}

TEST(MetricsText, DeltaBetweenScrapesSeesOnlyTheWindow) {
  Histogram before{{{0.1, 100}, {0.2, 100}, {1.0, 100}, {INFINITY, 100}}, 5, 100};
  Histogram after{{{0.1, 100}, {0.2, 100}, {1.0, 200}, {INFINITY, 200}}, 80, 200};
  Histogram d = delta(before, after);
  EXPECT_EQ(d.count, 100);
  EXPECT_DOUBLE_EQ(d.sum, 75);
  // Before the window everything was fast; in the window everything took (0.2, 1.0]: p95 is there.
  EXPECT_NEAR(*quantile(0.95, d), 0.2 + 0.8 * 0.95, 1e-12);
  EXPECT_LT(*quantile(0.95, after), *quantile(0.95, d));
}

TEST(MetricsText, ACounterThatWentDownIsARestartAndCountsFromZero) {
  Histogram before{{{0.1, 500}, {INFINITY, 500}}, 10, 500};
  Histogram after{{{0.1, 3}, {INFINITY, 4}}, 1, 4};
  Histogram d = delta(before, after);
  EXPECT_EQ(d.count, 4);
  EXPECT_EQ(d.buckets[0].second, 3);
}

TEST(MetricsText, AddingHistogramsMatchesBoundsAcrossPods) {
  Histogram a{{{0.1, 1}, {INFINITY, 2}}, 1, 2};
  Histogram b{{{0.1, 3}, {INFINITY, 3}}, 1, 3};
  Histogram s = add(a, b);
  ASSERT_EQ(s.buckets.size(), 2u);
  EXPECT_EQ(s.buckets[0].second, 4);
  EXPECT_EQ(s.buckets[1].second, 5);
}

}  // namespace
}  // namespace infergate::op::rollout
