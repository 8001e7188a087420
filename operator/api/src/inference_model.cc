// Parsing, defaulting and validation of InferenceModel objects; status to and from JSON.
#include "infergate/operator/api/inference_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
#include <set>

#include "infergate/operator/api/pod_template.h"

namespace infergate::op::api {
namespace {

// Collects field errors while reading a JSON object, so that one pass reports every problem.
class Reader {
 public:
  explicit Reader(std::vector<FieldError>* errors) : errors_(errors) {}

  void fail(std::string path, std::string message, std::string reason = "InvalidSpec") {
    errors_->push_back({std::move(path), std::move(message), std::move(reason)});
  }

  // obj[key] if present and not null, else nullptr. Reports a type error when obj is not an object.
  const Json* field(const Json& obj, std::string_view key) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(std::string(key));
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }

  const Json* object(const Json& obj, std::string_view key, const std::string& path, bool required) {
    const Json* v = field(obj, key);
    std::string p = json_path(path, key);
    if (!v) {
      if (required) fail(p, "required field is missing");
      return nullptr;
    }
    if (!v->is_object()) {
      fail(p, "expected an object");
      return nullptr;
    }
    return v;
  }

  bool string(const Json& obj, std::string_view key, const std::string& path, std::string* out, bool required,
              size_t max_len = 4096) {
    const Json* v = field(obj, key);
    std::string p = json_path(path, key);
    if (!v) {
      if (required) fail(p, "required field is missing");
      return false;
    }
    if (!v->is_string()) {
      fail(p, "expected a string");
      return false;
    }
    const auto& s = v->get_ref<const std::string&>();
    if (required && s.empty()) {
      fail(p, "must not be empty");
      return false;
    }
    if (s.size() > max_len) {
      fail(p, "longer than " + std::to_string(max_len) + " characters");
      return false;
    }
    *out = s;
    return true;
  }

  bool integer(const Json& obj, std::string_view key, const std::string& path, int64_t* out, bool required,
               int64_t min, int64_t max) {
    const Json* v = field(obj, key);
    std::string p = json_path(path, key);
    if (!v) {
      if (required) fail(p, "required field is missing");
      return false;
    }
    int64_t n = 0;
    if (v->is_number_integer()) {
      n = v->get<int64_t>();
    } else if (v->is_number_unsigned()) {
      uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(p, "out of range");
        return false;
      }
      n = static_cast<int64_t>(u);
    } else if (v->is_number_float() && std::trunc(v->get<double>()) == v->get<double>() &&
               std::abs(v->get<double>()) < 9e15) {
      n = static_cast<int64_t>(v->get<double>());
    } else {
      fail(p, "expected an integer");
      return false;
    }
    if (n < min || n > max) {
      fail(p, "must be between " + std::to_string(min) + " and " + std::to_string(max) + " (got " +
                  std::to_string(n) + ")");
      return false;
    }
    *out = n;
    return true;
  }

  bool number(const Json& obj, std::string_view key, const std::string& path, std::optional<double>* out,
              double min, double max) {
    const Json* v = field(obj, key);
    std::string p = json_path(path, key);
    if (!v) return false;
    if (!v->is_number()) {
      fail(p, "expected a number");
      return false;
    }
    double d = v->get<double>();
    if (!std::isfinite(d) || d < min || d > max) {
      fail(p, "must be between " + json_number_text(min) + " and " + json_number_text(max));
      return false;
    }
    *out = d;
    return true;
  }

  bool boolean(const Json& obj, std::string_view key, const std::string& path, bool* out) {
    const Json* v = field(obj, key);
    if (!v) return false;
    if (!v->is_boolean()) {
      fail(json_path(path, key), "expected true or false");
      return false;
    }
    *out = v->get<bool>();
    return true;
  }

  bool string_list(const Json& obj, std::string_view key, const std::string& path,
                   std::vector<std::string>* out, size_t max_items) {
    const Json* v = field(obj, key);
    std::string p = json_path(path, key);
    if (!v) return false;
    if (!v->is_array()) {
      fail(p, "expected a list of strings");
      return false;
    }
    if (v->size() > max_items) {
      fail(p, "more than " + std::to_string(max_items) + " items");
      return false;
    }
    out->clear();
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) {
        fail(p + "[" + std::to_string(i) + "]", "expected a string");
        return false;
      }
      out->push_back((*v)[i].get<std::string>());
    }
    return true;
  }

  bool string_map(const Json& obj, std::string_view key, const std::string& path,
                  std::map<std::string, std::string>* out) {
    const Json* v = field(obj, key);
    std::string p = json_path(path, key);
    if (!v) return false;
    if (!v->is_object()) {
      fail(p, "expected a map of strings");
      return false;
    }
    out->clear();
    for (const auto& [k, val] : v->items()) {
      if (val.is_string()) {
        (*out)[k] = val.get<std::string>();
      } else if (val.is_number_integer() || val.is_number_unsigned()) {
        (*out)[k] = val.dump();  // quantities may be written as bare integers ("nvidia.com/gpu": 1)
      } else {
        fail(json_path(p, k), "expected a string");
        return false;
      }
    }
    return true;
  }

  static std::string json_number_text(double d) {
    Json j = d;
    return j.dump();
  }

 private:
  std::vector<FieldError>* errors_;
};

