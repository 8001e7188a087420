// kubeconfig and in-cluster configuration.
#include "infergate/operator/client/config.h"

#include <cstdlib>
#include <system_error>

#include "infergate/common/encoding.h"
#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/operator/api/yaml.h"

namespace infergate::op::client {
namespace {

constexpr size_t kMaxKubeconfig = 4u << 20;
constexpr size_t kMaxPem = 1u << 20;

// The entry named `name` in a kubeconfig list ("clusters", "users", "contexts"), its inner object.
Result<const Json*> named(const Json& cfg, std::string_view list, std::string_view inner,
                          const std::string& name) {
  auto it = cfg.find(std::string(list));
  if (it != cfg.end() && it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == name) {
        auto in = entry.find(std::string(inner));
        if (in == entry.end() || !in->is_object()) {
          return invalid_argument(std::string(list) + " entry \"" + name + "\" has no " + std::string(inner));
        }
        return &*in;
      }
    }
  }
  return not_found("no " + std::string(inner) + " named \"" + name + "\" in " + std::string(list));
}

// PEM from "<key>-data" (base64) or "<key>" (a file path, relative to base_dir).
Result<std::string> pem_field(const Json& obj, const std::string& key,
                              const std::filesystem::path& base_dir) {
  if (auto it = obj.find(key + "-data"); it != obj.end() && it->is_string()) {
    auto decoded = base64_decode(it->get<std::string>());
    if (!decoded.ok()) return std::move(decoded).error().context(key + "-data");
    return *decoded;
  }
  if (auto it = obj.find(key); it != obj.end() && it->is_string()) {
    std::filesystem::path p = it->get<std::string>();
    if (p.is_relative()) p = base_dir / p;
    auto text = read_file(p, kMaxPem);
    if (!text.ok()) return std::move(text).error().context(key);
    return *text;
  }
  return std::string();
}

}  // namespace

std::shared_ptr<TokenSource> TokenSource::fixed(std::string token) {
  auto t = std::make_shared<TokenSource>();
  t->token_ = std::move(token);
  t->loaded_ = true;
  return t;
}

std::shared_ptr<TokenSource> TokenSource::file(std::filesystem::path path) {
  auto t = std::make_shared<TokenSource>();
  t->path_ = std::move(path);
  return t;
}

Result<std::string> TokenSource::token() {
  std::lock_guard lock(mu_);
  if (path_.empty()) return token_;
  std::error_code ec;
  auto mtime = std::filesystem::last_write_time(path_, ec);
  auto size = ec ? 0 : std::filesystem::file_size(path_, ec);
  if (ec) {
    if (loaded_) return token_;  // keep the last good token while the file is being replaced
    return Error(ErrorCode::kNotFound, "token file " + path_.string() + ": " + ec.message());
  }
  if (!loaded_ || mtime != mtime_ || size != size_) {
    auto text = read_file(path_, 64 * 1024);
    if (!text.ok()) {
      if (loaded_) return token_;
      return std::move(text).error();
    }
    std::string t = std::move(*text);
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
    token_ = std::move(t);
    mtime_ = mtime;
    size_ = size;
    loaded_ = true;
  }
  return token_;
}

