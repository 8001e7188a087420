// Weight-format detection through the one weights description.
#include "infergate/agent/manifest/weight_format.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "infergate/agent/hashing/tree.h"
#include "infergate/agent/reasons.h"
#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/weights/description.h"

namespace infergate::agent {
namespace {

constexpr size_t kMaxMetadataBytes = 16u << 20;

Error metadata_invalid(std::string_view file, const std::string& why) {
  return refusal(Reason::kMetadataInvalid, std::string(file) + ": " + why)
      .with_detail("file", std::string(file));
}

// A description refusal as the agent reports it: WeightsInvalid, the description's word as "problem".
Error weights_invalid(const Error& e) {
  Error out =
      refusal(Reason::kWeightsInvalid, e.reason() + ": " + e.message()).with_detail("problem", e.reason());
  for (const auto& [k, v] : e.details()) out.with_detail(k, v);
  return out;
}

// The checkpoint is the top level's safetensors files, as a loader reads them (a copy in a
// subdirectory, such as an original/ export, is not part of it).
bool is_checkpoint_shard(std::string_view path) {
  return path.ends_with(".safetensors") && path.find('/') == std::string_view::npos;
}

// Reads tensor bytes for the description's value checks through the shards' no-follow descriptors.
class ShardReader : public weights::TensorReader {
 public:
  explicit ShardReader(std::map<std::string, UniqueFd, std::less<>>& fds) : fds_(fds) {}
  Status read(const weights::TensorHeader& t, uint64_t offset, std::span<uint8_t> out) override {
    auto it = fds_.find(t.file);
    if (it == fds_.end()) return internal_error("no descriptor for " + t.file);
    if (offset > t.bytes || out.size() > t.bytes - offset) return out_of_range("read past tensor " + t.name);
    return read_exact_at(it->second.get(), out.data(), out.size(), t.offset + offset, t.file);
  }

 private:
  std::map<std::string, UniqueFd, std::less<>>& fds_;
};

Result<std::optional<std::string>> optional_file(int root_fd, const Manifest& manifest,
                                                 std::string_view name) {
  if (manifest.find(name) == nullptr) return std::optional<std::string>();
  INFERGATE_ASSIGN_OR_RETURN(std::string text,
                             read_small_file(root_fd, name, kMaxMetadataBytes, Reason::kMetadataInvalid));
  return std::optional<std::string>(std::move(text));
}

// A release without safetensors: config.json's torch_dtype, unless its metadata names a quantized format.
Result<std::optional<std::string>> without_tensors(const weights::ReleaseMetadata& m) {
  if (m.quantization_json) {
    return weights_invalid(
        refusal(Reason::kWeightsInvalid,
                "quantization.json names a quantized format but the release has no safetensors")
            .with_reason("FormatMismatch")
            .with_detail("field", "quantization.json"));
  }
  if (!m.config_json) return std::optional<std::string>();
  auto j = parse_json(*m.config_json, "config.json");
  if (!j.ok() || !j->is_object()) return std::optional<std::string>();
  auto q = weights::find_quantization_config(*j);
  if (q.ok() && q->config != nullptr) {
    return weights_invalid(refusal(Reason::kWeightsInvalid,
                                   q->field + " names a quantized format but the release has no safetensors")
                               .with_reason("FormatMismatch")
                               .with_detail("field", q->field));
  }
  auto dtype = json_string_or(*j, "torch_dtype", "");
  if (dtype.ok()) {
    if (*dtype == "float16") return std::optional<std::string>("fp16");
    if (*dtype == "bfloat16") return std::optional<std::string>("bf16");
    if (*dtype == "float32") return std::optional<std::string>("fp32");
  }
  return std::optional<std::string>();
}

}  // namespace

Result<std::optional<std::string>> detect_weight_format(int root_fd, const Manifest& manifest) {
  weights::ReleaseMetadata m;
  INFERGATE_ASSIGN_OR_RETURN(m.config_json, optional_file(root_fd, manifest, "config.json"));
  INFERGATE_ASSIGN_OR_RETURN(m.quantization_json, optional_file(root_fd, manifest, "quantization.json"));
  std::map<std::string, UniqueFd, std::less<>> fds;
  for (const auto& e : manifest.entries()) {
    if (!is_checkpoint_shard(e.path)) continue;
    INFERGATE_ASSIGN_OR_RETURN(UniqueFd fd, open_beneath(root_fd, e.path));
    auto headers = weights::read_safetensors_header(fd.get(), e.path);
    if (!headers.ok()) return metadata_invalid(e.path, headers.error().message());
    for (weights::TensorHeader& t : *headers) m.tensors.push_back(std::move(t));
    fds.emplace(e.path, std::move(fd));
  }
  if (fds.empty()) return without_tensors(m);
  ShardReader reader(fds);
  weights::DescribeOptions o;
  o.reader = &reader;
  auto d = weights::describe_weights(m, o);
  if (!d.ok()) {
    const auto words = weights::description_reasons();
    if (std::find(words.begin(), words.end(), d.error().reason()) != words.end())
      return weights_invalid(d.error());
    return std::move(d).error();  // reading a shard failed: the read's own refusal (IoError, ...)
  }
  return std::optional<std::string>(d->word);
}

}  // namespace infergate::agent
