// What every handler reads off a request: headers, the bearer token, query parameters; reason phrases.
#include <cctype>

#include "infergate/http/server.h"

namespace infergate::http {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string Request::header(std::string_view name) const {
  const std::string n = lower(name);
  for (const auto& [k, v] : headers) {
    if (k == n) return v;
  }
  return {};
}

std::string Request::bearer_token() const {
  const std::string auth = header("authorization");
  // The scheme is case-insensitive (RFC 9110); the token is what follows the first space.
  if (auth.size() < 7 || lower(std::string_view(auth).substr(0, 7)) != "bearer ") return {};
  size_t start = auth.find_first_not_of(' ', 7);
  return start == std::string::npos ? std::string() : auth.substr(start);
}

std::map<std::string, std::string> Request::query() const {
  std::map<std::string, std::string> out;
  size_t q = target.find('?');
  if (q == std::string::npos) return out;
  std::string_view rest = std::string_view(target).substr(q + 1);
  while (!rest.empty()) {
    size_t amp = rest.find('&');
    std::string_view part = rest.substr(0, amp);
    size_t eq = part.find('=');
    std::string key = percent_decode(part.substr(0, eq), true);
    if (!key.empty())
      out[key] = eq == std::string_view::npos ? "" : percent_decode(part.substr(eq + 1), true);
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return out;
}

std::string percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string_view status_text(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
  }
}

}  // namespace infergate::http