// "spec.x: unknown value ..." -> "unknown value ...": the Reader adds the path itself.
std::string without_path(const std::string& message) {
  auto pos = message.find(": ");
  return pos == std::string::npos ? message : message.substr(pos + 2);
}

bool is_dns1035_label(const std::string& s, size_t max_len) {
  static const std::regex re("^[a-z]([-a-z0-9]*[a-z0-9])?$");
  return !s.empty() && s.size() <= max_len && std::regex_match(s, re);
}

bool is_dns1123_subdomain(const std::string& s) {
  static const std::regex re("^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$");
  return !s.empty() && s.size() <= 253 && std::regex_match(s, re);
}

// A canonical relative path: segments of [A-Za-z0-9._-], no "." or ".." segment, no empty segment.
bool is_canonical_relative_path(const std::string& s) {
  if (s.empty() || s.size() > 1024 || s.front() == '/' || s.back() == '/') return false;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find('/', start);
    if (end == std::string::npos) end = s.size();
    std::string seg = s.substr(start, end - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    for (char c : seg) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                c == '_' || c == '-';
      if (!ok) return false;
    }
    start = end + 1;
  }
  return true;
}

// A Kubernetes quantity as written by users: digits, optional fraction, optional suffix.
bool is_quantity(const std::string& s) {
  static const std::regex re("^[0-9]+(\\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e[0-9]+)?$");
  return !s.empty() && s.size() <= 64 && std::regex_match(s, re);
}

void read_resources(Reader& r, const Json& spec, Resources* out) {
  const Json* res = r.object(spec, "resources", "spec", false);
  if (!res) return;
  for (const char* which : {"requests", "limits"}) {
    std::map<std::string, std::string> m;
    std::string path = json_path("spec.resources", which);
    if (r.string_map(*res, which, "spec.resources", &m)) {
      for (const auto& [k, v] : m) {
        if (!is_quantity(v)) r.fail(json_path(path, k), "not a quantity: \"" + v.substr(0, 64) + "\"");
      }
      (std::string_view(which) == "requests" ? out->requests : out->limits) = m;
    }
  }
  // MIG slices: one per pod (a CUDA process sees a single MIG device), and not mixed with whole GPUs.
  bool whole = false;
  std::set<std::string> slices;
  for (const auto* m : {&out->requests, &out->limits}) {
    for (const auto& [k, v] : *m) {
      if (v == "0") continue;
      if (k.rfind("nvidia.com/mig-", 0) == 0) {
        slices.insert(k);
        if (v != "1")
          r.fail(
              json_path(m == &out->limits ? "spec.resources.limits" : "spec.resources.requests", k),
              "one MIG slice per pod: a CUDA process uses a single MIG device, so slices cannot be joined by "
              "tensor parallelism (use a larger profile, or whole GPUs)");
      } else if (k.size() > 4 && k.compare(k.size() - 4, 4, "/gpu") == 0) {
        whole = true;
      }
    }
  }
  if (slices.size() > 1 || (whole && !slices.empty()))
    r.fail("spec.resources", "ask for one kind of GPU: a MIG slice or whole GPUs, not both");
}

// spec.artifact.trust.formats and .identities, and the rules that tie them to the other trust fields.
void read_trust_formats(Reader& r, const Json& trust, const std::string& tp, TrustSpec* out) {
  if (r.string_list(trust, "formats", tp, &out->formats, 2)) {
    for (size_t i = 0; i < out->formats.size(); ++i) {
      const std::string& f = out->formats[i];
      if (f != "infergate" && f != "oms")
        r.fail(tp + ".formats[" + std::to_string(i) + "]", "must be infergate or oms");
      if (std::count(out->formats.begin(), out->formats.end(), f) > 1)
        r.fail(tp + ".formats", "lists " + f + " twice");
    }
  }
  if (const Json* ids = r.field(trust, "identities")) {
    if (!ids->is_array() || ids->size() > 16) {
      r.fail(tp + ".identities", "expected a list of at most 16 identities");
    } else {
      for (size_t i = 0; i < ids->size(); ++i) {
        std::string ip = tp + ".identities[" + std::to_string(i) + "]";
        if (!(*ids)[i].is_object()) {
          r.fail(ip, "expected an object");
          continue;
        }
        TrustIdentity id;
        bool ok = r.string((*ids)[i], "subject", ip, &id.subject, true, 1024);
        ok = r.string((*ids)[i], "issuer", ip, &id.issuer, true, 1024) && ok;
        if (ok) out->identities.push_back(std::move(id));
      }
    }
  }
  if (!out->identities.empty() && !out->allows("oms")) {
    r.fail(tp + ".identities", "identities name keyless OMS signers: add oms to formats");
  }
  if (out->min_version && !out->allows("infergate")) {
    r.fail(tp + ".minVersion",
           "only the infergate release statement carries a version: add infergate to formats");
  }
}

