// A raw TCP connection to a local server, for the faults an HTTP client library cannot make on purpose:
// half-sent requests, a request that never ends (slowloris), a client that hangs up mid-response,
// pipelined or malformed bytes. TEST HELPER ONLY: talking HTTP properly is infergate::http::Client's job.
#pragma once

#include <string>

namespace infergate::http::testing {

class RawConnection {
 public:
  explicit RawConnection(int port);
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;
  bool connected() const { return fd_ >= 0; }
  bool send(const std::string& bytes);
  // Reads until `needle` appears or the timeout passes; returns what was read.
  std::string read_until(const std::string& needle, int timeout_ms);
  // Reads until the peer closes; true if it closed within the timeout.
  bool wait_closed(int timeout_ms);
  void close();

 private:
  int fd_ = -1;
};

}  // namespace infergate::http::testing
