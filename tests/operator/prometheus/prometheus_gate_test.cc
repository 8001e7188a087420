// The performance gate's Prometheus path against a real Prometheus server (Debian's `prometheus`) on
// loopback, scraping processes that serve the runtime's metric names. Skips when the binary is absent.
// The exporters here stand in for `infergate-runtime serve` (same metric names and buckets, from
// docs/metrics.md), with traffic that grows with wall time at a latency each one is given.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "controllers/fake_platform.h"
#include "fixtures/http_server.h"
#include "infergate/common/fs.h"
#include "infergate/common/subprocess.h"
#include "infergate/http/client.h"
#include "infergate/operator/controllers/performance_analyzer.h"

namespace infergate::op {
namespace {

using namespace std::chrono_literals;

constexpr const char* kPrometheus = "/usr/bin/prometheus";
const std::vector<double> kBuckets = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
                                      1,     1.5,  2,     3,    5,     7.5, 10,   20,  30,  60};

// Runtime-format metrics for `rate` requests per second since `start`, each taking `latency` seconds
// to its first token and per output token.
class Exporter {
 public:
  Exporter(double latency, double rate)
      : latency_(latency), rate_(rate), start_(std::chrono::steady_clock::now()) {
    auto s = infergate::testing::HttpServer::start(
        [this](const infergate::testing::HttpRequest& r, infergate::testing::ResponseWriter& w) {
          if (r.path != "/metrics") return w.send(404, {}, "");
          w.send(200, {{"Content-Type", "text/plain; version=0.0.4"}}, text());
        });
    EXPECT_TRUE(s.ok());
    server_ = std::move(*s);
  }
  int port() const { return server_->port(); }
  std::string text() const {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double n = std::floor(rate_ * t);
    std::string out;
    for (const char* name :
         {"infergate_time_to_first_token_seconds", "infergate_time_per_output_token_seconds"}) {
      out += "# TYPE " + std::string(name) + " histogram\n";
      for (double b : kBuckets) {
        char le[32];
        std::snprintf(le, sizeof le, "%g", b);
        out += std::string(name) + "_bucket{le=\"" + le + "\"} " + std::to_string(latency_ <= b ? n : 0.0) +
               "\n";
      }
      out += std::string(name) + "_bucket{le=\"+Inf\"} " + std::to_string(n) + "\n";
      out += std::string(name) + "_sum " + std::to_string(n * latency_) + "\n";
      out += std::string(name) + "_count " + std::to_string(n) + "\n";
    }
    out += "# TYPE infergate_requests_total counter\ninfergate_requests_total " + std::to_string(n) + "\n";
    return out;
  }

 private:
  double latency_, rate_;
  std::chrono::steady_clock::time_point start_;
  std::unique_ptr<infergate::testing::HttpServer> server_;
};

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string target(const char* model, const char* track, int port) {
  return "  - targets: ['127.0.0.1:" + std::to_string(port) +
         "']\n    labels: {namespace: models, model: " + model + ", track: " + track + "}\n";
}

TEST(PrometheusGate, ARealPrometheusServerJudgesASlowCanaryAndAFastOne) {
  if (!std::filesystem::exists(kPrometheus)) GTEST_SKIP() << kPrometheus << " is not installed";
  Exporter slow_stable(0.04, 20), slow_canary(0.6, 20), ok_stable(0.04, 20), ok_canary(0.045, 20);
  auto dir = TempDir::create("prom-gate");
  ASSERT_TRUE(dir.ok());
  const std::string config =
      "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
      "scrape_configs:\n- job_name: infergate\n  static_configs:\n" +
      target("slow", "stable", slow_stable.port()) + target("slow", "canary", slow_canary.port()) +
      target("ok", "stable", ok_stable.port()) + target("ok", "canary", ok_canary.port());
  ASSERT_TRUE(write_file_atomic(dir->path() / "prometheus.yml", config).ok());
  const int port = free_port();
  SpawnOptions o;
  o.argv = {kPrometheus, "--config.file=" + (dir->path() / "prometheus.yml").string(),
            "--storage.tsdb.path=" + (dir->path() / "data").string(),
            "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=warn"};
  o.stdout_file = dir->path() / "prometheus.log";
  o.stderr_file = dir->path() / "prometheus.log";
  o.die_with_parent = true;
  auto prom = Subprocess::spawn(o);
  ASSERT_TRUE(prom.ok()) << prom.error().to_string();
  const std::string url = "http://127.0.0.1:" + std::to_string(port);

  // Ready, and every target scraped for a while (increase() over the window needs samples).
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  bool ready = false;
  while (std::chrono::steady_clock::now() < deadline) {
    http::ClientRequest query;
    query.timeout = 2s;
    auto r = http::fetch(rollout::prometheus_query_url(url, "count(count_over_time(up[20s]) >= 7)"), query);
    if (r.ok() && r->status == 200) {
      auto v = rollout::parse_prometheus_value(r->body);
      if (v.ok() && v->has_value() && **v >= 4) {
        ready = true;
        break;
      }
    }
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_TRUE(ready) << "Prometheus did not scrape the four targets; log: "
                     << read_file(dir->path() / "prometheus.log").value_or("");

  testing::FakePlatform platform;  // only its HTTP is used: real requests to the real server
  platform.http = [](const std::string& u) -> Result<platform::HttpResponse> {
    http::ClientRequest get;
    get.timeout = 5s;
    INFERGATE_ASSIGN_OR_RETURN(http::ClientResponse r, http::fetch(u, get));
    return platform::HttpResponse{r.status, r.body};
  };
  controllers::PerformanceAnalyzer analyzer(platform, SystemClock::instance());
  api::InferenceModelSpec spec;
  spec.rollout.prometheus_url = url;
  spec.rollout.canary.analysis_seconds = 5;
  spec.rollout.performance.max_ttft_p95_ratio = 1.5;
  spec.rollout.performance.max_tpot_p95_ratio = 1.5;
  api::StageStatus stage;
  stage.revision = "r1";
  stage.analysis_started_at = SystemClock::instance().wall_now() - 10s;

  auto slow = analyzer.measure({"models", "slow", "u1"}, spec, stage, {}, {});
  ASSERT_TRUE(slow.has_value());
  EXPECT_EQ(slow->outcome, rollout::Outcome::kFailed) << slow->message;
  EXPECT_EQ(slow->reason, "PerformanceThresholdFailed");
  EXPECT_GT(slow->measurements.at("ttft_p95_ratio"), 5.0);
  EXPECT_GT(slow->measurements.at("requests_canary"), 20.0);  // about 100 in 5 s, as extrapolated

  auto ok = analyzer.measure({"models", "ok", "u2"}, spec, stage, {}, {});
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->outcome, rollout::Outcome::kPassed) << ok->message;
  EXPECT_LT(ok->measurements.at("ttft_p95_ratio"), 1.5);

  // A model Prometheus knows nothing about: inconclusive, never passed.
  auto none = analyzer.measure({"models", "ghost", "u3"}, spec, stage, {}, {});
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->outcome, rollout::Outcome::kInconclusive) << none->message;

  // An unreachable Prometheus: inconclusive with the reason.
  spec.rollout.prometheus_url = "http://127.0.0.1:" + std::to_string(free_port());
  auto down = analyzer.measure({"models", "slow", "u1"}, spec, stage, {}, {});
  ASSERT_TRUE(down.has_value());
  EXPECT_EQ(down->reason, "PrometheusUnavailable");
  prom->terminate(5s);
}

}  // namespace
}  // namespace infergate::op
