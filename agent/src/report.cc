// Report lines: nlohmann's ordered_json keeps "reason" first for the humans who read them.
#include "infergate/agent/report.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "infergate/agent/reasons.h"
#include "infergate/common/fs.h"

namespace infergate::agent {
namespace {

using OrderedJson = nlohmann::ordered_json;

std::string dump_line(const OrderedJson& j) {
  return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace) + "\n";
}

// Cuts a string to at most `bytes` bytes, on a UTF-8 character boundary, and marks the cut.
std::string shorten(const std::string& s, size_t bytes) {
  if (s.size() <= bytes) return s;
  size_t keep = bytes > 3 ? bytes - 3 : 0;
  while (keep > 0 && (static_cast<unsigned char>(s[keep]) & 0xC0) == 0x80) --keep;
  return s.substr(0, keep) + "...";
}

}  // namespace

std::string refusal_report(const Error& error) {
  Reason reason = reason_of(error);
  std::string message = error.message();
  std::string fields[3] = {std::string(error.detail("file")), std::string(error.detail("expected")),
                           std::string(error.detail("actual"))};
  static constexpr const char* kNames[3] = {"file", "expected", "actual"};
  auto build = [&] {
    OrderedJson j;
    j["reason"] = reason_word(reason);
    j["message"] = message;
    for (int i = 0; i < 3; ++i) {
      if (!fields[i].empty()) j[kNames[i]] = fields[i];
    }
    j["exitCode"] = exit_code(reason);
    return dump_line(j);
  };
  std::string line = build();
  // Escaping can grow a field up to six-fold (control characters become \u00XX), so shorten the
  // longest field until the line fits; each round at least halves the excess or the field.
  for (int round = 0; line.size() > kMaxReportBytes && round < 64; ++round) {
    std::string* longest = &message;
    for (auto& f : fields) {
      if (f.size() > longest->size()) longest = &f;
    }
    size_t excess = line.size() - kMaxReportBytes;
    size_t target = longest->size() > excess + 16 ? longest->size() - excess - 16 : longest->size() / 2;
    *longest = shorten(*longest, target);
    line = build();
  }
  return line;
}

std::string success_report(const VerifiedRelease& r) {
  OrderedJson j;
  j["reason"] = "Verified";
  j["format"] = r.format;
  j["releaseDigest"] = r.release_digest;
  j["name"] = shorten(r.name, 512);
  if (r.version) j["version"] = *r.version;
  j["weightFormat"] = r.weight_format;
  if (r.created_at) j["createdAt"] = *r.created_at;
  if (r.expires_at) j["expiresAt"] = *r.expires_at;
  if (!r.signer.empty()) j["signer"] = shorten(r.signer, 1024);
  j["files"] = r.files;
  j["bytes"] = r.bytes;
  j["seconds"] = std::round(r.seconds * 1000.0) / 1000.0;
  j["exitCode"] = 0;
  return dump_line(j);
}

Status write_report_file(const std::filesystem::path& path, std::string_view line) {
  return write_file_atomic(path, line, 0644).context("writing the report");
}

Status write_termination_log(const std::filesystem::path& path, std::string_view line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0644);
  if (fd < 0) return errno_error("open termination log " + path.string(), errno);
  UniqueFd guard(fd);
  return write_all(fd, line, path.string());
}

}  // namespace infergate::agent
