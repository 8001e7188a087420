// Stage-then-rename output directories.
#include "infergate/runtime/model/staged_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <system_error>

#include "infergate/common/fs.h"

namespace infergate::runtime::model {
namespace fs = std::filesystem;

namespace {

Result<fs::path> make_hidden_dir(const fs::path& parent, const std::string& name, std::string_view kind) {
  std::string tmpl = (parent / ("." + name + "." + std::string(kind) + "-XXXXXX")).string();
  if (!mkdtemp(tmpl.data()))
    return errno_error("creating a staging directory beside " + (parent / name).string(), errno);
  // mkdtemp makes it 0700; the finished directory is an artifact others (the runtime's user) read.
  if (chmod(tmpl.c_str(), 0755) != 0) return errno_error("chmod " + tmpl, errno);
  return fs::path(tmpl);
}

}  // namespace

Result<StagedDirectory> StagedDirectory::create(const fs::path& out_arg, bool force) {
  fs::path out = out_arg;
  if (out.filename().empty()) out = out.parent_path();  // "dir/" -> "dir"
  if (out.empty()) return invalid_argument("no output directory given");
  std::error_code ec;
  fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  if (!fs::is_directory(parent, ec)) {
    return Error(ErrorCode::kNotFound, parent.string() + ": the output's parent directory does not exist",
                 "OutputParentMissing");
  }
  auto st = fs::symlink_status(out, ec);
  if (!ec && fs::exists(st)) {
    if (!fs::is_directory(st)) {
      return Error(ErrorCode::kAlreadyExists, out.string() + ": exists and is not a directory",
                   "OutputExists");
    }
    if (!fs::is_empty(out, ec) && !force) {
      return Error(ErrorCode::kAlreadyExists,
                   out.string() + ": is not empty; refusing to overwrite it (pass --force to replace it)",
                   "OutputNotEmpty");
    }
  }
  StagedDirectory s;
  s.out_ = out;
  INFERGATE_ASSIGN_OR_RETURN(s.staging_, make_hidden_dir(parent, out.filename().string(), "partial"));
  return s;
}

StagedDirectory::StagedDirectory(StagedDirectory&& o) noexcept
    : out_(std::move(o.out_)), staging_(std::move(o.staging_)), committed_(o.committed_) {
  o.staging_.clear();
  o.committed_ = true;
}

StagedDirectory::~StagedDirectory() {
  if (!committed_ && !staging_.empty()) {
    std::error_code ec;
    fs::remove_all(staging_, ec);
  }
}

Status StagedDirectory::commit() {
  if (committed_) return failed_precondition("already committed");
  INFERGATE_RETURN_IF_ERROR(fsync_dir(staging_));
  std::error_code ec;
  fs::path parent = out_.parent_path().empty() ? fs::path(".") : out_.parent_path();
  fs::path old;
  if (fs::exists(fs::symlink_status(out_, ec)) && !fs::is_empty(out_, ec)) {
    // Move the previous output aside (onto an empty placeholder, which rename replaces), then swap.
    INFERGATE_ASSIGN_OR_RETURN(old, make_hidden_dir(parent, out_.filename().string(), "old"));
    if (::rename(out_.c_str(), old.c_str()) != 0)
      return errno_error("moving the previous " + out_.string() + " aside", errno);
  }
  // rename(2) replaces an empty directory atomically.
  if (::rename(staging_.c_str(), out_.c_str()) != 0) {
    int err = errno;
    if (!old.empty()) (void)::rename(old.c_str(), out_.c_str());
    return errno_error("renaming the finished output to " + out_.string(), err);
  }
  committed_ = true;
  INFERGATE_RETURN_IF_ERROR(fsync_dir(parent));
  if (!old.empty()) fs::remove_all(old, ec);
  return ok_status();
}

}  // namespace infergate::runtime::model
