// Structured logging to stderr.
#include "infergate/common/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "infergate/common/json.h"

namespace infergate::log {
namespace {

std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
std::atomic<int> g_format{static_cast<int>(Format::kText)};
std::mutex g_write_mu;

std::string_view level_name(Level level) {
  switch (level) {
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarn: return "warn";
    case Level::kError: return "error";
  }
  return "info";
}

std::string timestamp() {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

bool needs_quotes(std::string_view v) {
  if (v.empty()) return true;
  for (char c : v) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
}

void append_text_value(std::string& out, std::string_view v) {
  if (!needs_quotes(v)) {
    out.append(v);
    return;
  }
  out.append(nlohmann::json(std::string(v)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

Field::Field(std::string_view k, double v) : key(k), quoted(false) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  value = buf;
}

void set_level(Level level) { g_level.store(static_cast<int>(level)); }
Level level() { return static_cast<Level>(g_level.load()); }
void set_format(Format format) { g_format.store(static_cast<int>(format)); }

bool parse_level(std::string_view text, Level* out) {
  if (text == "debug")
    *out = Level::kDebug;
  else if (text == "info")
    *out = Level::kInfo;
  else if (text == "warn")
    *out = Level::kWarn;
  else if (text == "error")
    *out = Level::kError;
  else
    return false;
  return true;
}

bool parse_format(std::string_view text, Format* out) {
  if (text == "text")
    *out = Format::kText;
  else if (text == "json")
    *out = Format::kJson;
  else
    return false;
  return true;
}

std::string format_line(Level level, std::string_view msg, Fields fields, Format format) {
  if (format == Format::kJson) {
    nlohmann::ordered_json j;
    j["ts"] = timestamp();
    j["level"] = level_name(level);
    j["msg"] = std::string(msg);
    for (const auto& f : fields) {
      if (f.quoted) {
        j[f.key] = f.value;
      } else {
        j[f.key] = nlohmann::ordered_json::parse(f.value, nullptr, false);
        if (j[f.key].is_discarded()) j[f.key] = f.value;
      }
    }
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  std::string out = timestamp();
  out.append(" ").append(level_name(level)).append(" ");
  append_text_value(out, msg);
  for (const auto& f : fields) {
    out.append(" ").append(f.key).append("=");
    append_text_value(out, f.value);
  }
  out.append("\n");
  return out;
}

void write(Level lvl, std::string_view msg, Fields fields) {
  if (static_cast<int>(lvl) < g_level.load()) return;
  std::string line = format_line(lvl, msg, fields, static_cast<Format>(g_format.load()));
  std::lock_guard lock(g_write_mu);
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) break;  // nowhere left to report a logging failure
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace infergate::log
