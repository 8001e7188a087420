// Output directories that appear complete or not at all: everything is written into a hidden staging
// directory beside the destination (".NAME.partial-XXXXXX"), fsynced, and renamed into place at the
// end. An interrupted run leaves at most the staging directory, whose name never looks finished; an
// abandoned StagedDirectory removes it.
#pragma once

#include <filesystem>

#include "infergate/common/result.h"

namespace infergate::runtime::model {

class StagedDirectory {
 public:
  // Refuses (reason "OutputNotEmpty") when `out` is a non-empty directory, unless `force`; refuses
  // (reason "OutputExists") when it exists and is not a directory.
  static Result<StagedDirectory> create(const std::filesystem::path& out, bool force);

  StagedDirectory(StagedDirectory&& o) noexcept;
  StagedDirectory& operator=(StagedDirectory&&) = delete;
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;
  ~StagedDirectory();

  // Where to write.
  const std::filesystem::path& path() const { return staging_; }
  // fsyncs the staging directory and renames it to the destination (replacing a previous one when
  // forced), then fsyncs the parent.
  Status commit();

 private:
  StagedDirectory() = default;
  std::filesystem::path out_;
  std::filesystem::path staging_;
  bool committed_ = false;
};

}  // namespace infergate::runtime::model
