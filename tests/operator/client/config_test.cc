// kubeconfig and in-cluster configuration.
#include "infergate/operator/client/config.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <cstdlib>

#include "infergate/common/encoding.h"
#include "infergate/common/fs.h"

namespace infergate::op::client {
namespace {

using infergate::testing::refused;

constexpr const char* kKubeconfig = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: dev-cluster
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority: ca.crt
- name: other-cluster
  cluster:
    server: http://127.0.0.1:8080
    insecure-skip-tls-verify: true
users:
- name: dev-user
  user:
    token: abc
- name: file-user
  user:
    tokenFile: token.txt
- name: exec-user
  user:
    exec: {command: aws}
contexts:
- name: dev
  context: {cluster: dev-cluster, user: dev-user, namespace: models}
- name: other
  context: {cluster: other-cluster, user: file-user}
- name: exec
  context: {cluster: other-cluster, user: exec-user}
)";

TEST(Kubeconfig, ReadsTheCurrentContextWithRelativeFiles) {
  auto dir = TempDir::create("kc");
  ASSERT_TRUE(write_file_atomic(dir->path() / "ca.crt", "CA PEM").ok());
  auto rc = parse_kubeconfig(kKubeconfig, dir->path());
  ASSERT_TRUE(rc.ok()) << rc.error().to_string();
  EXPECT_EQ(rc->server, "https://10.0.0.1:6443");
  EXPECT_EQ(rc->ca_pem, "CA PEM");
  EXPECT_EQ(rc->namespace_, "models");
  EXPECT_FALSE(rc->insecure_skip_tls_verify);
  ASSERT_TRUE(rc->token);
  EXPECT_EQ(*rc->token->token(), "abc");
}

TEST(Kubeconfig, SelectsANamedContextAndATokenFile) {
  auto dir = TempDir::create("kc");
  ASSERT_TRUE(write_file_atomic(dir->path() / "token.txt", "from-file\n").ok());
  auto rc = parse_kubeconfig(kKubeconfig, dir->path(), "other");
  ASSERT_TRUE(rc.ok()) << rc.error().to_string();
  EXPECT_TRUE(rc->insecure_skip_tls_verify);
  EXPECT_EQ(rc->namespace_, "default");
  EXPECT_EQ(*rc->token->token(), "from-file");
}

TEST(Kubeconfig, RefusesExecPluginsAndUnknownContexts) {
  auto exec = parse_kubeconfig(kKubeconfig, "/", "exec");
  ASSERT_FALSE(exec.ok());
  EXPECT_NE(exec.error().message().find("exec plugins"), std::string::npos);
  auto missing = parse_kubeconfig(kKubeconfig, "/", "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("\"nope\""), std::string::npos);
}

TEST(Kubeconfig, DecodesInlineCertificateData) {
  std::string text = std::string(R"(apiVersion: v1
kind: Config
current-context: c
clusters: [{name: k, cluster: {server: "https://h:1", certificate-authority-data: )") +
                     base64_encode("CA") + R"(}}]
users: [{name: u, user: {client-certificate-data: )" +
                     base64_encode("CERT") + ", client-key-data: " + base64_encode("KEY") + R"(}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
)";
  auto rc = parse_kubeconfig(text, "/");
  ASSERT_TRUE(rc.ok()) << rc.error().to_string();
  EXPECT_EQ(rc->ca_pem, "CA");
  EXPECT_EQ(rc->client_cert_pem, "CERT");
  EXPECT_EQ(rc->client_key_pem, "KEY");
}

TEST(Kubeconfig, RefusesACertificateWithoutItsKey) {
  std::string text = std::string(R"(current-context: c
clusters: [{name: k, cluster: {server: "https://h:1"}}]
users: [{name: u, user: {client-certificate-data: )") +
                     base64_encode("CERT") + R"(}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
)";
  EXPECT_TRUE(refused(parse_kubeconfig(text, "/"), "", {"kubeconfig user \"u\"", "needs its key"}));
}

TEST(Kubeconfig, RefusesGarbage) {
  EXPECT_TRUE(refused(parse_kubeconfig("{{{", "/"), "", {"kubeconfig: line 1, column 1"}));
  EXPECT_TRUE(refused(parse_kubeconfig("- a\n- b\n", "/"), "", {"not a YAML map"}));
  EXPECT_TRUE(refused(parse_kubeconfig("current-context: x\n", "/"), "", {"no context named \"x\""}));
}

TEST(InCluster, ReadsTheServiceAccountAndTheServiceEnvironment) {
  auto dir = TempDir::create("sa");
  ASSERT_TRUE(write_file_atomic(dir->path() / "token", "sa-token").ok());
  ASSERT_TRUE(write_file_atomic(dir->path() / "ca.crt", "CA").ok());
  ASSERT_TRUE(write_file_atomic(dir->path() / "namespace", "infergate-system\n").ok());
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);  // NOLINT(concurrency-mt-unsafe)
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);        // NOLINT(concurrency-mt-unsafe)
  InClusterPaths paths{dir->path() / "token", dir->path() / "ca.crt", dir->path() / "namespace"};
  auto rc = in_cluster_config(paths);
  unsetenv("KUBERNETES_SERVICE_HOST");  // NOLINT(concurrency-mt-unsafe)
  unsetenv("KUBERNETES_SERVICE_PORT");  // NOLINT(concurrency-mt-unsafe)
  ASSERT_TRUE(rc.ok()) << rc.error().to_string();
  EXPECT_EQ(rc->server, "https://10.96.0.1:443");
  EXPECT_EQ(rc->ca_pem, "CA");
  EXPECT_EQ(rc->namespace_, "infergate-system");
  EXPECT_EQ(*rc->token->token(), "sa-token");
  EXPECT_TRUE(refused(in_cluster_config(paths), "", {"KUBERNETES_SERVICE_HOST"}));  // outside a cluster
}

TEST(TokenSource, KeepsTheLastTokenWhileTheFileIsReplaced) {
  auto dir = TempDir::create("tok");
  auto path = dir->path() / "token";
  ASSERT_TRUE(write_file_atomic(path, "one").ok());
  auto t = TokenSource::file(path);
  EXPECT_EQ(*t->token(), "one");
  std::filesystem::remove(path);
  EXPECT_EQ(*t->token(), "one");
  ASSERT_TRUE(write_file_atomic(path, "two!").ok());
  EXPECT_EQ(*t->token(), "two!");
}

}  // namespace
}  // namespace infergate::op::client