void read_artifact(Reader& r, const Json& spec, ArtifactSpec* out) {
  const Json* art = r.object(spec, "artifact", "spec", true);
  if (!art) return;
  const std::string p = "spec.artifact";
  if (r.string(*art, "path", p, &out->path, true) && !is_canonical_relative_path(out->path)) {
    r.fail(p + ".path", "must be a canonical relative path (no leading '/', no '.' or '..' segments)");
  }
  if (const Json* vol = r.object(*art, "volume", p, true)) {
    const Json* pvc = r.object(*vol, "persistentVolumeClaim", p + ".volume", false);
    const Json* nfs = r.object(*vol, "nfs", p + ".volume", false);
    if ((pvc != nullptr) == (nfs != nullptr)) {
      r.fail(p + ".volume", "exactly one of persistentVolumeClaim or nfs must be set");
    } else if (pvc) {
      out->volume.kind = VolumeSource::Kind::kPersistentVolumeClaim;
      if (r.string(*pvc, "claimName", p + ".volume.persistentVolumeClaim", &out->volume.claim_name, true) &&
          !is_dns1123_subdomain(out->volume.claim_name)) {
        r.fail(p + ".volume.persistentVolumeClaim.claimName", "not a valid object name");
      }
    } else {
      out->volume.kind = VolumeSource::Kind::kNfs;
      r.string(*nfs, "server", p + ".volume.nfs", &out->volume.nfs_server, true, 253);
      if (r.string(*nfs, "path", p + ".volume.nfs", &out->volume.nfs_path, true) &&
          out->volume.nfs_path.front() != '/') {
        r.fail(p + ".volume.nfs.path", "must be absolute");
      }
    }
  }
  if (const Json* trust = r.object(*art, "trust", p, true)) {
    const std::string tp = p + ".trust";
    if (const Json* ref = r.object(*trust, "publicKeySecretRef", tp, true)) {
      if (r.string(*ref, "name", tp + ".publicKeySecretRef", &out->trust.public_key_secret, true) &&
          !is_dns1123_subdomain(out->trust.public_key_secret)) {
        r.fail(tp + ".publicKeySecretRef.name", "not a valid Secret name");
      }
    }
    r.string(*trust, "expectName", tp, &out->trust.expect_name, false, 253);
    int64_t v = 0;
    if (r.integer(*trust, "minVersion", tp, &v, false, 0, std::numeric_limits<int64_t>::max())) {
      out->trust.min_version = v;
    }
    read_trust_formats(r, *trust, tp, &out->trust);
  }
}

void read_engine(Reader& r, const Json& spec, EngineSpec* out) {
  const Json* eng = r.object(spec, "engine", "spec", false);
  if (!eng) return;
  const std::string p = "spec.engine";
  std::string kind;
  if (r.string(*eng, "kind", p, &kind, false)) {
    auto k = parse_engine_kind(kind, p + ".kind");
    if (k.ok()) {
      out->kind = *k;
    } else {
      r.fail(p + ".kind", without_path(k.error().message()));
    }
  }
  r.string(*eng, "image", p, &out->image, false, 1024);
  r.string_list(*eng, "args", p, &out->args, 256);
  r.string(*eng, "quantization", p, &out->quantization, false, 64);
  if (r.string(*eng, "modelFile", p, &out->model_file, false, 1024) &&
      !is_canonical_relative_path(out->model_file)) {
    r.fail(p + ".modelFile", "must be a canonical relative path inside the artifact directory");
  }
}

void read_serving(Reader& r, const Json& spec, ServingConfig* out) {
  const Json* s = r.object(spec, "serving", "spec", true);
  if (!s) return;
  const std::string p = "spec.serving";
  std::string text;
  if (r.string(*s, "weightFormat", p, &text, true)) {
    auto v = parse_weight_format(text, p + ".weightFormat");
    if (v.ok()) {
      out->weight_format = *v;
    } else {
      r.fail(p + ".weightFormat", without_path(v.error().message()));
    }
  }
  text.clear();
  if (r.string(*s, "kvCacheDtype", p, &text, false)) {
    auto v = parse_kv_cache_dtype(text, p + ".kvCacheDtype");
    if (v.ok()) {
      out->kv_cache_dtype = *v;
    } else {
      r.fail(p + ".kvCacheDtype", without_path(v.error().message()));
    }
  }
  r.integer(*s, "maxContextLength", p, &out->max_context_length, true, 1, 16 * 1024 * 1024);
  r.integer(*s, "maxConcurrency", p, &out->max_concurrency, false, 1, 4096);
}

