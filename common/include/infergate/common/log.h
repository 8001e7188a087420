// Structured logging: one line per event, "level msg key=value ..." (text) or one JSON object (json).
// Thread-safe; each line reaches stderr with a single write. Values are never secrets: callers log
// file names and reasons, never file contents, tokens or keys.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace infergate::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
enum class Format { kText, kJson };

struct Field {
  Field(std::string_view k, std::string_view v) : key(k), value(v), quoted(true) {}
  Field(std::string_view k, const char* v) : key(k), value(v ? v : ""), quoted(true) {}
  Field(std::string_view k, const std::string& v) : key(k), value(v), quoted(true) {}
  Field(std::string_view k, bool v) : key(k), value(v ? "true" : "false"), quoted(false) {}
  Field(std::string_view k, int v) : key(k), value(std::to_string(v)), quoted(false) {}
  Field(std::string_view k, long v) : key(k), value(std::to_string(v)), quoted(false) {}
  Field(std::string_view k, long long v) : key(k), value(std::to_string(v)), quoted(false) {}
  Field(std::string_view k, unsigned v) : key(k), value(std::to_string(v)), quoted(false) {}
  Field(std::string_view k, unsigned long v) : key(k), value(std::to_string(v)), quoted(false) {}
  Field(std::string_view k, unsigned long long v) : key(k), value(std::to_string(v)), quoted(false) {}
  Field(std::string_view k, double v);

  std::string key;
  std::string value;
  bool quoted;  // a string (quoted in JSON), or a number/bool written bare
};

using Fields = std::initializer_list<Field>;

void set_level(Level level);
Level level();
void set_format(Format format);
// Parses "debug|info|warn|error" and "text|json"; false when unknown.
bool parse_level(std::string_view text, Level* out);
bool parse_format(std::string_view text, Format* out);

void write(Level level, std::string_view msg, Fields fields);
inline void debug(std::string_view msg, Fields fields = {}) { write(Level::kDebug, msg, fields); }
inline void info(std::string_view msg, Fields fields = {}) { write(Level::kInfo, msg, fields); }
inline void warn(std::string_view msg, Fields fields = {}) { write(Level::kWarn, msg, fields); }
inline void error(std::string_view msg, Fields fields = {}) { write(Level::kError, msg, fields); }

// Formats one line without writing it (tests use this).
std::string format_line(Level level, std::string_view msg, Fields fields, Format format);

}  // namespace infergate::log
