// Validation of spec.podTemplate.
#include "infergate/operator/api/pod_template.h"

#include <limits>
#include <regex>

namespace infergate::op::api {
namespace {

const std::string kPath = "spec.podTemplate";

bool subdomain(const std::string& s) {
  static const std::regex re("^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$");
  return !s.empty() && s.size() <= 253 && std::regex_match(s, re);
}

bool label(const std::string& s) {
  static const std::regex re("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
  return !s.empty() && s.size() <= 63 && std::regex_match(s, re);
}

bool env_name(const std::string& s) {
  static const std::regex re("^[-._a-zA-Z][-._a-zA-Z0-9]*$");
  return !s.empty() && s.size() <= 256 && std::regex_match(s, re);
}

// A label key or taint key: an optional DNS subdomain prefix and "/", then a name (the CRD's pattern).
bool qualified_name(const std::string& s) {
  static const std::regex re(
      "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
      ")?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$");
  return !s.empty() && s.size() <= 317 && std::regex_match(s, re);
}

bool label_value(const std::string& s) {
  static const std::regex re("^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$");
  return s.size() <= 63 && std::regex_match(s, re);
}

// The most items of each list (the CRD's maxItems, which bound what its CEL rules iterate).
constexpr size_t kMaxTolerations = 64, kMaxSpread = 16, kMaxPullSecrets = 32, kMaxEnv = 128, kMaxVolumes = 32,
                 kMaxMounts = 32;

// Without trailing slashes ("/etc/" covers what "/etc" covers); "/" stays "/".
std::string trimmed(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string at(const std::string& field, size_t i) {
  return kPath + "." + field + "[" + std::to_string(i) + "]";
}

class Checker {
 public:
  explicit Checker(std::vector<FieldError>& errors) : errors_(errors) {}
  void fail(const std::string& path, const std::string& message) {
    errors_.push_back({path, message, "InvalidSpec"});
  }

  // tmpl[key] as an array of objects (empty when absent) of at most `max` items; a type error is
  // reported.
  const Json& objects(const Json& tmpl, const char* key, size_t max) {
    return objects_at(tmpl, key, kPath + "." + key, max);
  }
  const Json& objects_at(const Json& parent, const char* key, const std::string& path, size_t max) {
    static const Json empty = Json::array();
    auto it = parent.find(key);
    if (it == parent.end() || it->is_null()) return empty;
    if (!it->is_array()) {
      fail(path, "expected a list");
      return empty;
    }
    if (it->size() > max) fail(path, "at most " + std::to_string(max) + " items");
    for (size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_object()) fail(path + "[" + std::to_string(i) + "]", "expected an object");
    }
    return *it;
  }

  // obj[key] as a string ("" when absent or null); any other type is reported and read as "".
  std::string text(const Json& obj, const char* key, const std::string& path) {
    if (!obj.is_object()) return "";
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return "";
    if (!it->is_string()) {
      fail(path + "." + key, "expected a string");
      return "";
    }
    return it->get<std::string>();
  }

  // An object's keys must be among `allowed`.
  void only(const Json& obj, const std::set<std::string>& allowed, const std::string& path) {
    if (!obj.is_object()) return;
    for (const auto& [k, v] : obj.items()) {
      if (!allowed.count(k)) fail(path + "." + k, "not a field the operator passes on here");
    }
  }

  std::string name(const Json& tmpl, const char* key, bool (*valid)(const std::string&)) {
    auto it = tmpl.find(key);
    if (it == tmpl.end() || it->is_null()) return "";
    if (!it->is_string() || !valid(it->get<std::string>())) {
      fail(kPath + "." + key, "not a valid object name");
      return "";
    }
    return it->get<std::string>();
  }

 private:
  std::vector<FieldError>& errors_;
};

// One toleration, as the Pod API (and the CRD's rules) check it.
void toleration(Checker& c, const Json& t, const std::string& p) {
  if (!t.is_object()) return;
  c.only(t, {"key", "operator", "value", "effect", "tolerationSeconds"}, p);
  const std::string key = c.text(t, "key", p);
  if (!key.empty() && !qualified_name(key)) c.fail(p + ".key", "not a valid taint key");
  std::string op = c.text(t, "operator", p);
  if (op.empty()) op = "Equal";
  if (op != "Equal" && op != "Exists") c.fail(p + ".operator", "must be Equal or Exists");
  const std::string value = c.text(t, "value", p);
  if (!label_value(value)) c.fail(p + ".value", "not a valid label value");
  if (op == "Exists" && !value.empty()) c.fail(p + ".value", "must be empty when operator is Exists");
  if (key.empty() && op != "Exists")
    c.fail(p + ".operator",
           "must be Exists when key is empty, which means \"match all values and all keys\"");
  const std::string effect = c.text(t, "effect", p);
  if (!effect.empty() && effect != "NoSchedule" && effect != "PreferNoSchedule" && effect != "NoExecute")
    c.fail(p + ".effect", "must be NoSchedule, PreferNoSchedule or NoExecute");
  if (auto s = t.find("tolerationSeconds"); s != t.end() && !s->is_null()) {
    if (!s->is_number_integer()) c.fail(p + ".tolerationSeconds", "expected an integer");
    if (effect != "NoExecute") c.fail(p + ".effect", "must be NoExecute when tolerationSeconds is set");
  }
}

void tolerations(Checker& c, const Json& tmpl, SchedulingSpec* out) {
  const Json& list = c.objects(tmpl, "tolerations", kMaxTolerations);
  for (size_t i = 0; i < list.size(); ++i) toleration(c, list[i], at("tolerations", i));
  if (!list.empty()) out->tolerations = list;
}

void placement(Checker& c, const Json& tmpl, SchedulingSpec* out) {
  if (auto it = tmpl.find("nodeSelector"); it != tmpl.end() && !it->is_null()) {
    if (!it->is_object()) {
      c.fail(kPath + ".nodeSelector", "expected a map of strings");
    } else {
      for (const auto& [k, v] : it->items()) {
        if (!v.is_string())
          c.fail(kPath + ".nodeSelector." + k, "expected a string");
        else
          out->node_selector[k] = v.get<std::string>();
      }
    }
  }
  tolerations(c, tmpl, out);
  if (auto it = tmpl.find("affinity"); it != tmpl.end() && !it->is_null()) {
    if (!it->is_object()) {
      c.fail(kPath + ".affinity", "expected an object");
    } else {
      c.only(*it, {"nodeAffinity", "podAffinity", "podAntiAffinity"}, kPath + ".affinity");
      out->affinity = *it;
    }
  }
  const Json& spread = c.objects(tmpl, "topologySpreadConstraints", kMaxSpread);
  std::set<std::string> spread_keys;
  for (size_t i = 0; i < spread.size(); ++i) {
    const Json& t = spread[i];
    if (!t.is_object()) continue;
    const std::string p = at("topologySpreadConstraints", i);
    c.only(t,
           {"maxSkew", "topologyKey", "whenUnsatisfiable", "labelSelector", "minDomains",
            "nodeAffinityPolicy", "nodeTaintsPolicy", "matchLabelKeys"},
           p);
    auto at_least_one = [&](const char* key, bool required) {
      auto it = t.find(key);
      if (it == t.end() || it->is_null()) {
        if (required) c.fail(p + "." + key, "required field is missing");
        return;
      }
      if (!it->is_number_integer() || it->get<int64_t>() < 1 ||
          it->get<int64_t>() > std::numeric_limits<int32_t>::max())
        c.fail(p + "." + key, "must be an integer of at least 1");
    };
    at_least_one("maxSkew", true);
    at_least_one("minDomains", false);
    const std::string key = c.text(t, "topologyKey", p);
    if (key.empty()) {
      c.fail(p + ".topologyKey", "required field is missing");
    } else if (!qualified_name(key)) {
      c.fail(p + ".topologyKey", "not a valid label key");
    }
    const std::string when = c.text(t, "whenUnsatisfiable", p);
    if (when != "DoNotSchedule" && when != "ScheduleAnyway")
      c.fail(p + ".whenUnsatisfiable", "must be DoNotSchedule or ScheduleAnyway");
    if (t.contains("minDomains") && when != "DoNotSchedule")
      c.fail(p + ".minDomains", "can only be used with whenUnsatisfiable DoNotSchedule");
    for (const char* policy : {"nodeAffinityPolicy", "nodeTaintsPolicy"}) {
      const std::string v = c.text(t, policy, p);
      if (!v.empty() && v != "Honor" && v != "Ignore") c.fail(p + "." + policy, "must be Honor or Ignore");
    }
    if (!spread_keys.insert(key + "\n" + when).second)
      c.fail(p, "a second constraint for topologyKey " + key + " and " + when);
  }
  if (!spread.empty()) out->topology_spread = spread;
  out->priority_class_name = c.name(tmpl, "priorityClassName", subdomain);
  out->runtime_class_name = c.name(tmpl, "runtimeClassName", subdomain);
  out->service_account_name = c.name(tmpl, "serviceAccountName", subdomain);
  const Json& secrets = c.objects(tmpl, "imagePullSecrets", kMaxPullSecrets);
  for (size_t i = 0; i < secrets.size(); ++i) {
    c.only(secrets[i], {"name"}, at("imagePullSecrets", i));
    const std::string n = c.text(secrets[i], "name", at("imagePullSecrets", i));
    if (!subdomain(n))
      c.fail(at("imagePullSecrets", i) + ".name", "not a valid Secret name");
    else
      out->image_pull_secrets.push_back(n);
  }
}

void env(Checker& c, const Json& tmpl, SchedulingSpec* out) {
  const Json& list = c.objects(tmpl, "env", kMaxEnv);
  std::set<std::string> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& e = list[i];
    if (!e.is_object()) continue;  // objects() said so
    const std::string p = at("env", i);
    c.only(e, {"name", "value", "valueFrom"}, p);
    const std::string n = c.text(e, "name", p);
    if (!env_name(n)) c.fail(p + ".name", "not a valid environment variable name");
    if (!seen.insert(n).second) c.fail(p + ".name", "\"" + n + "\" is given twice");
    if (n.rfind("INFERGATE_", 0) == 0) c.fail(p + ".name", "INFERGATE_ variables are the operator's");
    const bool value = e.contains("value"), from = e.contains("valueFrom");
    if (value == from) {
      c.fail(p, "exactly one of value or valueFrom");
    } else if (value && !e["value"].is_string()) {
      c.fail(p + ".value", "expected a string");
    } else if (from) {
      const Json& f = e["valueFrom"];
      c.only(f, {"secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef"}, p + ".valueFrom");
      if (!f.is_object() || f.size() != 1) c.fail(p + ".valueFrom", "exactly one source");
    }
  }
  if (!list.empty()) out->env = list;
}

void volumes(Checker& c, const Json& tmpl, SchedulingSpec* out) {
  // The restricted Pod Security Standard's volume types: nothing that reaches the node.
  static const std::set<std::string> kTypes = {
      "configMap", "secret",      "emptyDir", "persistentVolumeClaim",
      "projected", "downwardAPI", "csi",      "ephemeral"};
  const Json& list = c.objects(tmpl, "volumes", kMaxVolumes);
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& v = list[i];
    if (!v.is_object()) continue;  // objects() said so
    const std::string p = at("volumes", i);
    const std::string n = c.text(v, "name", p);
    if (!label(n)) c.fail(p + ".name", "not a valid volume name");
    if (reserved_volume_names().count(n)) c.fail(p + ".name", "\"" + n + "\" is the operator's own volume");
    if (!names.insert(n).second) c.fail(p + ".name", "\"" + n + "\" is given twice");
    int sources = 0;
    for (const auto& [k, val] : v.items()) {
      if (k == "name") continue;
      if (!kTypes.count(k)) {
        c.fail(p + "." + k,
               "not a volume type the restricted Pod Security Standard allows (configMap, secret, "
               "emptyDir, persistentVolumeClaim, projected, downwardAPI, csi, ephemeral)");
      }
      ++sources;
    }
    if (sources != 1) c.fail(p, "exactly one volume source");
  }
  const Json& mounts = c.objects(tmpl, "volumeMounts", kMaxMounts);
  std::set<std::string> mount_paths;
  for (size_t i = 0; i < mounts.size(); ++i) {
    const Json& m = mounts[i];
    if (!m.is_object()) continue;  // objects() said so
    const std::string p = at("volumeMounts", i);
    c.only(m, {"name", "mountPath", "readOnly", "subPath"}, p);
    if (!names.count(c.text(m, "name", p)))
      c.fail(p + ".name", "must name a volume of spec.podTemplate.volumes");
    const std::string path = c.text(m, "mountPath", p);
    if (path.empty() || path.front() != '/' || path.find("..") != std::string::npos) {
      c.fail(p + ".mountPath", "must be an absolute path without '..'");
      continue;
    }
    if (!mount_paths.insert(path).second) c.fail(p, "a second mount at " + path);
    const std::string dir = trimmed(path);
    for (const auto& reserved : reserved_mount_paths()) {
      const bool under = dir == reserved || dir.rfind(reserved + "/", 0) == 0;
      const bool over = reserved.rfind(dir == "/" ? dir : dir + "/", 0) == 0;
      if (under || over)
        c.fail(p + ".mountPath", "would cover " + reserved + ", which the operator mounts itself");
    }
    const std::string sub = c.text(m, "subPath", p);
    if (!sub.empty() && (sub.front() == '/' || sub.find("..") != std::string::npos))
      c.fail(p + ".subPath", "must be a relative path without '..'");
  }
  if (!list.empty()) out->volumes = list;
  if (!mounts.empty()) out->volume_mounts = mounts;
}

}  // namespace