Result<RestConfig> parse_kubeconfig(std::string_view text, const std::filesystem::path& base_dir,
                                    std::string_view context) {
  INFERGATE_ASSIGN_OR_RETURN(Json cfg, api::parse_yaml(text, "kubeconfig"));
  if (!cfg.is_object()) return invalid_argument("kubeconfig: not a YAML map");
  std::string ctx_name = context.empty() ? cfg.value("current-context", "") : std::string(context);
  if (ctx_name.empty()) return invalid_argument("kubeconfig: no current-context (pass --context)");
  auto ctx = named(cfg, "contexts", "context", ctx_name);
  if (!ctx.ok()) return std::move(ctx).error().context("kubeconfig");
  std::string cluster_name = (*ctx)->value("cluster", "");
  std::string user_name = (*ctx)->value("user", "");
  auto cluster = named(cfg, "clusters", "cluster", cluster_name);
  if (!cluster.ok()) return std::move(cluster).error().context("kubeconfig context \"" + ctx_name + "\"");
  RestConfig rc;
  rc.server = (*cluster)->value("server", "");
  if (rc.server.empty()) return invalid_argument("kubeconfig cluster \"" + cluster_name + "\": no server");
  while (rc.server.size() > 1 && rc.server.back() == '/') rc.server.pop_back();
  if (rc.server.rfind("https://", 0) != 0 && rc.server.rfind("http://", 0) != 0) {
    return invalid_argument("kubeconfig cluster \"" + cluster_name + "\": server \"" + rc.server +
                            "\" is not an http(s) URL");
  }
  rc.insecure_skip_tls_verify = (*cluster)->value("insecure-skip-tls-verify", false);
  INFERGATE_ASSIGN_OR_RETURN(rc.ca_pem, pem_field(**cluster, "certificate-authority", base_dir));
  rc.namespace_ = (*ctx)->value("namespace", "default");
  if (!user_name.empty()) {
    auto user = named(cfg, "users", "user", user_name);
    if (!user.ok()) return std::move(user).error().context("kubeconfig context \"" + ctx_name + "\"");
    const Json& u = **user;
    if (u.contains("exec") || u.contains("auth-provider")) {
      return unimplemented("kubeconfig user \"" + user_name +
                           "\": exec plugins and auth providers are not supported; use a token, a token file "
                           "or a client certificate");
    }
    if (u.contains("username") || u.contains("password")) {
      return unimplemented("kubeconfig user \"" + user_name + "\": basic authentication is not supported");
    }
    if (auto t = u.find("token"); t != u.end() && t->is_string()) {
      rc.token = TokenSource::fixed(t->get<std::string>());
    } else if (auto tf = u.find("tokenFile"); tf != u.end() && tf->is_string()) {
      std::filesystem::path p = tf->get<std::string>();
      rc.token = TokenSource::file(p.is_relative() ? base_dir / p : p);
    }
    INFERGATE_ASSIGN_OR_RETURN(rc.client_cert_pem, pem_field(u, "client-certificate", base_dir));
    INFERGATE_ASSIGN_OR_RETURN(rc.client_key_pem, pem_field(u, "client-key", base_dir));
    if (rc.client_cert_pem.empty() != rc.client_key_pem.empty()) {
      return invalid_argument("kubeconfig user \"" + user_name +
                              "\": a client certificate needs its key, and a key "
                              "its certificate");
    }
  }
  return rc;
}

Result<RestConfig> load_kubeconfig(const std::filesystem::path& path, std::string_view context) {
  auto text = read_file(path, kMaxKubeconfig);
  if (!text.ok()) return std::move(text).error().context("kubeconfig");
  auto rc = parse_kubeconfig(*text, path.parent_path(), context);
  if (!rc.ok()) return std::move(rc).error().context(path.string());
  return rc;
}

Result<RestConfig> in_cluster_config(const InClusterPaths& paths) {
  const char* host =
      std::getenv("KUBERNETES_SERVICE_HOST");  // NOLINT(concurrency-mt-unsafe): read at startup
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");  // NOLINT(concurrency-mt-unsafe)
  if (!host || !*host || !port || !*port) {
    return failed_precondition("not running in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set");
  }
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6
  RestConfig rc;
  rc.server = "https://" + h + ":" + port;
  rc.token = TokenSource::file(paths.token);
  auto first = rc.token->token();
  if (!first.ok()) return std::move(first).error().context("in-cluster service-account token");
  auto ca = read_file(paths.ca, kMaxPem);
  if (!ca.ok()) return std::move(ca).error().context("in-cluster CA bundle");
  rc.ca_pem = std::move(*ca);
  auto ns = read_file(paths.namespace_, 4096);
  if (ns.ok()) {
    std::string n = std::move(*ns);
    while (!n.empty() && (n.back() == '\n' || n.back() == ' ')) n.pop_back();
    if (!n.empty()) rc.namespace_ = n;
  }
  return rc;
}

Result<RestConfig> default_config(const std::filesystem::path& kubeconfig_flag, std::string_view context) {
  if (!kubeconfig_flag.empty()) return load_kubeconfig(kubeconfig_flag, context);
  if (const char* env = std::getenv("KUBECONFIG"); env && *env) {  // NOLINT(concurrency-mt-unsafe)
    std::string first = env;
    first = first.substr(0, first.find(':'));  // the first file of a list
    return load_kubeconfig(first, context);
  }
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");  // NOLINT(concurrency-mt-unsafe)
  if (host && *host) {
    return in_cluster_config();
  }
  const char* home = std::getenv("HOME");  // NOLINT(concurrency-mt-unsafe)
  if (!home || !*home) return failed_precondition("no kubeconfig: pass --kubeconfig or run in a cluster");
  return load_kubeconfig(std::filesystem::path(home) / ".kube" / "config", context);
}

}  // namespace infergate::op::client