void read_rollout(Reader& r, const Json& spec, RolloutSpec* out) {
  const Json* ro = r.object(spec, "rollout", "spec", false);
  if (!ro) return;
  const std::string p = "spec.rollout";
  std::vector<std::string> order;
  if (r.string_list(*ro, "stageOrder", p, &order, 8)) {
    std::vector<StageName> stages;
    std::set<std::string> seen;
    for (size_t i = 0; i < order.size(); ++i) {
      std::string ip = p + ".stageOrder[" + std::to_string(i) + "]";
      auto st = parse_stage_name(order[i], ip);
      if (!st.ok()) {
        r.fail(ip, without_path(st.error().message()));
        continue;
      }
      if (!seen.insert(order[i]).second) {
        r.fail(ip, "\"" + order[i] + "\" is listed twice");
        continue;
      }
      stages.push_back(*st);
    }
    out->stage_order = stages;
  }
  if (const Json* c = r.object(*ro, "canary", p, false)) {
    int64_t n = 0;
    if (r.integer(*c, "replicas", p + ".canary", &n, false, 1, 1000))
      out->canary.replicas = static_cast<int32_t>(n);
    r.integer(*c, "analysisSeconds", p + ".canary", &out->canary.analysis_seconds, false, 0, 7 * 86400);
    r.boolean(*c, "surge", p + ".canary", &out->canary.surge);
    r.integer(*c, "progressDeadlineSeconds", p + ".canary", &out->canary.progress_deadline_seconds, false, 1,
              7 * 86400);
  }
  if (const Json* g = r.object(*ro, "gates", p, false)) {
    if (const Json* q = r.object(*g, "quality", p + ".gates", false)) {
      const std::string qp = p + ".gates.quality";
      r.string(*q, "suite", qp, &out->quality.suite, false, 253);
      r.number(*q, "minTop1Agreement", qp, &out->quality.min_top1_agreement, 0, 1);
      r.number(*q, "maxMeanKL", qp, &out->quality.max_mean_kl, 0, 1e6);
      r.number(*q, "maxPerplexityIncrease", qp, &out->quality.max_perplexity_increase, 0, 1e6);
      r.number(*q, "minRetrievalAccuracy", qp, &out->quality.min_retrieval_accuracy, 0, 1);
      r.number(*q, "minFormatFollowing", qp, &out->quality.min_format_following, 0, 1);
      r.integer(*q, "timeoutSeconds", qp, &out->quality.timeout_seconds, false, 1, 86400);
    }
    if (const Json* perf = r.object(*g, "performance", p + ".gates", false)) {
      const std::string pp = p + ".gates.performance";
      r.number(*perf, "maxTTFTP95Ratio", pp, &out->performance.max_ttft_p95_ratio, 0, 1e6);
      r.number(*perf, "maxTPOTP95Ratio", pp, &out->performance.max_tpot_p95_ratio, 0, 1e6);
      r.number(*perf, "maxErrorRate", pp, &out->performance.max_error_rate, 0, 1);
    }
  }
  if (const Json* a = r.object(*ro, "analysis", p, false)) {
    if (r.string(*a, "prometheusURL", p + ".analysis", &out->prometheus_url, false, 2048) &&
        out->prometheus_url.rfind("http://", 0) != 0 && out->prometheus_url.rfind("https://", 0) != 0) {
      r.fail(p + ".analysis.prometheusURL", "must be an http:// or https:// URL");
    }
  }
  r.boolean(*ro, "autoRollback", p, &out->auto_rollback);
}

void read_scheduling(Reader& r, const Json& spec, SchedulingSpec* out) {
  if (const Json* t = r.object(spec, "podTemplate", "spec", false)) {
    for (auto& e : parse_pod_template(*t, out))
      r.fail(std::move(e.path), std::move(e.message), std::move(e.reason));
  }
  const Json* s = r.object(spec, "scheduling", "spec", false);
  if (!s) return;
  // The older spelling of three podTemplate fields: either place, never both.
  for (const char* k : {"nodeSelector", "tolerations", "runtimeClassName"}) {
    if (s->contains(k) && r.field(spec, "podTemplate") && spec["podTemplate"].contains(k))
      r.fail("spec.scheduling." + std::string(k), "also set in spec.podTemplate: set it in one place");
  }
  const std::string p = "spec.scheduling";
  r.string_map(*s, "nodeSelector", p, &out->node_selector);
  if (const Json* t = r.field(*s, "tolerations")) {
    const std::vector<FieldError> errors = check_tolerations(*t, p + ".tolerations");
    for (const auto& e : errors) r.fail(e.path, e.message, e.reason);
    if (errors.empty()) out->tolerations = *t;
  }
  r.string(*s, "runtimeClassName", p, &out->runtime_class_name, false, 253);
}

// A memory size as the planner reads it (141GB, 80GiB) or as a Kubernetes quantity (80Gi, 141G).
bool is_memory_size(const std::string& s) {
  static const std::regex re("^[0-9]+(\\.[0-9]+)?([kKMGTP]i?B?|B)?$");
  return !s.empty() && s.size() <= 32 && std::regex_match(s, re);
}

// The model's config.json may be large for mixture-of-experts models, but not unbounded.
constexpr size_t kMaxModelConfigBytes = 256 * 1024;

void read_capacity_planning(Reader& r, const Json& spec, CapacityPlanningSpec* out) {
  const Json* c = r.object(spec, "capacityPlanning", "spec", false);
  if (!c) return;
  const std::string p = "spec.capacityPlanning";
  r.string(*c, "gpu", p, &out->gpu, false, 64);
  if (r.string(*c, "gpuMemory", p, &out->gpu_memory, false, 32) && !is_memory_size(out->gpu_memory)) {
    r.fail(p + ".gpuMemory",
           "not a memory size: \"" + out->gpu_memory + "\" (e.g. 141GB, 80GiB, 80Gi: usable memory per GPU)");
  }
  if (!out->gpu.empty() && !out->gpu_memory.empty()) {
    r.fail(p + ".gpu", "give gpu or gpuMemory, not both");
  }
  if (const Json* m = r.object(*c, "modelConfig", p, false)) {
    if (m->dump().size() > kMaxModelConfigBytes) {
      r.fail(p + ".modelConfig", "larger than " + std::to_string(kMaxModelConfigBytes / 1024) + " KiB");
    } else {
      out->model_config = *m;
    }
  }
}

