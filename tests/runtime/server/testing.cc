// Helpers for the server's integration tests.
#include "testing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

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

ClientResponse get(const Server& s, const std::string& path) {
  ClientRequest r;
  r.target = path;
  r.timeout = std::chrono::seconds(60);
  auto resp = http_call(*parse_url(s.url()), r);
  EXPECT_TRUE(resp.ok()) << (resp.ok() ? "" : resp.error().to_string());
  return resp.ok() ? *resp : ClientResponse{};
}

ClientResponse post(const Server& s, const std::string& path, const std::string& body,
                    const Headers& headers) {
  ClientRequest r;
  r.method = "POST";
  r.target = path;
  r.body = body;
  r.headers = headers;
  r.timeout = std::chrono::seconds(120);
  auto resp = http_call(*parse_url(s.url()), r);
  EXPECT_TRUE(resp.ok()) << (resp.ok() ? "" : resp.error().to_string());
  return resp.ok() ? *resp : ClientResponse{};
}

std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  SseParser p([&](std::string_view d) { out.emplace_back(d); });
  p.feed(body);
  return out;
}

RawConnection::RawConnection(int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}
RawConnection::~RawConnection() { close(); }
bool RawConnection::send(const std::string& bytes) {
  return fd_ >= 0 &&
         ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}
std::string RawConnection::read_until(const std::string& needle, int timeout_ms) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (fd_ >= 0 && out.find(needle) == std::string::npos) {
    const int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
            .count());
    if (left <= 0) break;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, left) <= 0) break;
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}
bool RawConnection::wait_closed(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (fd_ >= 0) {
    const int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
            .count());
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, left) <= 0) return false;
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
  return true;
}
void RawConnection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
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
