// Checkpoint discovery (single file or index + shards), pickle refusal, cross-shard validation.
#include "infergate/runtime/model/checkpoint.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "infergate/common/json.h"
#include "infergate/common/log.h"

namespace infergate::runtime::model {
namespace {

constexpr size_t kMaxIndexBytes = 64u << 20;
constexpr size_t kMaxShards = 100000;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Error checkpoint_error(std::string_view reason, std::string message, std::string_view file,
                       std::string_view tensor = {}) {
  Error e(ErrorCode::kInvalidArgument, std::move(message), std::string(reason));
  e.with_detail("file", std::string(file));
  if (!tensor.empty()) e.with_detail("tensor", std::string(tensor));
  return e;
}

}  // namespace

Status refuse_pickle_files(const ModelDirectory& dir) {
  INFERGATE_ASSIGN_OR_RETURN(std::vector<std::string> names, dir.list());
  for (const std::string& n : names) {
    for (std::string_view ext : {".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle"}) {
      if (ends_with(n, ext)) {
        return Error(ErrorCode::kInvalidArgument,
                     n + ": pickle-format weights are refused: loading a pickle runs code stored in the "
                         "file, so "
                         "no pickle loader exists here; publish the weights as safetensors",
                     "PickleRefused")
            .with_detail("file", n);
      }
    }
  }
  return ok_status();
}

Result<CheckpointLayout> read_checkpoint_layout(const ModelDirectory& dir) {
  INFERGATE_RETURN_IF_ERROR(refuse_pickle_files(dir));
  CheckpointLayout layout;
  const bool single = dir.exists(kSingleCheckpointName);
  const bool index = dir.exists(kCheckpointIndexName);
  if (single && index) {
    return checkpoint_error(
        "AmbiguousCheckpoint",
        "both model.safetensors and model.safetensors.index.json are present; a checkpoint "
        "must be one or the other",
        kCheckpointIndexName);
  }
  if (single) {
    layout.shards.emplace_back(kSingleCheckpointName);
    return layout;
  }
  if (!index) {
    if (dir.exists("pytorch_model.bin.index.json")) {
      return checkpoint_error(
          "PickleRefused",
          "pytorch_model.bin.index.json: the checkpoint is in pickle format, which is refused; "
          "publish the weights as safetensors",
          "pytorch_model.bin.index.json");
    }
    return Error(ErrorCode::kNotFound,
                 dir.path().string() + ": no model.safetensors or model.safetensors.index.json",
                 "MissingCheckpoint")
        .with_detail("file", std::string(kSingleCheckpointName));
  }
  layout.sharded = true;
  INFERGATE_ASSIGN_OR_RETURN(std::string text, dir.read(kCheckpointIndexName, kMaxIndexBytes));
  auto parsed = parse_json(text, kCheckpointIndexName);
  if (!parsed.ok()) return Error(std::move(parsed).error()).with_reason("InvalidCheckpointIndex");
  const Json& j = *parsed;
  const std::string idx(kCheckpointIndexName);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return checkpoint_error("InvalidCheckpointIndex",
                            idx + ": weight_map: expected an object of tensor -> file", idx);
  }
  if (j.contains("metadata") && j["metadata"].is_object() && j["metadata"].contains("total_size") &&
      j["metadata"]["total_size"].is_number_unsigned()) {
    layout.index_total_size = j["metadata"]["total_size"].get<uint64_t>();
  }
  std::set<std::string> shards;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) {
      return checkpoint_error("InvalidCheckpointIndex",
                              idx + ": weight_map." + it.key() + ": expected a file name", idx, it.key());
    }
    std::string file = it.value().get<std::string>();
    INFERGATE_RETURN_IF_ERROR(check_plain_name(file, idx + ": weight_map." + it.key()));
    if (!ends_with(file, ".safetensors")) {
      return checkpoint_error("PickleRefused",
                              idx + ": weight_map." + it.key() + ": '" + file +
                                  "' is not a .safetensors file; only safetensors weights are loaded",
                              idx, it.key());
    }
    shards.insert(file);
    if (shards.size() > kMaxShards) {
      return checkpoint_error("InvalidCheckpointIndex", idx + ": too many shards", idx);
    }
    layout.weight_map.emplace(it.key(), file);
  }
  if (layout.weight_map.empty()) {
    return checkpoint_error("InvalidCheckpointIndex", idx + ": weight_map is empty", idx);
  }
  layout.shards.assign(shards.begin(), shards.end());
  return layout;
}

