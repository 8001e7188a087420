// Manifest building and checking over the no-follow walk and the parallel hasher.
#include "infergate/agent/manifest/tree_check.h"

#include "infergate/agent/reasons.h"

namespace infergate::agent {
namespace {

bool is_top_level_reserved(std::string_view path) {
  return path == kManifestFileName || path == kReleaseFileName || path == kBundleFileName;
}

bool named_manifest(std::string_view path) {
  size_t slash = path.rfind('/');
  return (slash == std::string_view::npos ? path : path.substr(slash + 1)) == kManifestFileName;
}

}  // namespace

Result<std::vector<FileInfo>> manifest_files(int root_fd, const WalkLimits& limits) {
  INFERGATE_ASSIGN_OR_RETURN(std::vector<FileInfo> all, walk_tree(root_fd, limits));
  std::vector<FileInfo> files;
  files.reserve(all.size());
  for (auto& f : all) {
    if (is_top_level_reserved(f.path)) continue;
    if (named_manifest(f.path)) {
      return refusal(Reason::kUnlistedFile, f.path +
                                                ": a file named SHA256SUMS below the top level can never be "
                                                "listed (find's ! -name SHA256SUMS skips it)")
          .with_detail("file", f.path);
    }
    files.push_back(std::move(f));
  }
  return files;
}

ParallelHashOptions parallel_hash_options(const TreeOptions& o) {
  ParallelHashOptions p;
  p.threads = o.threads;
  p.bytes_hashed = o.bytes_hashed;
  p.after_chunk = o.after_chunk;
  return p;
}

Status match_listed(std::vector<FileInfo>& files, const std::vector<std::string_view>& listed,
                    std::string_view listed_in, const std::function<bool(const FileInfo&)>& may_be_unlisted,
                    const std::function<void(FileInfo& file, size_t listed_index)>& on_match) {
  std::optional<std::string> unlisted;
  size_t i = 0, k = 0;
  while (i < listed.size() || k < files.size()) {
    if (k == files.size() || (i < listed.size() && listed[i] < files[k].path)) {
      return refusal(Reason::kMissingFile,
                     std::string(listed[i]) + " is listed in " + std::string(listed_in) + " but absent")
          .with_detail("file", std::string(listed[i]));
    }
    if (i == listed.size() || files[k].path < listed[i]) {
      if (!unlisted && !(may_be_unlisted && may_be_unlisted(files[k]))) unlisted = files[k].path;
      ++k;
      continue;
    }
    on_match(files[k], i);
    ++i;
    ++k;
  }
  if (unlisted) {
    return refusal(Reason::kUnlistedFile,
                   *unlisted + " is present but not listed in " + std::string(listed_in))
        .with_detail("file", *unlisted);
  }
  return ok_status();
}

Result<Manifest> build_manifest(int root_fd, const TreeOptions& options) {
  INFERGATE_ASSIGN_OR_RETURN(std::vector<FileInfo> files, manifest_files(root_fd, options.limits));
  std::vector<HashJob> jobs;
  uint64_t total = 0;
  for (auto& f : files) {
    total += f.size;
    jobs.push_back({std::move(f), std::nullopt, {}});
  }
  if (options.before_hashing) options.before_hashing(total);
  INFERGATE_ASSIGN_OR_RETURN(std::vector<Sha256Digest> digests,
                             hash_files(root_fd, jobs, parallel_hash_options(options)));
  std::vector<ManifestEntry> entries;
  entries.reserve(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) entries.push_back({jobs[i].file.path, digests[i]});
  return Manifest::from_entries(std::move(entries));
}

Result<TreeSummary> check_tree(int root_fd, const Manifest& manifest,
                               const std::optional<std::map<std::string, uint64_t>>& signed_sizes,
                               const TreeOptions& options) {
  INFERGATE_ASSIGN_OR_RETURN(std::vector<FileInfo> files, manifest_files(root_fd, options.limits));
  const auto& entries = manifest.entries();
  std::vector<std::string_view> listed;
  listed.reserve(entries.size());
  for (const auto& e : entries) listed.push_back(e.path);
  std::vector<HashJob> jobs;
  jobs.reserve(entries.size());
  INFERGATE_RETURN_IF_ERROR(match_listed(files, listed, "SHA256SUMS", {}, [&](FileInfo& f, size_t i) {
    jobs.push_back({std::move(f), entries[i].digest, {}});
  }));
  TreeSummary summary;
  for (const auto& job : jobs) {
    if (signed_sizes) {
      auto it = signed_sizes->find(job.file.path);
      if (it == signed_sizes->end()) {
        return refusal(Reason::kStatementInvalid, "the signed statement has no size for " + job.file.path)
            .with_detail("file", job.file.path);
      }
      if (it->second != job.file.size) {
        return refusal(Reason::kSizeMismatch, job.file.path + " is " + std::to_string(job.file.size) +
                                                  " bytes; the release says " + std::to_string(it->second))
            .with_detail("file", job.file.path)
            .with_detail("expected", std::to_string(it->second))
            .with_detail("actual", std::to_string(job.file.size));
      }
    }
    summary.sizes.emplace(job.file.path, job.file.size);
    summary.bytes += job.file.size;
  }
  summary.files = jobs.size();
  if (options.before_hashing) options.before_hashing(summary.bytes);
  INFERGATE_RETURN_IF_ERROR(hash_files(root_fd, jobs, parallel_hash_options(options)));
  return summary;
}

}  // namespace infergate::agent
