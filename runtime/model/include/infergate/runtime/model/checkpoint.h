// A Hugging Face checkpoint's weights: model.safetensors, or shards listed by
// model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map": {tensor: file}}).
//
// Guarantees: pickle weights (.bin, .pt, .pth, .ckpt, .pkl) anywhere at the top of the directory are
// refused (reason "PickleRefused"): unpickling runs code from the file, and no pickle loader exists
// here. Shard names must be plain file names. The index and the shards must agree exactly: every
// mapped tensor is in its shard, every shard tensor is mapped to that shard, no tensor is in two
// shards. Each shard passes the safetensors checks (safetensors.h).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/runtime/model/files.h"
#include "infergate/runtime/model/safetensors.h"

namespace infergate::runtime::model {

inline constexpr std::string_view kSingleCheckpointName = "model.safetensors";
inline constexpr std::string_view kCheckpointIndexName = "model.safetensors.index.json";

// Refuses if the directory holds pickle-format weight files; names the first one found.
Status refuse_pickle_files(const ModelDirectory& dir);

// Which files hold the weights, read from the directory listing and the index (no shard opened).
struct CheckpointLayout {
  bool sharded = false;
  std::vector<std::string> shards;                // sorted, unique
  std::map<std::string, std::string> weight_map;  // tensor -> shard (sharded only)
  std::optional<uint64_t> index_total_size;       // the index's metadata.total_size, if any
};
Result<CheckpointLayout> read_checkpoint_layout(const ModelDirectory& dir);

// The mapped, validated shards of a checkpoint, with tensors looked up by name. Immutable after open.
class Checkpoint {
 public:
  static Result<Checkpoint> open(const ModelDirectory& dir, const SafetensorsLimits& limits = {});

  struct Entry {
    size_t shard;  // index into shards()
    const TensorInfo* info;
  };
  const CheckpointLayout& layout() const { return layout_; }
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  const Entry* find(std::string_view tensor) const;
  std::span<const uint8_t> data(const Entry& e) const { return shards_[e.shard].data(*e.info); }
  // Every tensor name, sorted.
  std::vector<std::string> tensor_names() const;
  size_t num_tensors() const { return entries_.size(); }
  // Sum of the tensors' byte sizes.
  uint64_t tensor_bytes() const { return tensor_bytes_; }

 private:
  CheckpointLayout layout_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, Entry, std::less<>> entries_;
  uint64_t tensor_bytes_ = 0;
};

}  // namespace infergate::runtime::model