std::string join_errors(const std::vector<FieldError>& errors) {
  std::string msg;
  for (const auto& e : errors) {
    if (!msg.empty()) msg += "; ";
    msg += e.path + ": " + e.message;
  }
  return msg;
}

Json time_json(WallTime t) { return format_rfc3339(t); }

WallTime parse_time_or(const Json& obj, std::string_view key) {
  auto it = obj.find(std::string(key));
  if (it == obj.end() || !it->is_string()) return WallTime{};
  auto t = parse_rfc3339(it->get<std::string>());
  return t.ok() ? *t : WallTime{};
}

Json release_to_json(const ReleaseConfig& r) {
  Json j = {{"weightFormat", to_string(r.serving.weight_format)},
            {"kvCacheDtype", to_string(r.serving.kv_cache_dtype)},
            {"maxContextLength", r.serving.max_context_length},
            {"maxConcurrency", r.serving.max_concurrency},
            {"engine", to_string(r.engine)},
            {"artifactPath", r.artifact_path},
            {"revision", r.revision},
            {"summary", r.summary}};
  if (!r.release_digest.empty()) j["releaseDigest"] = r.release_digest;
  if (r.release_version) j["releaseVersion"] = *r.release_version;
  if (r.pod_config.is_object()) j["podConfig"] = r.pod_config;
  return j;
}

Result<ReleaseConfig> release_from_json(const Json& j, std::string_view path) {
  if (!j.is_object()) return invalid_argument(std::string(path) + ": expected an object");
  ReleaseConfig r;
  std::string p(path);
  INFERGATE_ASSIGN_OR_RETURN(std::string wf, json_string(j, "weightFormat", p));
  INFERGATE_ASSIGN_OR_RETURN(r.serving.weight_format, parse_weight_format(wf, json_path(p, "weightFormat")));
  INFERGATE_ASSIGN_OR_RETURN(std::string kv, json_string(j, "kvCacheDtype", p));
  INFERGATE_ASSIGN_OR_RETURN(r.serving.kv_cache_dtype,
                             parse_kv_cache_dtype(kv, json_path(p, "kvCacheDtype")));
  INFERGATE_ASSIGN_OR_RETURN(r.serving.max_context_length, json_int(j, "maxContextLength", p));
  INFERGATE_ASSIGN_OR_RETURN(r.serving.max_concurrency, json_int(j, "maxConcurrency", p));
  INFERGATE_ASSIGN_OR_RETURN(std::string eng, json_string_or(j, "engine", "bundled", p));
  INFERGATE_ASSIGN_OR_RETURN(r.engine, parse_engine_kind(eng, json_path(p, "engine")));
  INFERGATE_ASSIGN_OR_RETURN(r.artifact_path, json_string_or(j, "artifactPath", "", p));
  INFERGATE_ASSIGN_OR_RETURN(r.release_digest, json_string_or(j, "releaseDigest", "", p));
  if (j.contains("releaseVersion")) {
    INFERGATE_ASSIGN_OR_RETURN(int64_t v, json_int(j, "releaseVersion", p));
    r.release_version = v;
  }
  INFERGATE_ASSIGN_OR_RETURN(r.revision, json_string_or(j, "revision", "", p));
  INFERGATE_ASSIGN_OR_RETURN(r.summary, json_string_or(j, "summary", "", p));
  if (auto pc = j.find("podConfig"); pc != j.end() && pc->is_object()) r.pod_config = *pc;
  return r;
}

Json number_map_json(const std::map<std::string, double>& m) {
  Json j = Json::object();
  for (const auto& [k, v] : m) j[k] = v;
  return j;
}

std::map<std::string, double> number_map_from(const Json& obj, std::string_view key) {
  std::map<std::string, double> out;
  auto it = obj.find(std::string(key));
  if (it == obj.end() || !it->is_object()) return out;
  for (const auto& [k, v] : it->items()) {
    if (v.is_number()) out[k] = v.get<double>();
  }
  return out;
}

}  // namespace

namespace {

bool is_gpu_resource(const std::string& k) {
  return (k.size() > 4 && k.compare(k.size() - 4, 4, "/gpu") == 0) || k.rfind("nvidia.com/mig-", 0) == 0;
}

}  // namespace

int64_t Resources::gpus() const {
  int64_t best = 0;
  for (const auto* m : {&limits, &requests}) {
    for (const auto& [k, v] : *m) {
      if (is_gpu_resource(k)) {
        int64_t n = 0;
        for (char c : v) {
          if (c < '0' || c > '9') {
            n = 0;
            break;
          }
          n = n * 10 + (c - '0');
          if (n > 1'000'000) break;
        }
        best = std::max(best, n);
      }
    }
  }
  return best;
}

std::string Resources::gpu_resource_name() const {
  for (const auto* m : {&limits, &requests}) {
    for (const auto& [k, v] : *m) {
      if (is_gpu_resource(k) && v != "0") return k;
    }
  }
  return "";
}

