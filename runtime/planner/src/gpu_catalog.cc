// The GPU catalogue and memory-size parsing.
#include "infergate/runtime/planner/gpu_catalog.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "input_error.h"

namespace infergate::runtime::planner {
namespace {

constexpr int64_t kMiBytes = int64_t{1} << 20;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

const std::vector<GpuSpec>& gpu_catalog() {
  // Usable memory: nvidia-smi's memory.total on each card, ECC on where the card has it (as
  // reported publicly, e.g. modal-labs/modal-client#2797 for H100, A100 and L40S; H200 and RTX 4090
  // from nvidia-smi tables in public issue reports). Marketed sizes are the vendor's "GB".
  static const std::vector<GpuSpec> catalog = {
      {"h100", "NVIDIA H100 80GB", "80 GB", 81559 * kMiBytes, "h100-80gb,h100-sxm,h100-pcie"},
      {"h200", "NVIDIA H200", "141 GB", 143771 * kMiBytes, "h200-141gb,h200-sxm"},
      {"a100-40gb", "NVIDIA A100 40GB", "40 GB", 40960 * kMiBytes, "a100-40g"},
      {"a100-80gb", "NVIDIA A100 80GB", "80 GB", 81920 * kMiBytes, "a100,a100-80g"},
      {"l40s", "NVIDIA L40S", "48 GB", 46068 * kMiBytes, "l40s-48gb"},
      {"rtx-4090", "NVIDIA GeForce RTX 4090", "24 GB", 24564 * kMiBytes, "rtx4090,4090"},
  };
  return catalog;
}

Result<GpuSpec> find_gpu(std::string_view name) {
  const std::string n = lower(name);
  std::string known;
  for (const GpuSpec& g : gpu_catalog()) {
    if (g.name == n) return g;
    size_t start = 0;
    while (start <= g.aliases.size()) {
      size_t end = g.aliases.find(',', start);
      if (end == std::string::npos) end = g.aliases.size();
      if (g.aliases.substr(start, end - start) == n) return g;
      start = end + 1;
    }
    known += (known.empty() ? "" : ", ") + g.name;
  }
  return input_error(
      "gpu", "unknown GPU '" + std::string(name) + "' (known: " + known + "; or give --gpu-memory SIZE)");
}

Result<int64_t> parse_memory_size(std::string_view text, std::string_view field_view) {
  const std::string field(field_view);
  const std::string s = lower(text);
  if (s.empty()) return input_error(field, "empty size");
  size_t unit_at = 0;
  while (unit_at < s.size() && (std::isdigit(static_cast<unsigned char>(s[unit_at])) || s[unit_at] == '.' ||
                                s[unit_at] == '-' || s[unit_at] == '+' || s[unit_at] == 'e')) {
    // 'e' is an exponent only when followed by a digit or sign ("1e9"), not the unit "eb" (unsupported).
    if (s[unit_at] == 'e' &&
        (unit_at + 1 >= s.size() || !(std::isdigit(static_cast<unsigned char>(s[unit_at + 1])) ||
                                      s[unit_at + 1] == '-' || s[unit_at + 1] == '+'))) {
      break;
    }
    ++unit_at;
  }
  std::string number = s.substr(0, unit_at);
  std::string unit = s.substr(unit_at);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  char* end = nullptr;
  const double v = number.empty() ? NAN : std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(v)) {
    return input_error(field, "'" + std::string(text) + "' is not a size (e.g. 141GB, 80GiB, 81559MiB)");
  }
  double scale = 0;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "kb" || unit == "k")
    scale = 1e3;
  else if (unit == "mb" || unit == "m")
    scale = 1e6;
  else if (unit == "gb" || unit == "g")
    scale = 1e9;
  else if (unit == "tb" || unit == "t")
    scale = 1e12;
  else if (unit == "kib")
    scale = 1024.0;
  else if (unit == "mib")
    scale = 1024.0 * 1024;
  else if (unit == "gib")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else {
    return input_error(field, "unknown unit '" + unit + "' in '" + std::string(text) +
                                  "' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)");
  }
  const double bytes = v * scale;
  if (bytes <= 0) return input_error(field, "must be positive, got '" + std::string(text) + "'");
  if (bytes > 1024.0 * 1024 * 1024 * 1024 * 1024) {
    return input_error(field, "'" + std::string(text) + "' is larger than 1 PiB");
  }
  return static_cast<int64_t>(std::llround(bytes));
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  }
  return buf;
}

}  // namespace infergate::runtime::planner
