// The local platform's source of InferenceModels: a directory of YAML files, each holding one or more
// InferenceModel documents, validated exactly as the operator validates objects from the API server
// (api::parse_inference_model: the CRD's enums, defaults, required fields and cross-field rules), and
// a status file per model under <state>/status/, which is where the reconciler's status writes go.
//
// Semantics, as close to an API server as a directory allows:
//  - metadata.namespace defaults to "default"; a uid is minted on first sight and kept in the status
//    file; metadata.generation moves when the spec changes (also across restarts, from the status file);
//  - resourceVersion moves on every change and every status write; a write against a stale base is a
//    Conflict, exactly like an update to the status subresource;
//  - a file that does not parse or validate gets a clear error naming the file (and the field path);
//    the models it held before stay as they were (a failed `kubectl apply` changes nothing), and every
//    other file keeps working; the same model name in two files is an error for the later file;
//  - a model whose file is removed is deleted (its status file too, once the reconciler has cleaned up).
// Thread-safe.
#pragma once

#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "infergate/common/clock.h"
#include "infergate/common/json.h"
#include "infergate/operator/platform/platform.h"

namespace infergate::op::local {

struct FileError {
  std::string file;     // relative to the manifests directory
  std::string message;  // "spec.serving.kvCacheDtype: \"int3\" is not one of fp16, bf16, ..."
  std::string reason;   // InvalidSpec, YamlError, DuplicateModel, ...
};

class LocalModelStore final : public platform::ModelStore {
 public:
  LocalModelStore(std::filesystem::path manifests_dir, std::filesystem::path state_dir,
                  Clock& clock = SystemClock::instance());

  // Loads the status files of an earlier run (uids, generations, status). Call once, before scan().
  Status load_state();
  // Reads the directory; returns the keys ("ns/name") of models added, changed or removed since the
  // last scan. File errors are logged when they first appear and kept for errors().
  std::vector<std::string> scan();
  std::vector<FileError> errors() const;
  std::vector<std::string> keys() const;
  // Forgets a deleted model's status file (after the reconciler cleaned up what it owned).
  void forget(const std::string& key);

  // ModelStore.
  Result<std::optional<Json>> get(const std::string& namespace_, const std::string& name) override;
  Result<std::optional<Json>> get_fresh(const std::string& namespace_, const std::string& name) override;
  Result<Json> write_status(const Json& base, const Json& status) override;

  // Where a model's status file is.
  std::filesystem::path status_file(const std::string& key) const;

 private:
  struct Model {
    std::string file;  // where it came from ("" for one known only from an earlier run's status)
    Json spec;
    Json labels = Json::object();
    Json annotations = Json::object();
    std::string uid;
    int64_t generation = 1;
    std::string created;  // RFC 3339
    Json status = Json::object();
    uint64_t resource_version = 1;
    bool present = false;  // in a manifest now
  };
  Json object(const std::string& key, const Model& m) const;
  Status save(const std::string& key, const Model& m) const;

  std::filesystem::path manifests_dir_, state_dir_;
  Clock& clock_;
  mutable std::mutex mu_;
  std::map<std::string, Model> models_;
  std::map<std::string, std::string> file_hashes_;  // file -> content hash of what was last read
  std::map<std::string, FileError> errors_;         // by file
  uint64_t next_version_ = 1;
};

}  // namespace infergate::op::local