const std::set<std::string>& reserved_volume_names() {
  static const std::set<std::string> k = {"model-artifacts", "trust-keys", "tmp", "dshm"};
  return k;
}

const std::vector<std::string>& reserved_mount_paths() {
  static const std::vector<std::string> k = {"/models", "/etc/infergate/trust", "/tmp", "/dev/shm",
                                             "/dev/termination-log"};
  return k;
}

std::vector<FieldError> check_tolerations(const Json& list, const std::string& path) {
  std::vector<FieldError> errors;
  Checker c(errors);
  const Json parent = {{"tolerations", list}};
  const Json& items = c.objects_at(parent, "tolerations", path, kMaxTolerations);
  for (size_t i = 0; i < items.size(); ++i) toleration(c, items[i], path + "[" + std::to_string(i) + "]");
  return errors;
}

std::vector<FieldError> parse_pod_template(const Json& tmpl, SchedulingSpec* out) {
  std::vector<FieldError> errors;
  Checker c(errors);
  if (!tmpl.is_object()) {
    c.fail(kPath, "expected an object");
    return errors;
  }
  c.only(tmpl,
         {"imagePullSecrets", "nodeSelector", "tolerations", "affinity", "topologySpreadConstraints",
          "priorityClassName", "runtimeClassName", "serviceAccountName", "env", "volumes", "volumeMounts"},
         kPath);
  placement(c, tmpl, out);
  env(c, tmpl, out);
  volumes(c, tmpl, out);
  return errors;
}

}  // namespace infergate::op::api
