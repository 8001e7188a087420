// http_get over cpprestsdk; every exception is caught here.
#include "infergate/operator/client/http_get.h"

#include <cpprest/http_client.h>

namespace infergate::op::client {

Result<HttpGetResponse> http_get(std::string_view url, std::chrono::milliseconds timeout, size_t max_body) {
  const std::string u(url);
  if (u.rfind("http://", 0) != 0 && u.rfind("https://", 0) != 0) {
    return Error(ErrorCode::kInvalidArgument, "not an http(s) URL: \"" + u + "\"", "InvalidURL");
  }
  try {
    web::uri uri(u);
    web::http::client::http_client_config cfg;
    cfg.set_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    web::http::client::http_client client(web::uri_builder(uri).set_path("").set_query("").to_uri(), cfg);
    web::http::http_request req(web::http::methods::GET);
    req.set_request_uri(web::uri_builder().set_path(uri.path()).set_query(uri.query()).to_uri());
    web::http::http_response resp = client.request(req).get();
    HttpGetResponse out;
    out.status = resp.status_code();
    auto len = resp.headers().content_length();
    if (len > max_body) {
      return Error(ErrorCode::kResourceExhausted,
                   "GET " + u + ": body of " + std::to_string(len) + " bytes is over the cap",
                   "BodyTooLarge");
    }
    std::vector<unsigned char> bytes = resp.extract_vector().get();
    if (bytes.size() > max_body) {
      return Error(ErrorCode::kResourceExhausted, "GET " + u + ": body is over the cap", "BodyTooLarge");
    }
    out.body.assign(bytes.begin(), bytes.end());
    return out;
  } catch (const web::http::http_exception& e) {
    if (e.error_code() == std::errc::timed_out) {
      return Error(ErrorCode::kDeadlineExceeded, "GET " + u + ": timed out", "Timeout");
    }
    return Error(ErrorCode::kUnavailable, "GET " + u + ": " + e.what(), "ConnectionFailed");
  } catch (const std::exception& e) {
    return Error(ErrorCode::kUnavailable, "GET " + u + ": " + e.what(), "ConnectionFailed");
  }
}

}  // namespace infergate::op::client
