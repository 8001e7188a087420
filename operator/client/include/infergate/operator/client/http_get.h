// A plain HTTP GET for things that are not the Kubernetes API: a serving pod's /metrics, a Prometheus
// server's query API. cpprestsdk stays inside client/; callers see Result only.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "infergate/common/result.h"

namespace infergate::op::client {

struct HttpGetResponse {
  int status = 0;
  std::string body;
};

// GET `url` ("http://10.1.2.3:8000/metrics"). No retries: the caller decides what a failure means.
// Errors: InvalidArgument (not an http:// or https:// URL), DeadlineExceeded (timeout), Unavailable
// (refused, reset, DNS), ResourceExhausted (a body over `max_body` bytes). Thread-safe.
Result<HttpGetResponse> http_get(std::string_view url, std::chrono::milliseconds timeout,
                                 size_t max_body = 8u << 20);

}  // namespace infergate::op::client
