// The OMS flags through the binary: sign --format oms, verify --format/--trust-dir/--trusted-root/
// --identity/--issuer/--ca-cert, and their usage errors and exit codes.
#include <gtest/gtest.h>

#include "agent_test_util.h"
#include "infergate/agent/reasons.h"
#include "infergate/common/encoding.h"
#include "infergate/common/subprocess.h"

namespace infergate::agent {
namespace {

namespace fs = std::filesystem;
using testing::AgentRun;
using testing::copy_oms_fixture;
using testing::oms_fixture;
using testing::run_agent;

TEST(OmsCli, SignsAndVerifiesBothSerializations) {
  testing::Release r = testing::make_release();
  for (std::vector<std::string> extra :
       {std::vector<std::string>{}, std::vector<std::string>{"--shard-size", "4096"}}) {
    std::vector<std::string> args = {"sign", r.dir.string(), "--key", r.key.string(), "--format", "oms"};
    args.insert(args.end(), extra.begin(), extra.end());
    AgentRun s = run_agent(args, false);
    ASSERT_EQ(s.exit_code, 0) << s.err;
    AgentRun v = run_agent({"verify", r.dir.string(), "--format", "oms", "--public-key", r.pub.string()});
    EXPECT_EQ(v.exit_code, 0) << v.err;
    EXPECT_EQ(v.report["format"], "oms");
    EXPECT_FALSE(v.report.contains("version"));
  }
}

TEST(OmsCli, RefusesAModelSigOnlyReleaseByDefaultWithFormatNotAllowed) {
  auto r = copy_oms_fixture("key-p256");
  AgentRun v = run_agent(
      {"verify", r.dir.string(), "--public-key", (oms_fixture("key-p256") / "key.pub.pem").string()});
  EXPECT_EQ(v.exit_code, exit_code(Reason::kFormatNotAllowed));
  EXPECT_EQ(v.reason(), "FormatNotAllowed");
}

TEST(OmsCli, VerifiesKeylessFromATrustDirectoryAsAMountedSecretHoldsIt) {
  auto r = copy_oms_fixture("keyless");
  fs::path trust = r.tmp.path() / "trust";
  fs::create_directories(trust);
  fs::copy_file(oms_fixture("keyless") / "trusted_root.json", trust / "trusted_root.json");
  fs::copy_file(oms_fixture("key-p256") / "key.pub.pem", trust / "other.pem");
  AgentRun v = run_agent({"verify", r.dir.string(), "--format", "oms", "--format", "infergate", "--trust-dir",
                          trust.string(), "--identity", testing::kFixtureIdentity, "--issuer",
                          testing::kFixtureIssuer, "--expect-weight-format", "fp16"});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.report["signer"], "keyless publisher@example.com (https://accounts.example.com)");
  AgentRun wrong = run_agent({"verify", r.dir.string(), "--format", "oms", "--trust-dir", trust.string(),
                              "--identity", "mallory@example.com", "--issuer", testing::kFixtureIssuer});
  EXPECT_EQ(wrong.exit_code, exit_code(Reason::kIdentityMismatch));
}

TEST(OmsCli, VerifiesACertificateChainBundleAgainstACaCertificate) {
  // A certificate-method bundle: made by the agent's library for a chain the openssl CLI issues.
  testing::Release r = testing::make_release();
  auto sh = [&](const std::string& cmd) {
    auto res = run_command({"/bin/sh", "-c", cmd}, std::chrono::seconds(60), {}, r.tmp.path());
    ASSERT_TRUE(res.ok() && res->status.success()) << cmd << (res.ok() ? res->err : "");
  };
  sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt "
     "-subj /CN=ca -days 3650 -addext basicConstraints=critical,CA:TRUE -addext "
     "keyUsage=critical,keyCertSign");
  sh("openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out leaf.key && "
     "openssl req -new -key leaf.key -subj /CN=publisher -out leaf.csr && "
     "printf 'keyUsage=critical,digitalSignature\\nextendedKeyUsage=codeSigning\\n' > leaf.ext && "
     "openssl x509 -req -in leaf.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -extfile leaf.ext "
     "-outform DER -out leaf.der");
  AgentRun s = run_agent(
      {"sign", r.dir.string(), "--key", (r.tmp.path() / "leaf.key").string(), "--format", "oms"}, false);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  // Turn the key bundle into a certificate-chain bundle (the chain is not signed: the signature is).
  Json b = Json::parse(*read_file(r.dir / "model.sig"));
  b["verificationMaterial"].erase("publicKey");
  Json cert = {{"rawBytes", base64_encode(*read_file(r.tmp.path() / "leaf.der"))}};
  b["verificationMaterial"]["x509CertificateChain"]["certificates"] = Json::array({cert});
  ASSERT_TRUE(write_file_atomic(r.dir / "model.sig", b.dump(), 0644).ok());
  AgentRun v = run_agent(
      {"verify", r.dir.string(), "--format", "oms", "--ca-cert", (r.tmp.path() / "ca.crt").string()});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.report["signer"], "certificate CN=publisher");
  // Another CA does not vouch for it.
  sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout other.key -out other.crt "
     "-subj /CN=other -days 3650");
  AgentRun o = run_agent(
      {"verify", r.dir.string(), "--format", "oms", "--ca-cert", (r.tmp.path() / "other.crt").string()});
  EXPECT_EQ(o.exit_code, exit_code(Reason::kCertificateInvalid)) << o.err;
}

TEST(OmsCli, RefusesFlagsThatDoNotFitTheFormat) {
  testing::Release r = testing::make_release();
  auto usage = [&](std::vector<std::string> args) {
    AgentRun run = run_agent(args, false);
    EXPECT_EQ(run.exit_code, exit_code(Reason::kUsageError)) << run.err;
  };
  usage({"sign", r.dir.string(), "--key", r.key.string(), "--format", "oms", "--version", "3"});
  usage({"sign", r.dir.string(), "--key", r.key.string(), "--format", "oms", "--expires", "1d"});
  usage({"sign", r.dir.string(), "--key", r.key.string(), "--name", "x", "--version", "1", "--shard-size",
         "10"});
  usage({"sign", r.dir.string(), "--key", r.key.string(), "--name", "x"});
  usage({"sign", r.dir.string(), "--key", r.key.string(), "--format", "sigstore"});
  usage({"verify", r.dir.string(), "--public-key", r.pub.string(), "--format", "sigstore"});
  usage({"verify", r.dir.string(), "--public-key", r.pub.string(), "--identity", "a@b.c"});
  usage({"verify", r.dir.string()});
}

TEST(OmsCli, AskingForAVersionOfAnOmsReleaseIsPolicyUnsupported) {
  auto r = copy_oms_fixture("key-p256");
  AgentRun v = run_agent({"verify", r.dir.string(), "--format", "oms", "--public-key",
                          (oms_fixture("key-p256") / "key.pub.pem").string(), "--min-version", "3"});
  EXPECT_EQ(v.exit_code, exit_code(Reason::kPolicyUnsupported));
}

}  // namespace
}  // namespace infergate::agent