bool Resources::mig() const { return gpu_resource_name().rfind("nvidia.com/mig-", 0) == 0; }

std::string InferenceModel::key() const {
  return meta.namespace_.empty() ? meta.name : meta.namespace_ + "/" + meta.name;
}

Result<ObjectMeta> parse_object_meta(const Json& obj) {
  if (!obj.is_object()) return invalid_argument("object: expected a JSON object");
  auto mit = obj.find("metadata");
  if (mit == obj.end() || !mit->is_object()) return invalid_argument("metadata: required object is missing");
  const Json& m = *mit;
  ObjectMeta meta;
  INFERGATE_ASSIGN_OR_RETURN(meta.name, json_string(m, "name", "metadata"));
  INFERGATE_ASSIGN_OR_RETURN(meta.namespace_, json_string_or(m, "namespace", "", "metadata"));
  INFERGATE_ASSIGN_OR_RETURN(meta.uid, json_string_or(m, "uid", "", "metadata"));
  INFERGATE_ASSIGN_OR_RETURN(meta.resource_version, json_string_or(m, "resourceVersion", "", "metadata"));
  INFERGATE_ASSIGN_OR_RETURN(meta.generation, json_int_or(m, "generation", 0, "metadata"));
  for (const char* key : {"labels", "annotations"}) {
    auto it = m.find(key);
    if (it == m.end() || it->is_null()) continue;
    if (!it->is_object()) return invalid_argument(std::string("metadata.") + key + ": expected a map");
    auto& out = std::string_view(key) == "labels" ? meta.labels : meta.annotations;
    for (const auto& [k, v] : it->items()) {
      if (!v.is_string())
        return invalid_argument(std::string("metadata.") + key + "." + k + ": expected a string");
      out[k] = v.get<std::string>();
    }
  }
  auto dt = m.find("deletionTimestamp");
  if (dt != m.end() && dt->is_string()) {
    INFERGATE_ASSIGN_OR_RETURN(WallTime t, parse_rfc3339(dt->get<std::string>()));
    meta.deletion_timestamp = t;
  }
  return meta;
}

std::vector<FieldError> validate_spec(const Json& spec, InferenceModelSpec* out) {
  std::vector<FieldError> errors;
  Reader r(&errors);
  InferenceModelSpec s;
  if (!spec.is_object()) {
    r.fail("spec", "required object is missing");
    return errors;
  }
  int64_t replicas = 1;
  if (r.integer(spec, "replicas", "spec", &replicas, false, 0, 10000))
    s.replicas = static_cast<int32_t>(replicas);
  read_artifact(r, spec, &s.artifact);
  read_engine(r, spec, &s.engine);
  read_serving(r, spec, &s.serving);
  read_resources(r, spec, &s.resources);
  read_rollout(r, spec, &s.rollout);
  read_scheduling(r, spec, &s.scheduling);
  read_capacity_planning(r, spec, &s.capacity_planning);
  if (!s.rollout.canary.surge && s.rollout.canary.replicas >= s.replicas && errors.empty()) {
    r.fail("spec.rollout.canary.replicas",
           "with canary.surge false the canary takes its pods from stable: canary.replicas must be less than "
           "replicas");
  }
  if (s.engine.kind != EngineKind::kBundled && s.engine.image.empty() && errors.empty()) {
    r.fail("spec.engine.image", "required for engine kind " + std::string(to_string(s.engine.kind)) +
                                    " (infergate ships no default image for third-party engines)");
  }
  if (out) *out = std::move(s);
  return errors;
}

Result<InferenceModel> parse_inference_model(const Json& obj) {
  if (!obj.is_object())
    return invalid_argument("InferenceModel: expected a JSON object").with_reason("InvalidSpec");
  auto av = obj.find("apiVersion");
  auto kind = obj.find("kind");
  if (av == obj.end() || !av->is_string() || av->get<std::string>() != kApiVersion) {
    return invalid_argument("apiVersion: want " + std::string(kApiVersion)).with_reason("InvalidSpec");
  }
  if (kind == obj.end() || !kind->is_string() || kind->get<std::string>() != kKind) {
    return invalid_argument("kind: want " + std::string(kKind)).with_reason("InvalidSpec");
  }
  auto meta = parse_object_meta(obj);
  if (!meta.ok()) return std::move(meta).error().with_reason("InvalidSpec");
  InferenceModel model;
  model.meta = std::move(*meta);
  if (!is_dns1035_label(model.meta.name, kMaxNameLength)) {
    return invalid_argument("metadata.name: \"" + model.meta.name.substr(0, 64) +
                            "\" must be a DNS-1035 label of at most " + std::to_string(kMaxNameLength) +
                            " characters (lower case letters, digits and '-', starting with a letter)")
        .with_reason("InvalidSpec");
  }
  auto sit = obj.find("spec");
  auto errors = validate_spec(sit == obj.end() ? Json() : *sit, &model.spec);
  if (!errors.empty()) {
    return invalid_argument(join_errors(errors)).with_reason(errors.front().reason);
  }
  auto st = obj.find("status");
  if (st != obj.end() && st->is_object()) {
    auto status = parse_status(*st);
    if (status.ok()) model.status = std::move(*status);
  }
  return model;
}

