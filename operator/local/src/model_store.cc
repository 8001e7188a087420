// LocalModelStore: InferenceModels from YAML files, status in files, API-server-like versions.
#include "infergate/operator/local/model_store.h"

#include <algorithm>
#include <random>
#include <set>

#include "infergate/common/fs.h"
#include "infergate/common/log.h"
#include "infergate/operator/api/inference_model.h"
#include "infergate/operator/api/names.h"
#include "infergate/operator/api/yaml.h"

namespace infergate::op::local {
namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxManifest = 4u << 20;

std::string new_uid() {
  std::random_device rd;
  std::mt19937_64 g((static_cast<uint64_t>(rd()) << 32) ^ rd());
  char buf[40];
  uint64_t a = g(), b = g();
  std::snprintf(buf, sizeof buf, "%08x-%04x-4%03x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xfff),
                static_cast<unsigned>(0x8000 | ((b >> 48) & 0x3fff)),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buf;
}

std::string key_of(const std::string& ns, const std::string& name) { return ns + "/" + name; }

}  // namespace

LocalModelStore::LocalModelStore(fs::path manifests_dir, fs::path state_dir, Clock& clock)
    : manifests_dir_(std::move(manifests_dir)), state_dir_(std::move(state_dir)), clock_(clock) {}

fs::path LocalModelStore::status_file(const std::string& key) const {
  std::string n = key;
  std::replace(n.begin(), n.end(), '/', '_');
  // namespaces and names are DNS labels (no '_'), so "ns_name" is unambiguous
  return state_dir_ / "status" / (n + ".yaml");
}

Json LocalModelStore::object(const std::string& key, const Model& m) const {
  auto slash = key.find('/');
  Json meta = {{"name", key.substr(slash + 1)},
               {"namespace", key.substr(0, slash)},
               {"uid", m.uid},
               {"generation", m.generation},
               {"resourceVersion", std::to_string(m.resource_version)},
               {"creationTimestamp", m.created}};
  if (!m.labels.empty()) meta["labels"] = m.labels;
  if (!m.annotations.empty()) meta["annotations"] = m.annotations;
  if (!m.file.empty()) {
    meta["annotations"]["serving.infergate.dev/source"] = (manifests_dir_ / m.file).string();
  }
  return {{"apiVersion", std::string(api::kApiVersion)},
          {"kind", std::string(api::kKind)},
          {"metadata", meta},
          {"spec", m.spec},
          {"status", m.status}};
}

Status LocalModelStore::save(const std::string& key, const Model& m) const {
  std::error_code ec;
  fs::create_directories(state_dir_ / "status", ec);
  Json o = object(key, m);
  return write_file_atomic(status_file(key), api::to_yaml(o));
}

Status LocalModelStore::load_state() {
  std::lock_guard lock(mu_);
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& de : fs::directory_iterator(state_dir_ / "status", ec)) {
    if (de.path().extension() == ".yaml") files.push_back(de.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    auto text = read_file(path, kMaxManifest);
    if (!text.ok()) return std::move(text).error().context("reading saved status");
    auto o = api::parse_yaml(*text, path.string());
    if (!o.ok()) return std::move(o).error().context("reading saved status");
    auto meta = api::parse_object_meta(*o);
    if (!meta.ok()) return std::move(meta).error().context("reading saved status " + path.string());
    Model m;
    m.spec = o->value("spec", Json::object());
    m.status = o->value("status", Json::object());
    m.uid = meta->uid.empty() ? new_uid() : meta->uid;
    m.generation = std::max<int64_t>(1, meta->generation);
    m.created = (*o)["metadata"].value("creationTimestamp", format_rfc3339(clock_.wall_now()));
    m.resource_version = next_version_++;
    m.present = false;
    models_[key_of(meta->namespace_.empty() ? "default" : meta->namespace_, meta->name)] = std::move(m);
  }
  return ok_status();
}

std::vector<std::string> LocalModelStore::scan() {
  std::lock_guard lock(mu_);
  std::set<std::string> changed;
  std::error_code ec;
  std::vector<std::string> files;
  for (const auto& de : fs::directory_iterator(manifests_dir_, ec)) {
    const std::string ext = de.path().extension().string();
    const std::string name = de.path().filename().string();
    if (name.empty() || name[0] == '.') continue;  // editors' swap files, hidden files
    if (ext != ".yaml" && ext != ".yml" && ext != ".json") continue;
    if (!de.is_regular_file(ec)) continue;
    files.push_back(name);
  }
  std::sort(files.begin(), files.end());
  const std::set<std::string> now(files.begin(), files.end());

  auto drop_models_of = [&](const std::string& file, const std::set<std::string>& keep) {
    for (auto& [key, m] : models_) {
      if (m.file == file && m.present && !keep.count(key)) {
        m.present = false;
        m.file.clear();
        ++m.resource_version;
        changed.insert(key);
        log::info("InferenceModel removed", {{"model", key}, {"file", file}});
      }
    }
  };

  // Files that went away take their models with them.
  for (auto it = file_hashes_.begin(); it != file_hashes_.end();) {
    if (now.count(it->first)) {
      ++it;
      continue;
    }
    drop_models_of(it->first, {});
    errors_.erase(it->first);
    it = file_hashes_.erase(it);
  }

  for (const auto& file : files) {
    auto text = read_file(manifests_dir_ / file, kMaxManifest);
    if (!text.ok()) {
      FileError fe{file, text.error().message(), "ReadError"};
      if (!errors_.count(file) || errors_[file].message != fe.message)
        log::error("cannot read a manifest", {{"file", file}, {"error", fe.message}});
      errors_[file] = fe;
      continue;
    }
    const std::string hash = api::short_hash(*text, 16);
    if (file_hashes_.count(file) && file_hashes_[file] == hash) continue;
    file_hashes_[file] = hash;
    errors_.erase(file);

    auto docs = api::parse_yaml_documents(*text, file);
    if (!docs.ok()) {
      errors_[file] = FileError{file, docs.error().message(), "YamlError"};
      log::error("manifest refused: not YAML", {{"file", file}, {"error", docs.error().message()}});
      continue;  // what it held before stays
    }
    std::set<std::string> in_file;
    std::vector<std::string> problems;
    std::string first_reason;
    for (size_t i = 0; i < docs->size(); ++i) {
      Json doc = (*docs)[i];
      const std::string where = docs->size() > 1 ? "document " + std::to_string(i + 1) + ": " : "";
      if (!doc.is_object()) {
        problems.push_back(where + "not a YAML mapping");
        if (first_reason.empty()) first_reason = "InvalidObject";
        continue;
      }
      if (doc.contains("metadata") && doc["metadata"].is_object() && !doc["metadata"].contains("namespace")) {
        doc["metadata"]["namespace"] = "default";
      }
      auto parsed = api::parse_inference_model(doc);
      if (!parsed.ok()) {
        problems.push_back(where + parsed.error().message());
        if (first_reason.empty())
          first_reason = parsed.error().reason().empty() ? "InvalidSpec" : parsed.error().reason();
        continue;
      }
      const std::string key = parsed->key();
      Model& m = models_[key];
      if (m.present && m.file != file) {
        problems.push_back(where + "InferenceModel " + key + " is already defined in " + m.file);
        if (first_reason.empty()) first_reason = "DuplicateModel";
        continue;
      }
      in_file.insert(key);
      const Json spec = doc.value("spec", Json::object());
      const Json labels = doc["metadata"].value("labels", Json::object());
      const Json annotations = doc["metadata"].value("annotations", Json::object());
      const bool fresh = m.uid.empty();
      if (fresh) {
        m.uid = new_uid();
        m.created = format_rfc3339(clock_.wall_now());
        m.generation = 1;
      } else if (m.spec != spec) {
        ++m.generation;
      }
      if (fresh || !m.present || m.spec != spec || m.labels != labels || m.annotations != annotations) {
        const bool spec_changed = !fresh && m.spec != spec;
        m.spec = spec;
        m.labels = labels;
        m.annotations = annotations;
        m.file = file;
        m.present = true;
        m.resource_version = next_version_++;
        changed.insert(key);
        log::info(fresh          ? "InferenceModel created"
                  : spec_changed ? "InferenceModel changed"
                                 : "InferenceModel updated",
                  {{"model", key}, {"file", file}, {"generation", static_cast<long long>(m.generation)}});
        if (Status st = save(key, m); !st.ok()) {
          log::warn("cannot write a status file", {{"model", key}, {"error", st.error().to_string()}});
        }
      }
    }
    if (!problems.empty()) {
      std::string msg;
      for (const auto& p : problems) msg += (msg.empty() ? "" : "; ") + p;
      errors_[file] = FileError{file, msg, first_reason};
      log::error("manifest refused", {{"file", file}, {"reason", first_reason}, {"error", msg}});
      // Models this file held before and that no longer validate stay as they were.
      std::set<std::string> keep = in_file;
      for (const auto& [key, m] : models_) {
        if (m.file == file) keep.insert(key);
      }
      drop_models_of(file, keep);
    } else {
      drop_models_of(file, in_file);
    }
  }
  // Entries created for a duplicate and never filled.
  for (auto it = models_.begin(); it != models_.end();) {
    if (it->second.uid.empty()) {
      it = models_.erase(it);
    } else {
      ++it;
    }
  }
  return {changed.begin(), changed.end()};
}

std::vector<FileError> LocalModelStore::errors() const {
  std::lock_guard lock(mu_);
  std::vector<FileError> out;
  for (const auto& [f, e] : errors_) out.push_back(e);
  return out;
}

std::vector<std::string> LocalModelStore::keys() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [k, m] : models_) out.push_back(k);
  return out;
}

