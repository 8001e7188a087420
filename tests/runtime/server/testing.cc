// Helpers for the server's integration tests.
#include "testing.h"

#include <fstream>
#include <mutex>

#include <gtest/gtest.h>

#include "infergate/common/fs.h"
#include "infergate/runtime/model/test_model.h"

namespace infergate::runtime::server::testing {

namespace {
// Heap-held and never destroyed, so that the exit handler can still read it after static destructors ran.
const std::filesystem::path* g_model_root = nullptr;
void remove_model_root() {
  std::error_code ec;
  if (g_model_root) std::filesystem::remove_all(*g_model_root, ec);
}
}  // namespace

const std::filesystem::path& tiny_model() {
  static const std::filesystem::path* dir = [] {
    auto tmp = TempDir::create("server-test-model");
    EXPECT_TRUE(tmp.ok());
    g_model_root = new std::filesystem::path(tmp->release());
    std::atexit(remove_model_root);
    auto* p = new std::filesystem::path(*g_model_root / "tiny");
    model::TestModelOptions o;
    o.out = *p;
    o.seed = 3;
    Status s = model::make_test_model(o);
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().to_string());
    return p;
  }();
  return *dir;
}

ServeOptions tiny_options() {
  ServeOptions o;
  o.model_dir = tiny_model();
  o.weight_format = "fp16";
  o.kv_cache_dtype = "fp16";
  o.max_context_length = 512;
  o.max_concurrency = 4;
  o.port = 0;
  o.host = "127.0.0.1";
  o.engine_threads = 1;
  return o;
}

std::unique_ptr<Server> start(const ServeOptions& options) {
  auto s = Server::start(options);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().to_string());
  return s.ok() ? std::move(s).value() : nullptr;
}

namespace {
ClientResponse call(const Server& s, http::ClientRequest r) {
  const std::string url = s.url() + r.target;
  auto resp = http::fetch(url, std::move(r));
  EXPECT_TRUE(resp.ok()) << (resp.ok() ? "" : resp.error().to_string());
  return resp.ok() ? *resp : ClientResponse{};
}
}  // namespace

ClientResponse get(const Server& s, const std::string& path) {
  http::ClientRequest r;
  r.target = path;
  r.timeout = std::chrono::seconds(60);
  return call(s, std::move(r));
}

ClientResponse post(const Server& s, const std::string& path, const std::string& body,
                    const http::Headers& headers) {
  http::ClientRequest r;
  r.method = "POST";
  r.target = path;
  r.body = body;
  r.content_type = "application/json";
  r.headers = headers;
  r.timeout = std::chrono::seconds(120);
  return call(s, std::move(r));
}

std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  http::SseParser p([&](std::string_view d) { out.emplace_back(d); });
  p.feed(body);
  return out;
}

int64_t rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

}  // namespace infergate::runtime::server::testing
