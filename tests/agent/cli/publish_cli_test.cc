// The publisher's commands through the binary: `manifest` against the real coreutils pipeline,
// manifests written by sha256sum accepted by `sign` and `verify`, `keygen` files, and signatures
// checked by the openssl command-line tool, independently of our code.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_test_util.h"
#include "infergate/common/subprocess.h"

namespace infergate::agent {
namespace {

using testing::AgentRun;
using testing::run_agent;
using testing::write_file;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

CommandResult sh(const std::string& script, const fs::path& cwd = {}) {
  auto r = run_command({"/bin/sh", "-c", script}, 60s, {{"LC_ALL", "C"}}, cwd);
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return r.ok() ? *r : CommandResult{};
}

struct Workspace {
  TempDir tmp = *TempDir::create("publish-cli");
  fs::path dir = tmp.path() / "model";
  fs::path key = tmp.path() / "release";
  Workspace() { fs::create_directories(dir); }
  void awkward_tree() {
    for (const auto& [p, c] : testing::default_model_files()) write_file(dir, p, c);
    write_file(dir, "with space.txt", "s");
    write_file(dir, "back\\slash", "b");
    write_file(dir, "new\nline", "n");
    write_file(dir, "carriage\rreturn", "r");
    write_file(dir, ".hidden/.dot", "h");
    write_file(dir, "-starts-with-dash", "d");
    write_file(dir, "\xc3\xa9t\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac.json", "{}");
    write_file(dir, "empty", "");
    write_file(dir, "a/b/c/deep.bin", std::string(300000, 'z'));
    write_file(dir, "a-b", "sorts before a/ in byte order");
    write_file(dir, "sub/release.dsse.json", "a nested file of that name is an ordinary file");
  }
};

TEST(ManifestCli, WritesExactlyWhatTheCoreutilsPipelinePrints) {
  Workspace w;
  w.awkward_tree();
  AgentRun run = run_agent({"manifest", w.dir.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto reference =
      sh("find . -type f ! -name SHA256SUMS ! -path ./release.dsse.json -print0 | sort -z | "
         "xargs -0 sha256sum",
         w.dir);
  ASSERT_TRUE(reference.status.success()) << reference.err;
  EXPECT_EQ(*read_file(w.dir / "SHA256SUMS"), reference.out);
  auto check = sh("sha256sum --strict --check SHA256SUMS", w.dir);
  EXPECT_TRUE(check.status.success()) << check.out << check.err;
}

TEST(ManifestCli, LeavesReleaseDsseJsonOutLikeSha256sums) {
  Workspace w;
  write_file(w.dir, "a", "1");
  write_file(w.dir, "release.dsse.json", "{}");
  write_file(w.dir, "SHA256SUMS", "stale");
  ASSERT_EQ(run_agent({"manifest", w.dir.string()}).exit_code, 0);
  EXPECT_EQ(*read_file(w.dir / "SHA256SUMS"), sha256("1")->hex() + "  ./a\n");
}

TEST(ManifestCli, RefusesTreesItCouldNeverVerify) {
  Workspace w;
  write_file(w.dir, "a", "1");
  fs::create_symlink("a", w.dir / "link");
  AgentRun run = run_agent({"manifest", w.dir.string()});
  EXPECT_EQ(run.exit_code, 34) << run.err;
  EXPECT_FALSE(fs::exists(w.dir / "SHA256SUMS"));
  fs::remove(w.dir / "link");
  ASSERT_EQ(::mkfifo((w.dir / "fifo").c_str(), 0644), 0);
  EXPECT_EQ(run_agent({"manifest", w.dir.string()}).exit_code, 35);
  fs::remove(w.dir / "fifo");
  write_file(w.dir, "sub/SHA256SUMS", "x");
  EXPECT_EQ(run_agent({"manifest", w.dir.string()}).exit_code, 31);
  fs::remove(w.dir / "sub/SHA256SUMS");
  write_file(w.dir, "latin1-caf\xe9", "a name that JSON cannot carry");
  EXPECT_EQ(run_agent({"manifest", w.dir.string()}).exit_code, 24);
  Workspace empty;
  EXPECT_EQ(run_agent({"manifest", empty.dir.string()}).exit_code, 25);
}

// Signs with the binary and verifies with the binary; returns verify's run.
AgentRun sign_and_verify(Workspace& w, std::vector<std::string> sign_extra = {}) {
  if (!fs::exists(w.key.string() + ".key")) {
    EXPECT_EQ(run_agent({"keygen", "--out", w.key.string()}).exit_code, 0);
  }
  std::vector<std::string> sign = {"sign", w.dir.string(), "--key", w.key.string() + ".key", "--name",
                                   "m",    "--version",    "1"};
  sign.insert(sign.end(), sign_extra.begin(), sign_extra.end());
  AgentRun s = run_agent(sign);
  EXPECT_EQ(s.exit_code, 0) << s.err;
  return run_agent({"verify", w.dir.string(), "--public-key", w.key.string() + ".pub.pem"});
}

TEST(SignCli, AcceptsManifestsWrittenBySha256sumInEveryForm) {
  for (std::string cmd :
       {"sha256sum -b -- * > ../SHA256SUMS.tmp", "sha256sum --tag -- * > ../SHA256SUMS.tmp",
        "sha256sum -- ./* > ../SHA256SUMS.tmp", "sha256sum -- * | sed 's/$/\\r/' > ../SHA256SUMS.tmp"}) {
    Workspace w;
    write_file(w.dir, "config.json", R"({"torch_dtype":"bfloat16"})");
    write_file(w.dir, "weights.bin", std::string(5000, 'w'));
    write_file(w.dir, "odd\\name", "x");
    auto made = sh(cmd + " && mv ../SHA256SUMS.tmp SHA256SUMS", w.dir);
    ASSERT_TRUE(made.status.success()) << cmd << made.err;
    AgentRun v = sign_and_verify(w);
    EXPECT_EQ(v.exit_code, 0) << cmd << "\n" << *read_file(w.dir / "SHA256SUMS") << v.err;
    EXPECT_EQ(v.report.value("weightFormat", ""), "bf16");
  }
}

TEST(SignCli, RefusesToSignATreeThatDoesNotMatchItsManifest) {
  Workspace w;
  write_file(w.dir, "a.safetensors", testing::safetensors_bytes("BF16", 100, 2));
  ASSERT_EQ(run_agent({"manifest", w.dir.string()}).exit_code, 0);
  write_file(w.dir, "b", "added later");
  ASSERT_EQ(run_agent({"keygen", "--out", w.key.string()}).exit_code, 0);
  AgentRun s =
      run_agent({"sign", w.dir.string(), "--key", w.key.string() + ".key", "--name", "m", "--version", "1"});
  EXPECT_EQ(s.exit_code, 31) << s.err;
  EXPECT_FALSE(fs::exists(w.dir / "release.dsse.json"));
}

TEST(SignCli, RefusesBadFlags) {
  Workspace w;
  write_file(w.dir, "a", "1");
  ASSERT_EQ(run_agent({"manifest", w.dir.string()}).exit_code, 0);
  ASSERT_EQ(run_agent({"keygen", "--out", w.key.string()}).exit_code, 0);
  std::string key = w.key.string() + ".key";
  EXPECT_EQ(run_agent({"sign", w.dir.string(), "--key", key, "--name", "m", "--version", "-1"}).exit_code, 2);
  EXPECT_EQ(run_agent({"sign", w.dir.string(), "--key", key, "--name", "m", "--version", "x"}).exit_code, 2);
  EXPECT_EQ(run_agent({"sign", w.dir.string(), "--key", key, "--name", "m", "--version", "1", "--expires",
                       "soon", "--weight-format", "int8"})
                .exit_code,
            2);
  EXPECT_EQ(run_agent({"sign", w.dir.string(), "--key", key, "--name", "bad name", "--version", "1",
                       "--weight-format", "int8"})
                .exit_code,
            2);
  EXPECT_EQ(run_agent({"sign", w.dir.string(), "--key", key, "--name", "m", "--version", "1"}).exit_code, 5)
      << "no metadata says the weight format and none was given";
  EXPECT_EQ(run_agent({"sign", w.dir.string(), "--key", w.dir.string() + "/a", "--name", "m", "--version",
                       "1", "--weight-format", "int8"})
                .exit_code,
            3);
}

TEST(KeygenCli, WritesAPrivateKeyOnlyItsOwnerCanReadAndNeverOverwrites) {
  Workspace w;
  ASSERT_EQ(run_agent({"keygen", "--out", w.key.string()}).exit_code, 0);
  struct stat st {};
  ASSERT_EQ(::stat((w.key.string() + ".key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto text = sh("openssl pkey -in " + w.key.string() + ".key -noout -text");
  EXPECT_NE(text.out.find("ED25519"), std::string::npos) << text.out << text.err;
  std::string before = *read_file(w.key.string() + ".key");
  EXPECT_EQ(run_agent({"keygen", "--out", w.key.string()}).exit_code, 2);
  EXPECT_EQ(*read_file(w.key.string() + ".key"), before);
  ASSERT_EQ(run_agent({"keygen", "--out", w.key.string() + "-ec", "--type", "ecdsa-p256"}).exit_code, 0);
  auto ec = sh("openssl pkey -pubin -in " + w.key.string() + "-ec.pub.pem -noout -text");
  EXPECT_NE(ec.out.find("prime256v1"), std::string::npos) << ec.out << ec.err;
  EXPECT_EQ(run_agent({"keygen", "--out", w.key.string() + "-rsa", "--type", "rsa"}).exit_code, 2);
}

// Rebuilds the DSSE pre-authentication encoding and the raw signature from release.dsse.json with
// Debian's Python (json, base64), not with our code.
void extract_pae_and_sig(const fs::path& envelope, const fs::path& pae, const fs::path& sig) {
  std::string script =
      "import base64, json, sys\n"
      "e = json.load(open(sys.argv[1]))\n"
      "t = e['payloadType'].encode(); b = base64.b64decode(e['payload'])\n"
      "open(sys.argv[2], 'wb').write(b'DSSEv1 %d %s %d %s' % (len(t), t, len(b), b))\n"
      "open(sys.argv[3], 'wb').write(base64.b64decode(e['signatures'][0]['sig']))\n";
  auto r =
      run_command({"/usr/bin/python3", "-c", script, envelope.string(), pae.string(), sig.string()}, 60s);
  ASSERT_TRUE(r.ok() && r->status.success()) << (r.ok() ? r->err : r.error().to_string());
}

TEST(SignCli, WritesAnEd25519SignatureThatOpensslVerifies) {
  Workspace w;
  w.awkward_tree();
  ASSERT_EQ(run_agent({"manifest", w.dir.string()}).exit_code, 0);
  ASSERT_EQ(sign_and_verify(w).exit_code, 0);
  fs::path pae = w.tmp.path() / "pae.bin", sig = w.tmp.path() / "sig.bin";
  extract_pae_and_sig(w.dir / "release.dsse.json", pae, sig);
  auto ok = sh("openssl pkeyutl -verify -pubin -inkey " + w.key.string() + ".pub.pem -rawin -in " +
               pae.string() + " -sigfile " + sig.string());
  EXPECT_TRUE(ok.status.success()) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("Signature Verified Successfully"), std::string::npos);
  // And the statement inside covers SHA256SUMS as it is on disk.
  auto digest =
      sh("python3 -c \"import json,sys; p=open(sys.argv[1],'rb').read().split(b' ',4)[4]; "
         "print(json.loads(p)['subject'][0]['digest']['sha256'])\" " +
             pae.string() + " && sha256sum SHA256SUMS | cut -c1-64",
         w.dir);
  auto lines = digest.out;
  ASSERT_EQ(lines.size(), 130u) << lines << digest.err;
  EXPECT_EQ(lines.substr(0, 64), lines.substr(65, 64));
  // A flipped byte in the encoding is refused by openssl too.
  auto pae_bytes = *read_file(pae);
  pae_bytes[pae_bytes.size() / 2] ^= 1;
  ASSERT_TRUE(write_file_atomic(pae, pae_bytes).ok());
  auto bad = sh("openssl pkeyutl -verify -pubin -inkey " + w.key.string() + ".pub.pem -rawin -in " +
                pae.string() + " -sigfile " + sig.string());
  EXPECT_FALSE(bad.status.success());
}

TEST(SignCli, WritesAnEcdsaP256SignatureThatOpensslVerifies) {
  Workspace w;
  for (const auto& [path, content] : testing::ours_int8_files()) write_file(w.dir, path, content);
  ASSERT_EQ(run_agent({"manifest", w.dir.string()}).exit_code, 0);
  ASSERT_EQ(run_agent({"keygen", "--out", w.key.string(), "--type", "ecdsa-p256"}).exit_code, 0);
  AgentRun v = sign_and_verify(w, {"--expires", "30d"});
  ASSERT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.report["weightFormat"], "int8");
  EXPECT_TRUE(v.report.contains("expiresAt"));
  fs::path pae = w.tmp.path() / "pae.bin", sig = w.tmp.path() / "sig.bin";
  extract_pae_and_sig(w.dir / "release.dsse.json", pae, sig);
  auto ok = sh("openssl dgst -sha256 -verify " + w.key.string() + ".pub.pem -signature " + sig.string() +
               " " + pae.string());
  EXPECT_TRUE(ok.status.success()) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("Verified OK"), std::string::npos);
}

// A published release is signed as it is published: its word comes from the weights description,
// with no --weight-format, and verify --expect-weight-format compares the same word.
TEST(SignCli, SignsPublishedReleasesWithTheirOwnFormatWord) {
  for (const auto& [files, word] : std::vector<std::pair<std::map<std::string, std::string>, std::string>>{
           {testing::kimi_thinking_files(), "int4-ct-g32-sym"},
           {testing::deepseek_fp8_files(), "fp8-block"}}) {
    Workspace w;
    for (const auto& [path, content] : files) write_file(w.dir, path, content);
    ASSERT_EQ(run_agent({"manifest", w.dir.string()}).exit_code, 0);
    AgentRun v = sign_and_verify(w);
    ASSERT_EQ(v.exit_code, 0) << v.err;
    EXPECT_EQ(v.report["weightFormat"], word);
    const std::string pub = w.key.string() + ".pub.pem";
    EXPECT_EQ(
        run_agent({"verify", w.dir.string(), "--public-key", pub, "--expect-weight-format", word}).exit_code,
        0);
    AgentRun other =
        run_agent({"verify", w.dir.string(), "--public-key", pub, "--expect-weight-format", "int4"});
    EXPECT_EQ(other.exit_code, 18) << other.err;
    // A --weight-format that contradicts the description is refused.
    AgentRun wrong = run_agent({"sign", w.dir.string(), "--key", w.key.string() + ".key", "--name", "m",
                                "--version", "2", "--weight-format", "bf16"});
    EXPECT_EQ(wrong.exit_code, 5) << wrong.err;
  }
}

TEST(SignCli, RefusesWeightsThatDisagreeWithTheirConfigNamingTheTensor) {
  Workspace w;
  const std::string scale = "model.layers.1.mlp.experts.0.up_proj.weight_scale";
  for (const auto& [path, content] : testing::kimi_thinking_files([&](std::vector<testing::TensorBytes>& t) {
         std::erase_if(t, [&](const testing::TensorBytes& x) { return x.name == scale; });
       })) {
    write_file(w.dir, path, content);
  }
  ASSERT_EQ(run_agent({"manifest", w.dir.string()}).exit_code, 0);
  ASSERT_EQ(run_agent({"keygen", "--out", w.key.string()}).exit_code, 0);
  AgentRun s =
      run_agent({"sign", w.dir.string(), "--key", w.key.string() + ".key", "--name", "m", "--version", "1"});
  EXPECT_EQ(s.exit_code, 6) << s.err;
  EXPECT_NE(s.err.find(scale), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("MissingQuantPart"), std::string::npos) << s.err;
  EXPECT_FALSE(fs::exists(w.dir / "release.dsse.json"));
}

// Statements signed before the description decided the word keep verifying, words and all, although
// sign would now refuse those artifacts (tests/agent/fixtures/pre-description).
TEST(VerifyCli, StatementsSignedBeforeTheDescriptionKeepVerifying) {
  for (const auto& [name, word] :
       std::vector<std::pair<std::string, std::string>>{{"int4-fake", "int4"}, {"fp8-dtype", "fp8_e4m3"}}) {
    Workspace w;
    fs::copy(testing::pre_description_fixture(name), w.dir,
             fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    const std::string pub = testing::pre_description_fixture("key.pub.pem").string();
    AgentRun v = run_agent({"verify", w.dir.string(), "--public-key", pub, "--expect-weight-format", word});
    EXPECT_EQ(v.exit_code, 0) << name << ": " << v.err;
    EXPECT_EQ(v.report.value("weightFormat", ""), word);
  }
}

}  // namespace
}  // namespace infergate::agent