namespace {

// The shards, in the layout's order. When every file is hashed while it loads, one SHA-256 chain per
// file holds a file to one core's hashing speed, so shards are read on as many threads as the machine
// has cores (each with its own hasher from the directory's concurrent()); mapped shards cost nothing
// to open and are opened in order. The first failure in shard order is the one reported; after a
// failure no further shard is started.
Result<std::vector<SafetensorsFile>> open_shards(const ModelDirectory& dir,
                                                 const std::vector<std::string>& names,
                                                 const SafetensorsLimits& limits) {
  std::vector<SafetensorsFile> out;
  out.reserve(names.size());
  std::unique_ptr<LoadHasher> first =
      dir.hasher() != nullptr && names.size() > 1 ? dir.hasher()->concurrent() : nullptr;
  const size_t workers =
      first ? std::min<size_t>(names.size(), std::max(1u, std::thread::hardware_concurrency())) : 1;
  if (workers <= 1) {
    for (const std::string& name : names) {
      INFERGATE_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(dir, name, limits));
      out.push_back(std::move(f));
    }
    return out;
  }
  std::vector<std::unique_ptr<LoadHasher>> hashers;
  hashers.push_back(std::move(first));
  while (hashers.size() < workers) {
    hashers.push_back(dir.hasher()->concurrent());
    if (!hashers.back()) return internal_error("a load hasher gave no second concurrent hasher");
  }
  std::vector<std::optional<Result<SafetensorsFile>>> opened(names.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      for (size_t i = next++; i < names.size() && !failed.load(); i = next++) {
        opened[i].emplace(SafetensorsFile::open(dir, names[i], limits, hashers[w].get()));
        if (!opened[i]->ok()) failed = true;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < names.size(); ++i) {
    if (opened[i] && !opened[i]->ok()) return std::move(*opened[i]).error();
  }
  for (size_t i = 0; i < names.size(); ++i) out.push_back(std::move(**opened[i]));
  return out;
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const ModelDirectory& dir, const SafetensorsLimits& limits) {
  Checkpoint c;
  INFERGATE_ASSIGN_OR_RETURN(c.layout_, read_checkpoint_layout(dir));
  INFERGATE_ASSIGN_OR_RETURN(c.shards_, open_shards(dir, c.layout_.shards, limits));
  for (size_t s = 0; s < c.shards_.size(); ++s) {
    const SafetensorsFile& shard = c.shards_[s];
    for (const TensorInfo& t : shard.tensors()) {
      if (c.layout_.sharded) {
        auto it = c.layout_.weight_map.find(t.name);
        if (it == c.layout_.weight_map.end()) {
          return checkpoint_error("IndexMismatch",
                                  shard.name() + ": tensor '" + t.name + "' is not listed in " +
                                      std::string(kCheckpointIndexName),
                                  shard.name(), t.name);
        }
        if (it->second != shard.name()) {
          return checkpoint_error("IndexMismatch",
                                  shard.name() + ": tensor '" + t.name + "' is mapped to " + it->second +
                                      " by the index (a tensor may live in one shard only)",
                                  shard.name(), t.name);
        }
      }
      if (!c.entries_.emplace(t.name, Entry{s, &t}).second) {
        return checkpoint_error("DuplicateTensor", shard.name() + ": tensor '" + t.name + "' appears twice",
                                shard.name(), t.name);
      }
      c.tensor_bytes_ += t.nbytes();
    }
  }
  if (c.layout_.sharded) {
    for (const auto& [tensor, file] : c.layout_.weight_map) {
      if (!c.entries_.count(tensor)) {
        return checkpoint_error("IndexMismatch",
                                std::string(kCheckpointIndexName) + ": tensor '" + tensor +
                                    "' is mapped to " + file + ", which does not contain it",
                                file, tensor);
      }
    }
    if (c.layout_.index_total_size && *c.layout_.index_total_size != c.tensor_bytes_) {
      // Published indexes are not always exact (shared tensors, hand edits); the shards are the truth.
      log::warn("checkpoint index total_size differs from the shards",
                {{"index_total_size", static_cast<unsigned long long>(*c.layout_.index_total_size)},
                 {"tensor_bytes", static_cast<unsigned long long>(c.tensor_bytes_)}});
    }
  }
  return c;
}

const Checkpoint::Entry* Checkpoint::find(std::string_view tensor) const {
  auto it = entries_.find(tensor);
  return it == entries_.end() ? nullptr : &it->second;
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

}  // namespace infergate::runtime::model
