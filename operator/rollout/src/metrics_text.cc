// Prometheus text parsing and histogram arithmetic.
#include "infergate/operator/rollout/metrics_text.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace infergate::op::rollout {
namespace {

constexpr size_t kMaxSamples = 1'000'000;

bool name_char(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

std::optional<double> parse_value(std::string_view v) {
  if (v == "+Inf" || v == "Inf") return std::numeric_limits<double>::infinity();
  if (v == "-Inf") return -std::numeric_limits<double>::infinity();
  if (v == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (v.empty()) return std::nullopt;
  std::string s(v);
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (!end || *end != '\0') return std::nullopt;
  return d;
}

Error line_error(size_t line, const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, "metrics line " + std::to_string(line) + ": " + what,
               "MalformedMetrics");
}

}  // namespace

Result<std::vector<Sample>> parse_prometheus_text(std::string_view text) {
  std::vector<Sample> out;
  size_t lineno = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t i = 0;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i == line.size() || line[i] == '#') continue;
    Sample s;
    size_t start = i;
    while (i < line.size() && name_char(line[i], i == start)) ++i;
    if (i == start) return line_error(lineno, "expected a metric name");
    s.name = std::string(line.substr(start, i - start));
    if (i < line.size() && line[i] == '{') {
      ++i;
      for (;;) {
        while (i < line.size() && line[i] == ' ') ++i;
        if (i < line.size() && line[i] == '}') {
          ++i;
          break;
        }
        size_t ls = i;
        while (i < line.size() && name_char(line[i], i == ls)) ++i;
        if (i == ls) return line_error(lineno, "expected a label name");
        std::string key(line.substr(ls, i - ls));
        if (i >= line.size() || line[i] != '=') return line_error(lineno, "expected '=' after label " + key);
        ++i;
        if (i >= line.size() || line[i] != '"') return line_error(lineno, "expected '\"' for label " + key);
        ++i;
        std::string value;
        bool closed = false;
        while (i < line.size()) {
          char c = line[i++];
          if (c == '"') {
            closed = true;
            break;
          }
          if (c == '\\' && i < line.size()) {
            char e = line[i++];
            value += e == 'n' ? '\n' : e;
          } else {
            value += c;
          }
        }
        if (!closed) return line_error(lineno, "unterminated value of label " + key);
        s.labels[key] = std::move(value);
        while (i < line.size() && line[i] == ' ') ++i;
        if (i < line.size() && line[i] == ',') {
          ++i;
          continue;
        }
        if (i < line.size() && line[i] == '}') {
          ++i;
          break;
        }
        return line_error(lineno, "expected ',' or '}' after label " + key);
      }
    }
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t vs = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    auto v = parse_value(line.substr(vs, i - vs));
    if (!v) return line_error(lineno, "malformed value for " + s.name);
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i < line.size()) {
      auto ts = parse_value(line.substr(i));
      if (!ts) return line_error(lineno, "malformed timestamp for " + s.name);
    }
    s.value = *v;
    out.push_back(std::move(s));
    if (out.size() > kMaxSamples) {
      return Error(ErrorCode::kResourceExhausted, "metrics: more than a million samples", "MalformedMetrics");
    }
  }
  return out;
}

namespace {

bool matches(const Sample& s, const LabelFilter& labels) {
  for (const auto& [key, values] : labels) {
    auto it = s.labels.find(key);
    if (it == s.labels.end() || std::find(values.begin(), values.end(), it->second) == values.end())
      return false;
  }
  return true;
}

}  // namespace

std::optional<Histogram> extract_histogram(const std::vector<Sample>& samples, std::string_view name,
                                           const LabelFilter& labels) {
  const std::string bucket = std::string(name) + "_bucket";
  const std::string sum = std::string(name) + "_sum";
  const std::string count = std::string(name) + "_count";
  std::map<double, double> by_bound;
  Histogram h;
  bool found = false;
  for (const auto& s : samples) {
    if (!matches(s, labels)) continue;
    if (s.name == bucket) {
      auto le = s.labels.find("le");
      if (le == s.labels.end()) continue;
      auto bound = parse_value(le->second);
      if (!bound || std::isnan(*bound)) continue;
      by_bound[*bound] += s.value;
      found = true;
    } else if (s.name == sum) {
      h.sum += s.value;
      found = true;
    } else if (s.name == count) {
      h.count += s.value;
      found = true;
    }
  }
  if (!found) return std::nullopt;
  for (const auto& [b, c] : by_bound) h.buckets.emplace_back(b, c);
  if (!h.buckets.empty() && std::isinf(h.buckets.back().first))
    h.count = std::max(h.count, h.buckets.back().second);
  return h;
}

std::optional<double> sum_of(const std::vector<Sample>& samples, std::string_view name,
                             const LabelFilter& labels) {
  std::optional<double> total;
  for (const auto& s : samples) {
    if (s.name == name && matches(s, labels)) total = total.value_or(0) + s.value;
  }
  return total;
}

Histogram delta(const Histogram& before, const Histogram& after) {
  bool reset = after.count < before.count || after.sum < before.sum;
  std::map<double, double> prev(before.buckets.begin(), before.buckets.end());
  for (const auto& [b, c] : after.buckets) {
    auto it = prev.find(b);
    if (it != prev.end() && c < it->second) reset = true;
  }
  if (reset) return after;
  Histogram d;
  d.sum = after.sum - before.sum;
  d.count = after.count - before.count;
  for (const auto& [b, c] : after.buckets) {
    auto it = prev.find(b);
    d.buckets.emplace_back(b, c - (it == prev.end() ? 0.0 : it->second));
  }
  return d;
}

Histogram add(const Histogram& a, const Histogram& b) {
  std::map<double, double> m(a.buckets.begin(), a.buckets.end());
  for (const auto& [bound, c] : b.buckets) m[bound] += c;
  Histogram h;
  h.sum = a.sum + b.sum;
  h.count = a.count + b.count;
  for (const auto& [bound, c] : m) h.buckets.emplace_back(bound, c);
  return h;
}

std::optional<double> quantile(double q, const Histogram& h) {
  if (h.buckets.empty()) return std::nullopt;
  const double total = h.buckets.back().second;
  if (!(total > 0) || q <= 0 || q >= 1) return std::nullopt;
  const double rank = q * total;
  double prev_bound = 0, prev_count = 0;
  for (size_t i = 0; i < h.buckets.size(); ++i) {
    const auto& [bound, count] = h.buckets[i];
    if (count >= rank) {
      if (std::isinf(bound)) return i > 0 ? h.buckets[i - 1].first : 0.0;
      const double in_bucket = count - prev_count;
      if (in_bucket <= 0) return bound;
      // The first bucket starts at 0 (latencies are never negative), like histogram_quantile.
      const double lower = i == 0 ? std::min(0.0, bound) : prev_bound;
      return lower + (bound - lower) * (rank - prev_count) / in_bucket;
    }
    prev_bound = bound;
    prev_count = count;
  }
  return h.buckets.back().first;
}

}  // namespace infergate::op::rollout
