// System and fake clocks; RFC 3339 and duration parsing.
#include "infergate/common/clock.h"

#include <cctype>
#include <ctime>
#include <thread>

namespace infergate {

void SystemClock::sleep_for(std::chrono::nanoseconds d) { std::this_thread::sleep_for(d); }

SystemClock& SystemClock::instance() {
  static SystemClock clock;
  return clock;
}

FakeClock::FakeClock(WallTime start) : wall_start_(start) {}

WallTime FakeClock::wall_now() const {
  std::lock_guard lock(mu_);
  return wall_start_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(offset_);
}

MonoTime FakeClock::mono_now() const {
  std::lock_guard lock(mu_);
  return MonoTime(std::chrono::duration_cast<std::chrono::steady_clock::duration>(offset_));
}

void FakeClock::sleep_for(std::chrono::nanoseconds d) {
  std::unique_lock lock(mu_);
  auto until = offset_ + d;
  ++sleepers_;
  cv_.wait(lock, [&] { return offset_ >= until; });
  --sleepers_;
}

void FakeClock::advance(std::chrono::nanoseconds d) {
  {
    std::lock_guard lock(mu_);
    offset_ += d;
  }
  cv_.notify_all();
}

int FakeClock::sleepers() const {
  std::lock_guard lock(mu_);
  return sleepers_;
}

std::string format_rfc3339(WallTime t) {
  auto secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

bool digits(std::string_view s, size_t pos, size_t n, int* out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

}  // namespace

Result<WallTime> parse_rfc3339(std::string_view s) {
  auto bad = [&] {
    return invalid_argument("not an RFC 3339 time: \"" + std::string(s.substr(0, 64)) + "\"");
  };
  int Y, M, D, h, m, sec;
  if (!digits(s, 0, 4, &Y) || s.size() < 20 || s[4] != '-' || !digits(s, 5, 2, &M) || s[7] != '-' ||
      !digits(s, 8, 2, &D) || (s[10] != 'T' && s[10] != 't') || !digits(s, 11, 2, &h) || s[13] != ':' ||
      !digits(s, 14, 2, &m) || s[16] != ':' || !digits(s, 17, 2, &sec)) {
    return bad();
  }
  if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60) return bad();
  size_t pos = 19;
  std::chrono::nanoseconds frac{0};
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    size_t start = pos;
    int64_t scale = 100'000'000, ns = 0;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
      if (scale > 0) ns += (s[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == start) return bad();
    frac = std::chrono::nanoseconds(ns);
  }
  int offset_min = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int oh, om;
    if (!digits(s, pos + 1, 2, &oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
        !digits(s, pos + 4, 2, &om))
      return bad();
    offset_min = (oh * 60 + om) * (s[pos] == '-' ? -1 : 1);
    pos += 6;
  } else {
    return bad();
  }
  if (pos != s.size()) return bad();
  std::tm tm{};
  tm.tm_year = Y - 1900;
  tm.tm_mon = M - 1;
  tm.tm_mday = D;
  tm.tm_hour = h;
  tm.tm_min = m;
  tm.tm_sec = sec;
  time_t t = timegm(&tm);
  // system_clock counts nanoseconds in 64 bits (years 1678 to 2262): refuse a time it cannot hold
  // instead of overflowing (found by fuzzing the release statement parser with "9999-...").
  constexpr time_t kLimit = 9'000'000'000;  // seconds from 1970, about year 2255; room for the offset
  if (t > kLimit || t < -kLimit) return bad();
  return std::chrono::system_clock::from_time_t(t) - std::chrono::minutes(offset_min) +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(frac);
}

Result<std::chrono::seconds> parse_duration(std::string_view text) {
  if (text.empty()) return invalid_argument("empty duration");
  int64_t total = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    int64_t n = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      n = n * 10 + (text[i] - '0');
      if (n > 1'000'000'000) return invalid_argument("duration too large: \"" + std::string(text) + "\"");
      ++i;
    }
    if (i == start || i == text.size()) {
      return invalid_argument("not a duration (want e.g. 90s, 15m, 24h, 30d): \"" + std::string(text) + "\"");
    }
    int64_t unit;
    switch (text[i]) {
      case 's': unit = 1; break;
      case 'm': unit = 60; break;
      case 'h': unit = 3600; break;
      case 'd': unit = 86400; break;
      default:
        return invalid_argument("unknown duration unit '" + std::string(1, text[i]) + "' in \"" +
                                std::string(text) + "\"");
    }
    total += n * unit;
    ++i;
  }
  return std::chrono::seconds(total);
}

}  // namespace infergate
