// How to reach the API server: from a kubeconfig file (yaml-cpp) or from inside a pod (the service
// account's token, CA and namespace). Tokens in files are re-read when the file changes, so rotated
// service-account tokens keep working.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "infergate/common/result.h"

namespace infergate::op::client {

// A bearer token, fixed or read from a file that may be rotated underneath us. Thread-safe.
class TokenSource {
 public:
  static std::shared_ptr<TokenSource> fixed(std::string token);
  static std::shared_ptr<TokenSource> file(std::filesystem::path path);
  // The current token ("" when there is none). A file is re-read when its mtime or size changed.
  Result<std::string> token();

 private:
  std::mutex mu_;
  std::string token_;
  std::filesystem::path path_;
  std::filesystem::file_time_type mtime_{};
  uintmax_t size_ = 0;
  bool loaded_ = false;
};

struct RestConfig {
  std::string server;                     // "https://10.96.0.1:443" or "http://127.0.0.1:8080"
  std::string ca_pem;                     // trusted CA bundle; empty: the system's roots
  bool insecure_skip_tls_verify = false;  // only when the kubeconfig says so
  std::shared_ptr<TokenSource> token;     // may be null
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string namespace_ = "default";  // the context's (or the pod's) namespace
  std::string user_agent = "infergate-operator/0.1.0";
  std::chrono::milliseconds timeout{30000};  // every request; watches use their own, longer one
};

// Reads a kubeconfig: the named context (or current-context), its cluster (server, certificate-
// authority[-data], insecure-skip-tls-verify) and user (token, tokenFile, client-certificate[-data],
// client-key[-data]). Relative file paths are relative to the kubeconfig's directory. Exec plugins
// and auth providers are refused with a clear error (the operator does not run helper programs).
Result<RestConfig> load_kubeconfig(const std::filesystem::path& path, std::string_view context = {});
Result<RestConfig> parse_kubeconfig(std::string_view text, const std::filesystem::path& base_dir,
                                    std::string_view context = {});

// Where a pod finds its service account (overridable for tests).
struct InClusterPaths {
  std::filesystem::path token = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::filesystem::path ca = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::filesystem::path namespace_ = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
};
// KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT plus the service-account files.
Result<RestConfig> in_cluster_config(const InClusterPaths& paths = {});

// --kubeconfig when given; else $KUBECONFIG; else in-cluster when KUBERNETES_SERVICE_HOST is set;
// else ~/.kube/config.
Result<RestConfig> default_config(const std::filesystem::path& kubeconfig_flag,
                                  std::string_view context = {});

}  // namespace infergate::op::client
