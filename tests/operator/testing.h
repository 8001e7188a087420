// Helpers shared by the operator's test suites: a clock that records sleeps without sleeping,
// a fake API server with the CRD installed, clients pointed at it, and a bounded wait.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/eventually.h"
#include "fixtures/fake_apiserver.h"
#include "infergate/common/clock.h"
#include "infergate/common/fs.h"
#include "infergate/operator/api/yaml.h"
#include "infergate/operator/client/rest_client.h"

namespace infergate::op::testing {

using infergate::testing::FakeApiServer;
using infergate::testing::FakeApiServerOptions;
using infergate::testing::Fault;

// A clock whose sleep_for returns at once, advancing its own time and remembering the request.
class RecordingClock final : public Clock {
 public:
  WallTime wall_now() const override {
    std::lock_guard lock(mu_);
    return WallTime(std::chrono::seconds(1'800'000'000)) +
           std::chrono::duration_cast<WallTime::duration>(offset_);
  }
  MonoTime mono_now() const override {
    std::lock_guard lock(mu_);
    return MonoTime(std::chrono::duration_cast<MonoTime::duration>(offset_));
  }
  void sleep_for(std::chrono::nanoseconds d) override {
    std::lock_guard lock(mu_);
    offset_ += d;
    sleeps_.push_back(d);
  }
  std::vector<std::chrono::nanoseconds> sleeps() const {
    std::lock_guard lock(mu_);
    return sleeps_;
  }

 private:
  mutable std::mutex mu_;
  std::chrono::nanoseconds offset_{0};
  std::vector<std::chrono::nanoseconds> sleeps_;
};

inline std::unique_ptr<FakeApiServer> start_server(FakeApiServerOptions o = {}) {
  auto s = FakeApiServer::start(std::move(o));
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  return s.ok() ? std::move(*s) : nullptr;
}

// Installs crds/*.yaml into the server (what `kubectl apply -f crds/` does).
inline void install_crd(FakeApiServer& s) {
  auto text = read_file(std::string(INFERGATE_CRD_DIR) + "/inferencemodels.serving.infergate.dev.yaml");
  ASSERT_TRUE(text.ok()) << text.error().to_string();
  auto crd = api::parse_yaml(*text, "crd");
  ASSERT_TRUE(crd.ok()) << crd.error().to_string();
  auto r = s.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", *crd);
  ASSERT_EQ(r.status, 201) << r.body.dump();
}

inline client::RestConfig config_for(const FakeApiServer& s, std::string user_agent = "infergate-test") {
  client::RestConfig c;
  c.server = s.url();
  c.user_agent = std::move(user_agent);
  c.timeout = std::chrono::seconds(10);
  return c;
}

inline std::unique_ptr<client::RestClient> client_for(const FakeApiServer& s, Clock* clock = nullptr,
                                                      client::RetryPolicy retry = {},
                                                      std::string user_agent = "infergate-test") {
  retry.initial_backoff = std::chrono::milliseconds(5);
  retry.max_backoff = std::chrono::milliseconds(50);
  auto c = client::RestClient::create(config_for(s, std::move(user_agent)), retry, clock);
  EXPECT_TRUE(c.ok()) << c.error().to_string();
  return c.ok() ? std::move(*c) : nullptr;
}

using infergate::testing::eventually;

inline Json deployment_json(const std::string& name, const std::string& ns = "default", int replicas = 1) {
  Json d =
      Json::parse(R"({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"labels": {"app": "web"}},
    "spec": {"selector": {"matchLabels": {"app": "web"}},
             "template": {"metadata": {"labels": {"app": "web"}},
                          "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}})");
  d["metadata"]["name"] = name;
  d["metadata"]["namespace"] = ns;
  d["spec"]["replicas"] = replicas;
  return d;
}

}  // namespace infergate::op::testing
