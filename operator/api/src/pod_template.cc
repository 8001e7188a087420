// Validation of spec.podTemplate.
#include "infergate/operator/api/pod_template.h"

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

std::string at(const std::string& field, size_t i) {
  return kPath + "." + field + "[" + std::to_string(i) + "]";
}

class Checker {
 public:
  explicit Checker(std::vector<FieldError>& errors) : errors_(errors) {}
  void fail(const std::string& path, const std::string& message) {
    errors_.push_back({path, message, "InvalidSpec"});
  }

  // tmpl[key] as an array of objects (empty when absent); a type error is reported.
  const Json& objects(const Json& tmpl, const char* key) {
    static const Json empty = Json::array();
    auto it = tmpl.find(key);
    if (it == tmpl.end() || it->is_null()) return empty;
    if (!it->is_array()) {
      fail(kPath + "." + key, "expected a list");
      return empty;
    }
    for (size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_object()) fail(at(key, i), "expected an object");
    }
    return *it;
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

void tolerations(Checker& c, const Json& tmpl, SchedulingSpec* out) {
  const Json& list = c.objects(tmpl, "tolerations");
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& t = list[i];
    c.only(t, {"key", "operator", "value", "effect", "tolerationSeconds"}, at("tolerations", i));
    const std::string op = t.value("operator", "Equal");
    if (op != "Equal" && op != "Exists")
      c.fail(at("tolerations", i) + ".operator", "must be Equal or Exists");
    const std::string effect = t.value("effect", "");
    if (!effect.empty() && effect != "NoSchedule" && effect != "PreferNoSchedule" && effect != "NoExecute")
      c.fail(at("tolerations", i) + ".effect", "must be NoSchedule, PreferNoSchedule or NoExecute");
  }
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
  const Json& spread = c.objects(tmpl, "topologySpreadConstraints");
  for (size_t i = 0; i < spread.size(); ++i) {
    const Json& t = spread[i];
    const std::string p = at("topologySpreadConstraints", i);
    c.only(t,
           {"maxSkew", "topologyKey", "whenUnsatisfiable", "labelSelector", "minDomains",
            "nodeAffinityPolicy", "nodeTaintsPolicy", "matchLabelKeys"},
           p);
    if (!t.value("maxSkew", Json()).is_number_integer() || t.value("maxSkew", 0) < 1)
      c.fail(p + ".maxSkew", "must be an integer of at least 1");
    if (t.value("topologyKey", "").empty()) c.fail(p + ".topologyKey", "required field is missing");
    const std::string when = t.value("whenUnsatisfiable", "");
    if (when != "DoNotSchedule" && when != "ScheduleAnyway")
      c.fail(p + ".whenUnsatisfiable", "must be DoNotSchedule or ScheduleAnyway");
  }
  if (!spread.empty()) out->topology_spread = spread;
  out->priority_class_name = c.name(tmpl, "priorityClassName", subdomain);
  out->runtime_class_name = c.name(tmpl, "runtimeClassName", subdomain);
  out->service_account_name = c.name(tmpl, "serviceAccountName", subdomain);
  const Json& secrets = c.objects(tmpl, "imagePullSecrets");
  for (size_t i = 0; i < secrets.size(); ++i) {
    c.only(secrets[i], {"name"}, at("imagePullSecrets", i));
    const std::string n = secrets[i].value("name", "");
    if (!subdomain(n))
      c.fail(at("imagePullSecrets", i) + ".name", "not a valid Secret name");
    else
      out->image_pull_secrets.push_back(n);
  }
}

void env(Checker& c, const Json& tmpl, SchedulingSpec* out) {
  const Json& list = c.objects(tmpl, "env");
  std::set<std::string> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& e = list[i];
    const std::string p = at("env", i);
    c.only(e, {"name", "value", "valueFrom"}, p);
    const std::string n = e.value("name", "");
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
  const Json& list = c.objects(tmpl, "volumes");
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& v = list[i];
    const std::string p = at("volumes", i);
    const std::string n = v.value("name", "");
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
  const Json& mounts = c.objects(tmpl, "volumeMounts");
  for (size_t i = 0; i < mounts.size(); ++i) {
    const Json& m = mounts[i];
    const std::string p = at("volumeMounts", i);
    c.only(m, {"name", "mountPath", "readOnly", "subPath"}, p);
    if (!names.count(m.value("name", "")))
      c.fail(p + ".name", "must name a volume of spec.podTemplate.volumes");
    const std::string path = m.value("mountPath", "");
    if (path.empty() || path.front() != '/' || path.find("..") != std::string::npos) {
      c.fail(p + ".mountPath", "must be an absolute path without '..'");
      continue;
    }
    for (const auto& reserved : reserved_mount_paths()) {
      const bool under = path == reserved || path.rfind(reserved + "/", 0) == 0;
      const bool over = reserved.rfind(path == "/" ? path : path + "/", 0) == 0;
      if (under || over)
        c.fail(p + ".mountPath", "would cover " + reserved + ", which the operator mounts itself");
    }
    const std::string sub = m.value("subPath", "");
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