std::string summarize(const ServingConfig& s) {
  return std::string(to_string(s.weight_format)) + "/" + std::string(to_string(s.kv_cache_dtype)) +
         " ctx=" + std::to_string(s.max_context_length) + " x" + std::to_string(s.max_concurrency);
}

const Condition* find_condition(const std::vector<Condition>& conditions, std::string_view type) {
  for (const auto& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

Json status_to_json(const InferenceModelStatus& s) {
  Json j = Json::object();
  j["observedGeneration"] = s.observed_generation;
  j["replicas"] = s.replicas;
  j["readyReplicas"] = s.ready_replicas;
  if (!s.selector.empty()) j["selector"] = s.selector;
  if (s.stable) j["stable"] = release_to_json(*s.stable);
  if (s.canary) {
    Json c = release_to_json(s.canary->config);
    c["workload"] = s.canary->workload;
    c["replicas"] = s.canary->replicas;
    c["readyReplicas"] = s.canary->ready_replicas;
    j["canary"] = c;
  }
  if (s.stage) {
    Json st = {{"name", s.stage->name},
               {"revision", s.stage->revision},
               {"phase", std::string(to_string(s.stage->phase))},
               {"startedAt", time_json(s.stage->started_at)},
               {"gateResults", Json::array()}};
    if (!s.stage->from_revision.empty()) st["fromRevision"] = s.stage->from_revision;
    if (s.stage->analysis_started_at) st["analysisStartedAt"] = time_json(*s.stage->analysis_started_at);
    if (s.stage->failed_at) st["failedAt"] = time_json(*s.stage->failed_at);
    if (!s.stage->outcome.empty()) st["outcome"] = s.stage->outcome;
    if (!s.stage->failure_reason.empty()) st["failureReason"] = s.stage->failure_reason;
    if (!s.stage->failure_message.empty()) st["failureMessage"] = s.stage->failure_message;
    for (const auto& g : s.stage->gate_results) {
      Json gj = {{"gate", g.gate}, {"outcome", g.outcome}, {"message", g.message}, {"at", time_json(g.at)}};
      if (!g.measurements.empty()) gj["measurements"] = number_map_json(g.measurements);
      if (!g.thresholds.empty()) gj["thresholds"] = number_map_json(g.thresholds);
      st["gateResults"].push_back(gj);
    }
    j["stage"] = st;
  }
  j["conditions"] = Json::array();
  for (const auto& c : s.conditions) {
    j["conditions"].push_back({{"type", c.type},
                               {"status", c.status},
                               {"reason", c.reason},
                               {"message", c.message},
                               {"observedGeneration", c.observed_generation},
                               {"lastTransitionTime", time_json(c.last_transition_time)}});
  }
  if (!s.history.empty()) {
    j["history"] = Json::array();
    for (const auto& h : s.history) {
      j["history"].push_back({{"stage", h.stage},
                              {"revision", h.revision},
                              {"outcome", h.outcome},
                              {"reason", h.reason},
                              {"message", h.message},
                              {"at", time_json(h.at)}});
    }
  }
  if (!s.failed_revisions.empty()) j["failedRevisions"] = s.failed_revisions;
  if (s.control != RolloutControlStatus{}) {
    Json c = Json::object();
    if (!s.control.failed_for.empty()) c["failedFor"] = s.control.failed_for;
    if (!s.control.abort_token.empty()) c["abortToken"] = s.control.abort_token;
    if (!s.control.retry_token.empty()) c["retryToken"] = s.control.retry_token;
    if (s.control.halted) c["halted"] = true;
    j["rollout"] = c;
  }
  return j;
}

Result<InferenceModelStatus> parse_status(const Json& j) {
  InferenceModelStatus s;
  if (!j.is_object()) return invalid_argument("status: expected an object");
  INFERGATE_ASSIGN_OR_RETURN(s.observed_generation, json_int_or(j, "observedGeneration", 0, "status"));
  INFERGATE_ASSIGN_OR_RETURN(int64_t replicas, json_int_or(j, "replicas", 0, "status"));
  INFERGATE_ASSIGN_OR_RETURN(int64_t ready, json_int_or(j, "readyReplicas", 0, "status"));
  s.replicas = static_cast<int32_t>(replicas);
  s.ready_replicas = static_cast<int32_t>(ready);
  INFERGATE_ASSIGN_OR_RETURN(s.selector, json_string_or(j, "selector", "", "status"));
  if (auto it = j.find("stable"); it != j.end() && !it->is_null()) {
    INFERGATE_ASSIGN_OR_RETURN(ReleaseConfig r, release_from_json(*it, "status.stable"));
    s.stable = r;
  }
  if (auto it = j.find("canary"); it != j.end() && !it->is_null()) {
    CanaryStatus c;
    INFERGATE_ASSIGN_OR_RETURN(c.config, release_from_json(*it, "status.canary"));
    INFERGATE_ASSIGN_OR_RETURN(c.workload, json_string_or(*it, "workload", "", "status.canary"));
    INFERGATE_ASSIGN_OR_RETURN(int64_t cr, json_int_or(*it, "replicas", 0, "status.canary"));
    INFERGATE_ASSIGN_OR_RETURN(int64_t crr, json_int_or(*it, "readyReplicas", 0, "status.canary"));
    c.replicas = static_cast<int32_t>(cr);
    c.ready_replicas = static_cast<int32_t>(crr);
    s.canary = c;
  }
  if (auto it = j.find("stage"); it != j.end() && it->is_object()) {
    StageStatus st;
    INFERGATE_ASSIGN_OR_RETURN(st.name, json_string(*it, "name", "status.stage"));
    INFERGATE_ASSIGN_OR_RETURN(st.revision, json_string_or(*it, "revision", "", "status.stage"));
    INFERGATE_ASSIGN_OR_RETURN(std::string phase, json_string(*it, "phase", "status.stage"));
    INFERGATE_ASSIGN_OR_RETURN(st.phase, parse_stage_phase(phase, "status.stage.phase"));
    st.started_at = parse_time_or(*it, "startedAt");
    INFERGATE_ASSIGN_OR_RETURN(st.from_revision, json_string_or(*it, "fromRevision", "", "status.stage"));
    if (it->contains("analysisStartedAt")) st.analysis_started_at = parse_time_or(*it, "analysisStartedAt");
    if (it->contains("failedAt")) st.failed_at = parse_time_or(*it, "failedAt");
    INFERGATE_ASSIGN_OR_RETURN(st.outcome, json_string_or(*it, "outcome", "", "status.stage"));
    INFERGATE_ASSIGN_OR_RETURN(st.failure_reason, json_string_or(*it, "failureReason", "", "status.stage"));
    INFERGATE_ASSIGN_OR_RETURN(st.failure_message, json_string_or(*it, "failureMessage", "", "status.stage"));
    if (auto g = it->find("gateResults"); g != it->end() && g->is_array()) {
      for (const auto& gj : *g) {
        GateResult gr;
        INFERGATE_ASSIGN_OR_RETURN(gr.gate, json_string(gj, "gate", "status.stage.gateResults"));
        INFERGATE_ASSIGN_OR_RETURN(gr.outcome, json_string_or(gj, "outcome", "", "status.stage.gateResults"));
        INFERGATE_ASSIGN_OR_RETURN(gr.message, json_string_or(gj, "message", "", "status.stage.gateResults"));
        gr.measurements = number_map_from(gj, "measurements");
        gr.thresholds = number_map_from(gj, "thresholds");
        gr.at = parse_time_or(gj, "at");
        st.gate_results.push_back(gr);
      }
    }
    s.stage = st;
  }
  if (auto it = j.find("conditions"); it != j.end() && it->is_array()) {
    for (const auto& cj : *it) {
      Condition c;
      INFERGATE_ASSIGN_OR_RETURN(c.type, json_string(cj, "type", "status.conditions"));
      INFERGATE_ASSIGN_OR_RETURN(c.status, json_string(cj, "status", "status.conditions"));
      INFERGATE_ASSIGN_OR_RETURN(c.reason, json_string_or(cj, "reason", "", "status.conditions"));
      INFERGATE_ASSIGN_OR_RETURN(c.message, json_string_or(cj, "message", "", "status.conditions"));
      INFERGATE_ASSIGN_OR_RETURN(c.observed_generation,
                                 json_int_or(cj, "observedGeneration", 0, "status.conditions"));
      c.last_transition_time = parse_time_or(cj, "lastTransitionTime");
      s.conditions.push_back(c);
    }
  }
  if (auto it = j.find("history"); it != j.end() && it->is_array()) {
    for (const auto& hj : *it) {
      HistoryEntry h;
      INFERGATE_ASSIGN_OR_RETURN(h.stage, json_string_or(hj, "stage", "", "status.history"));
      INFERGATE_ASSIGN_OR_RETURN(h.revision, json_string_or(hj, "revision", "", "status.history"));
      INFERGATE_ASSIGN_OR_RETURN(h.outcome, json_string_or(hj, "outcome", "", "status.history"));
      INFERGATE_ASSIGN_OR_RETURN(h.reason, json_string_or(hj, "reason", "", "status.history"));
      INFERGATE_ASSIGN_OR_RETURN(h.message, json_string_or(hj, "message", "", "status.history"));
      h.at = parse_time_or(hj, "at");
      s.history.push_back(h);
    }
  }
  if (auto it = j.find("failedRevisions"); it != j.end() && it->is_array()) {
    for (const auto& r : *it) {
      if (r.is_string()) s.failed_revisions.push_back(r.get<std::string>());
    }
  }
  if (auto it = j.find("rollout"); it != j.end() && it->is_object()) {
    INFERGATE_ASSIGN_OR_RETURN(s.control.failed_for, json_string_or(*it, "failedFor", "", "status.rollout"));
    INFERGATE_ASSIGN_OR_RETURN(s.control.abort_token,
                               json_string_or(*it, "abortToken", "", "status.rollout"));
    INFERGATE_ASSIGN_OR_RETURN(s.control.retry_token,
                               json_string_or(*it, "retryToken", "", "status.rollout"));
    if (auto h = it->find("halted"); h != it->end() && h->is_boolean()) s.control.halted = h->get<bool>();
  }
  return s;
}

}  // namespace infergate::op::api