void LocalModelStore::forget(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = models_.find(key);
  if (it == models_.end() || it->second.present) return;
  std::error_code ec;
  fs::remove(status_file(key), ec);
  models_.erase(it);
}

Result<std::optional<Json>> LocalModelStore::get(const std::string& ns, const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = models_.find(key_of(ns, name));
  if (it == models_.end() || !it->second.present) return std::optional<Json>();
  return std::optional<Json>(object(it->first, it->second));
}

Result<std::optional<Json>> LocalModelStore::get_fresh(const std::string& ns, const std::string& name) {
  return get(ns, name);
}

Result<Json> LocalModelStore::write_status(const Json& base, const Json& status) {
  auto meta = api::parse_object_meta(base);
  if (!meta.ok()) return std::move(meta).error().context("writing status");
  std::lock_guard lock(mu_);
  const std::string key = key_of(meta->namespace_.empty() ? "default" : meta->namespace_, meta->name);
  auto it = models_.find(key);
  if (it == models_.end() || !it->second.present)
    return not_found("InferenceModel " + key + " does not exist");
  Model& m = it->second;
  if (meta->resource_version != std::to_string(m.resource_version)) {
    return Error(ErrorCode::kConflict,
                 "InferenceModel " + key + " changed since it was read (resourceVersion " +
                     meta->resource_version + ", now " + std::to_string(m.resource_version) + ")");
  }
  m.status = status;
  m.resource_version = next_version_++;
  INFERGATE_RETURN_IF_ERROR(save(key, m));
  return object(key, m);
}

}  // namespace infergate::op::local
