// OMS resources against the tree: one merge of two sorted lists, then the parallel hasher.
#include "infergate/agent/manifest/oms_check.h"

#include <map>

#include "infergate/agent/hashing/parallel_hasher.h"
#include "infergate/agent/reasons.h"
#include "infergate/common/manifest.h"

namespace infergate::agent {
namespace {

// Each listed file with its resources, in path order (byte order, as the walk sorts).
using Listed = std::map<std::string_view, std::vector<const OmsResource*>>;

Listed by_path(const OmsStatement& s) {
  Listed out;
  for (const auto& r : s.resources) out[r.path].push_back(&r);
  for (auto& [path, rs] : out) {
    std::sort(rs.begin(), rs.end(),
              [](const OmsResource* a, const OmsResource* b) { return a->start < b->start; });
  }
  return out;
}

// The hash jobs for one listed file; SizeMismatch when its shards end elsewhere than the file does.
Status add_jobs(const FileInfo& f, const std::vector<const OmsResource*>& rs, const OmsSerialization& ser,
                std::vector<HashJob>* jobs) {
  if (ser.method == OmsMethod::kFiles) {
    jobs->push_back({f, rs.front()->digest, {}});
    return ok_status();
  }
  uint64_t end = rs.back()->end;
  if (end != f.size) {
    return refusal(Reason::kSizeMismatch, f.path + " is " + std::to_string(f.size) +
                                              " bytes; its signed shards end at " + std::to_string(end))
        .with_detail("file", f.path)
        .with_detail("expected", std::to_string(end))
        .with_detail("actual", std::to_string(f.size));
  }
  for (const OmsResource* r : rs) jobs->push_back({f, r->digest, ByteRange{r->start, r->end - r->start}});
  return ok_status();
}

}  // namespace

Result<std::vector<FileInfo>> oms_covered_files(int root_fd, const OmsSerialization& serialization,
                                                const WalkLimits& limits) {
  WalkFilter filter;
  filter.skip = [&](std::string_view path) {
    return path == kBundleFileName || oms_ignored(path, serialization.ignore_paths);
  };
  filter.resolve_links = serialization.allow_symlinks;
  return walk_tree(root_fd, limits, filter);
}

Result<TreeSummary> check_oms_tree(int root_fd, const OmsStatement& statement, const TreeOptions& options) {
  const OmsSerialization& ser = statement.serialization;
  INFERGATE_ASSIGN_OR_RETURN(std::vector<FileInfo> files, oms_covered_files(root_fd, ser, options.limits));
  if (statement.resources.empty()) {
    return refusal(Reason::kEmptyRelease, "the OMS statement in model.sig lists no file: nothing to serve");
  }
  Listed listed = by_path(statement);
  std::vector<std::string_view> paths;
  std::vector<const std::vector<const OmsResource*>*> resources;
  for (const auto& [path, rs] : listed) {
    paths.push_back(path);
    resources.push_back(&rs);
  }
  std::vector<std::pair<const FileInfo*, const std::vector<const OmsResource*>*>> matched;
  // Under shards an empty file has no resource at all: it is covered, and nothing is there to hash.
  auto shardless = [&](const FileInfo& f) { return ser.method == OmsMethod::kShards && f.size == 0; };
  INFERGATE_RETURN_IF_ERROR(match_listed(files, paths, "model.sig", shardless, [&](FileInfo& f, size_t i) {
    matched.push_back({&f, resources[i]});
  }));
  std::vector<HashJob> jobs;
  TreeSummary summary;
  for (const auto& [f, rs] : matched) {
    INFERGATE_RETURN_IF_ERROR(add_jobs(*f, *rs, ser, &jobs));
    summary.sizes.emplace(f->path, f->size);
    summary.bytes += f->size;
  }
  summary.files = matched.size();
  if (options.before_hashing) options.before_hashing(summary.bytes);
  INFERGATE_RETURN_IF_ERROR(hash_files(root_fd, jobs, parallel_hash_options(options)));
  return summary;
}

Result<std::vector<OmsResource>> build_oms_resources(int root_fd, const OmsSerialization& ser,
                                                     const TreeOptions& options, TreeSummary* summary) {
  INFERGATE_ASSIGN_OR_RETURN(std::vector<FileInfo> files, oms_covered_files(root_fd, ser, options.limits));
  std::vector<HashJob> jobs;
  std::vector<OmsResource> resources;
  uint64_t total = 0;
  for (const auto& f : files) {
    total += f.size;
    summary->sizes.emplace(f.path, f.size);
    if (ser.method == OmsMethod::kFiles) {
      jobs.push_back({f, std::nullopt, {}});
      resources.push_back({f.path, 0, 0, {}});
      continue;
    }
    for (uint64_t start = 0; start < f.size; start += ser.shard_size) {
      uint64_t end = std::min(f.size, start + ser.shard_size);
      jobs.push_back({f, std::nullopt, ByteRange{start, end - start}});
      resources.push_back({f.path, start, end, {}});
    }
  }
  summary->files = files.size();
  summary->bytes = total;
  if (options.before_hashing) options.before_hashing(total);
  INFERGATE_ASSIGN_OR_RETURN(std::vector<Sha256Digest> digests,
                             hash_files(root_fd, jobs, parallel_hash_options(options)));
  for (size_t i = 0; i < resources.size(); ++i) resources[i].digest = digests[i];
  sort_oms_resources(resources);
  return resources;
}

}  // namespace infergate::agent
