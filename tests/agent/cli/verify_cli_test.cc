// `infergate-agent verify` on trees built to be wrong in one way each (shared/FAULTS.md: Manifest,
// Filesystem, Signatures): the exact exit code, the reason word in the report, and the file named.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent_test_util.h"
#include "infergate/common/manifest.h"

namespace infergate::agent {
namespace {

using testing::AgentRun;
using testing::make_release;
using testing::Release;
using testing::ReleaseSpec;
using testing::run_agent;
using testing::sign_raw;
using testing::write_file;
namespace fs = std::filesystem;

AgentRun verify(const Release& r, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"verify", r.dir.string(), "--public-key", r.pub.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_agent(args);
}

// The run refused with `code` and `reason`, reported consistently on stdout and in the report.
void expect_refused(const AgentRun& run, int code, const std::string& reason, const std::string& file = "") {
  EXPECT_EQ(run.exit_code, code) << run.err;
  EXPECT_EQ(run.reason(), reason) << run.report_text << run.err;
  EXPECT_EQ(run.report.value("exitCode", -1), code);
  EXPECT_EQ(run.out, run.report_text) << "stdout carries the same single line";
  if (!file.empty()) {
    EXPECT_EQ(run.report.value("file", ""), file) << run.report_text;
  }
}

std::string manifest_text(const Release& r) { return *read_file(r.dir / "SHA256SUMS"); }

// ---- a good release ----

TEST(VerifyCli, AcceptsAValidReleaseAndReportsItsDigest) {
  Release r = make_release();
  auto tmp = *TempDir::create("verify-cli");
  fs::path termination = tmp.path() / "termination-log";
  auto before = testing::snapshot(r.dir);
  AgentRun run = verify(r, {"--expect-name", "demo-model", "--min-version", "3", "--expect-weight-format",
                            "fp16", "--termination-log", termination.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.reason(), "Verified");
  EXPECT_EQ(run.report["releaseDigest"], "sha256:" + sha256(*read_file(r.dir / "release.dsse.json"))->hex());
  EXPECT_EQ(run.report["name"], "demo-model");
  EXPECT_EQ(run.report["version"], 3);
  EXPECT_EQ(run.report["weightFormat"], "fp16");
  EXPECT_EQ(run.report["files"], 5);
  EXPECT_EQ(run.out, run.report_text);
  EXPECT_EQ(*read_file(termination), run.report_text);
  EXPECT_EQ(testing::snapshot(r.dir), before) << "verify wrote into the artifact directory";
}

TEST(VerifyCli, AcceptsAnyOfSeveralKeysAndADirectoryOfKeys) {
  Release r = make_release();
  auto other = testing::make_key(r.tmp.path() / "other");
  AgentRun both = run_agent({"verify", r.dir.string(), "--public-key",
                             (r.tmp.path() / "other.pub.pem").string(), "--public-key", r.pub.string()});
  EXPECT_EQ(both.exit_code, 0) << both.err;
  fs::create_directories(r.tmp.path() / "keys");
  fs::copy_file(r.pub, r.tmp.path() / "keys/current.pem");
  fs::copy_file(r.tmp.path() / "other.pub.pem", r.tmp.path() / "keys/next.pem");
  AgentRun dir = run_agent({"verify", r.dir.string(), "--public-key", (r.tmp.path() / "keys").string()});
  EXPECT_EQ(dir.exit_code, 0) << dir.err;
}

// ---- Manifest ----

TEST(VerifyCli, RefusesOneByteFlippedInAShard) {
  Release r = make_release();
  std::string shard = *read_file(r.dir / "model-00002-of-00002.safetensors");
  std::string expected = sha256(shard)->hex();
  shard[shard.size() / 2] ^= 0x01;
  write_file(r.dir, "model-00002-of-00002.safetensors", shard);
  AgentRun run = verify(r);
  expect_refused(run, 33, "DigestMismatch", "model-00002-of-00002.safetensors");
  EXPECT_EQ(run.report["expected"], expected);
  EXPECT_EQ(run.report["actual"], sha256(shard)->hex());
}

TEST(VerifyCli, RefusesAListedFileThatIsAbsent) {
  Release r = make_release();
  fs::remove(r.dir / "extra/generation_config.json");
  expect_refused(verify(r), 30, "MissingFile", "extra/generation_config.json");
}

TEST(VerifyCli, RefusesAnUnlistedFileAnywhere) {
  Release r = make_release();
  write_file(r.dir, "model-00003-of-00002.safetensors", "an extra shard");
  expect_refused(verify(r), 31, "UnlistedFile", "model-00003-of-00002.safetensors");
  fs::remove(r.dir / "model-00003-of-00002.safetensors");
  write_file(r.dir, "extra/deep/chat_template.jinja", "{{ injected }}");
  expect_refused(verify(r), 31, "UnlistedFile", "extra/deep/chat_template.jinja");
}

TEST(VerifyCli, RefusesAManifestChangedAfterSigning) {
  Release r = make_release();
  write_file(r.dir, "SHA256SUMS", manifest_text(r) + sha256("x")->hex() + "  ./x\n");
  expect_refused(verify(r), 19, "ManifestDigestMismatch", "SHA256SUMS");
}

TEST(VerifyCli, RefusesOneMalformedLineAmongGoodOnesEvenWhenSigned) {
  Release r = make_release();
  sign_raw(r, manifest_text(r) + "not a checksum line\n");
  expect_refused(verify(r), 21, "ManifestMalformed");
  sign_raw(r, "garbage\n");
  expect_refused(verify(r), 21, "ManifestMalformed");
}

TEST(VerifyCli, RefusesBadDigestsWithoutOpeningTheNamedFile) {
  // The named file is a FIFO: opening it would be refused as SpecialFile (or block); a malformed
  // line is refused before the tree is touched at all.
  std::string good = sha256("x")->hex();
  std::string nonhex = good;
  nonhex[7] = 'z';
  for (const std::string& digest :
       {good.substr(1), good + "0", nonhex, good.substr(0, 10) + std::string(1, '\0') + good.substr(11)}) {
    Release r = make_release();
    ASSERT_EQ(::mkfifo((r.dir / "pipe").c_str(), 0644), 0);
    sign_raw(r, manifest_text(r) + digest + "  ./pipe\n", std::map<std::string, uint64_t>{});
    expect_refused(verify(r), 21, "ManifestMalformed");
  }
}

TEST(VerifyCli, RefusesTheSamePathListedTwice) {
  Release r = make_release();
  std::string line = sha256("other")->hex() + "  ./config.json\n";
  sign_raw(r, manifest_text(r) + line);
  expect_refused(verify(r), 23, "DuplicateEntry", "config.json");
  sign_raw(r, manifest_text(r) + manifest_text(r).substr(0, manifest_text(r).find('\n') + 1));
  expect_refused(verify(r), 23, "DuplicateEntry");
}

TEST(VerifyCli, RefusesUnsafePathsBeforeTouchingTheFilesystem) {
  for (std::string name : {"../x", "/etc/passwd", "a/../../b", "a//b"}) {
    Release r = make_release();
    sign_raw(r, manifest_text(r) + sha256("x")->hex() + "  " + name + "\n");
    expect_refused(verify(r), 24, "UnsafePath");
  }
}

TEST(VerifyCli, RefusesAManifestOverTheCapBeforeReadingIt) {
  Release r = make_release();
  write_file(r.dir, "SHA256SUMS", std::string(kMaxManifestBytes + 1, 'x'));
  expect_refused(verify(r), 22, "ManifestTooLarge", "SHA256SUMS");
}

TEST(VerifyCli, RefusesAManifestThatIsAbsent) {
  Release r = make_release();
  fs::remove(r.dir / "SHA256SUMS");
  expect_refused(verify(r), 20, "ManifestMissing", "SHA256SUMS");
}

// ---- Filesystem ----

TEST(VerifyCli, RefusesASymlinkEvenToASibling) {
  Release r = make_release();
  fs::create_symlink("config.json", r.dir / "config-link.json");
  expect_refused(verify(r), 34, "Symlink", "config-link.json");
}

TEST(VerifyCli, RefusesAListedShardReplacedByALinkToIdenticalBytes) {
  Release r = make_release();
  fs::rename(r.dir / "model-00001-of-00002.safetensors", r.tmp.path() / "elsewhere.safetensors");
  fs::create_symlink(r.tmp.path() / "elsewhere.safetensors", r.dir / "model-00001-of-00002.safetensors");
  expect_refused(verify(r), 34, "Symlink", "model-00001-of-00002.safetensors");
}

TEST(VerifyCli, RefusesASymlinkToASecret) {
  Release r = make_release();
  fs::create_symlink("/proc/self/environ", r.dir / "extra/environ");
  expect_refused(verify(r), 34, "Symlink", "extra/environ");
  fs::remove(r.dir / "extra/environ");
  fs::create_directory_symlink("/var/run", r.dir / "run");
  expect_refused(verify(r), 34, "Symlink", "run");
}

TEST(VerifyCli, RefusesARootThatIsASymlink) {
  Release r = make_release();
  fs::create_directory_symlink(r.dir, r.tmp.path() / "model-link");
  AgentRun run =
      run_agent({"verify", (r.tmp.path() / "model-link").string(), "--public-key", r.pub.string()});
  expect_refused(run, 34, "Symlink");
}

TEST(VerifyCli, RefusesAFifoWithoutBlocking) {
  Release r = make_release();
  ASSERT_EQ(::mkfifo((r.dir / "extra/fifo").c_str(), 0644), 0);
  expect_refused(verify(r), 35, "SpecialFile", "extra/fifo");
}

TEST(VerifyCli, RefusesAListedFileReplacedByAFifo) {
  Release r = make_release();
  fs::remove(r.dir / "tokenizer.json");
  ASSERT_EQ(::mkfifo((r.dir / "tokenizer.json").c_str(), 0644), 0);
  expect_refused(verify(r), 35, "SpecialFile", "tokenizer.json");
}

TEST(VerifyCli, RefusesASocketAndADeviceNode) {
  Release r = make_release();
  int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string p = (r.dir / "sock").string();
  ASSERT_LT(p.size(), sizeof addr.sun_path);
  std::strncpy(addr.sun_path, p.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ::close(s);
  expect_refused(verify(r), 35, "SpecialFile", "sock");
  fs::remove(r.dir / "sock");
  if (::mknod((r.dir / "zero").c_str(), S_IFCHR | 0644, makedev(1, 5)) != 0) {
    GTEST_SKIP() << "cannot create a device node here (needs CAP_MKNOD)";
  }
  expect_refused(verify(r), 35, "SpecialFile", "zero");
}

TEST(VerifyCli, RefusesATruncatedFileFromItsSizeAlone) {
  Release r = make_release();
  fs::resize_file(r.dir / "model-00001-of-00002.safetensors", 100);
  AgentRun run = verify(r);
  expect_refused(run, 32, "SizeMismatch", "model-00001-of-00002.safetensors");
  EXPECT_EQ(run.report["actual"], "100");
}

TEST(VerifyCli, RefusesAnUnreadableFileAsPermissionDenied) {
  Release r = make_release();
  ::chmod(r.tmp.path().c_str(), 0755);
  for (auto it = fs::recursive_directory_iterator(r.tmp.path()); it != fs::recursive_directory_iterator();
       ++it) {
    ::chmod(it->path().c_str(), it->is_directory() ? 0755 : 0644);
  }
  ::chmod((r.dir / "tokenizer.json").c_str(), 0000);
  std::vector<std::string> wrapper;
  if (::geteuid() == 0) {
    // root reads anything: run the agent as nobody, as a pod's non-root user would.
    wrapper = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"};
  }
  AgentRun run = run_agent({"verify", r.dir.string(), "--public-key", r.pub.string()}, true, wrapper);
  expect_refused(run, 41, "PermissionDenied", "tokenizer.json");
}

// A disk that fails under one shard (faults/eio_preload.cc fakes it: there is no device-mapper here).
// `mode` is how the failure shows: "read" (read(2) fails with EIO after the file system refused to map
// it) or "map" (SIGBUS on a mapped page whose file kept its size, as the kernel signals an unreadable
// page). Either way the verdict is IoError naming the file, never FileChanged and never a crash.
AgentRun verify_with_failing_disk(const Release& r, const std::string& file, const std::string& mode) {
  return run_agent({"verify", r.dir.string(), "--public-key", r.pub.string()}, true,
                   {"env", std::string("LD_PRELOAD=") + INFERGATE_EIO_PRELOAD, "INFERGATE_EIO_FILE=" + file,
                    "INFERGATE_EIO_MODE=" + mode});
}

bool sanitized_build() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

TEST(VerifyCli, RefusesAShardWhoseReadsFailWithEio) {
  if (sanitized_build()) GTEST_SKIP() << "the sanitizer runtime's own read/mmap come before LD_PRELOAD";
  Release r = make_release();
  AgentRun run = verify_with_failing_disk(r, "model-00002-of-00002.safetensors", "read");
  expect_refused(run, 40, "IoError", "model-00002-of-00002.safetensors");
  EXPECT_NE(run.report.value("message", "").find("Input/output error"), std::string::npos) << run.report_text;
}

TEST(VerifyCli, RefusesAShardWhoseMappedPagesCannotBeReadAsIoErrorNotAsAChange) {
  if (sanitized_build()) GTEST_SKIP() << "the sanitizer runtime's own read/mmap come before LD_PRELOAD";
  Release r = make_release();
  AgentRun run = verify_with_failing_disk(r, "model-00001-of-00002.safetensors", "map");
  expect_refused(run, 40, "IoError", "model-00001-of-00002.safetensors");
}

TEST(VerifyCli, RefusesAManifestThatCannotBeRead) {
  if (sanitized_build()) GTEST_SKIP() << "the sanitizer runtime's own read/mmap come before LD_PRELOAD";
  Release r = make_release();
  AgentRun run = verify_with_failing_disk(r, "SHA256SUMS", "read");
  EXPECT_EQ(run.exit_code, 40) << run.report_text << run.err;
  EXPECT_EQ(run.reason(), "IoError") << run.report_text;
}

TEST(VerifyCli, RefusesADirectoryHoldingOnlyTheManifestAndSignature) {
  Release r = make_release();
  for (const auto& [path, content] : testing::default_model_files()) fs::remove(r.dir / path);
  fs::remove(r.dir / "extra");
  sign_raw(r, "", std::map<std::string, uint64_t>{});
  expect_refused(verify(r), 25, "EmptyRelease");
}

TEST(VerifyCli, RefusesAMissingArtifactDirectory) {
  Release r = make_release();
  AgentRun run = run_agent({"verify", (r.tmp.path() / "absent").string(), "--public-key", r.pub.string()});
  expect_refused(run, 4, "ArtifactDirInvalid");
}

TEST(VerifyCli, NeverWritesIntoTheArtifactDirectoryEvenWhenAskedTo) {
  Release r = make_release();
  auto before = testing::snapshot(r.dir);
  AgentRun run = run_agent({"verify", r.dir.string(), "--public-key", r.pub.string(), "--report",
                            (r.dir / "report.json").string()},
                           false);
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(testing::snapshot(r.dir), before);
  fs::resize_file(r.dir / "tokenizer.json", 1);
  before = testing::snapshot(r.dir);
  EXPECT_EQ(verify(r).exit_code, 32);
  EXPECT_EQ(testing::snapshot(r.dir), before);
}

// ---- Signatures and release metadata ----

TEST(VerifyCli, RefusesAMissingSignature) {
  Release r = make_release();
  fs::remove(r.dir / "release.dsse.json");
  expect_refused(verify(r), 10, "SignatureMissing", "release.dsse.json");
}

TEST(VerifyCli, RefusesAValidSignatureOverADifferentManifest) {
  Release r = make_release();
  ReleaseSpec other_spec;
  other_spec.files["tokenizer.json"] = "another release's tokenizer";
  Release other = make_release(other_spec);
  fs::copy_file(other.dir / "release.dsse.json", r.dir / "release.dsse.json",
                fs::copy_options::overwrite_existing);
  AgentRun run = run_agent({"verify", r.dir.string(), "--public-key", other.pub.string()});
  expect_refused(run, 19, "ManifestDigestMismatch", "SHA256SUMS");
}

TEST(VerifyCli, RefusesAKeyThatIsNotTrusted) {
  Release r = make_release();
  testing::make_key(r.tmp.path() / "stranger");
  AgentRun run =
      run_agent({"verify", r.dir.string(), "--public-key", (r.tmp.path() / "stranger.pub.pem").string()});
  expect_refused(run, 13, "UntrustedKey");
}

TEST(VerifyCli, RefusesMalformedSignatureFilesWithoutCrashing) {
  Release r = make_release();
  std::string good = *read_file(r.dir / "release.dsse.json");
  std::string wrong_type = good;
  wrong_type.replace(wrong_type.find("application/vnd.in-toto+json"), 28, "application/vnd.other+jsonx");
  for (const std::string& bad : {std::string(), good.substr(0, good.size() / 2),
                                 std::string("{\"payloadType\":\"x\",\"payload\":\"***\"}"),
                                 *read_file(r.pub), std::string("{not json"), wrong_type}) {
    write_file(r.dir, "release.dsse.json", bad);
    expect_refused(verify(r), 11, "SignatureMalformed");
  }
}

TEST(VerifyCli, RefusesAnAlteredSignature) {
  Release r = make_release();
  auto env = *parse_json(*read_file(r.dir / "release.dsse.json"), "envelope");
  std::string sig = env["signatures"][0]["sig"];
  sig[0] = sig[0] == 'A' ? 'B' : 'A';
  env["signatures"][0]["sig"] = sig;
  write_file(r.dir, "release.dsse.json", env.dump());
  expect_refused(verify(r), 12, "SignatureInvalid");
}

TEST(VerifyCli, RefusesAnExpiredStatement) {
  FakeClock past(*parse_rfc3339("2020-01-01T00:00:00Z"));
  ReleaseSpec spec;
  spec.clock = &past;
  spec.expires_in = std::chrono::hours(1);
  Release r = make_release(spec);
  AgentRun run = verify(r);
  expect_refused(run, 17, "ReleaseExpired");
}

TEST(VerifyCli, RefusesAVersionBelowTheMinimum) {
  Release r = make_release();
  AgentRun run = verify(r, {"--min-version", "4"});
  expect_refused(run, 16, "VersionTooLow");
  EXPECT_EQ(run.report["actual"], "3");
}

TEST(VerifyCli, RefusesAnotherModelNameOrWeightFormat) {
  Release r = make_release();
  expect_refused(verify(r, {"--expect-name", "other-model"}), 15, "NameMismatch");
  AgentRun run = verify(r, {"--expect-weight-format", "int8"});
  expect_refused(run, 18, "WeightFormatMismatch");
  EXPECT_EQ(run.report["expected"], "int8");
  EXPECT_EQ(run.report["actual"], "fp16");
}

TEST(VerifyCli, RefusesShardsOfOneReleaseWithTheManifestAndSignatureOfAnother) {
  // v1 and v2 differ in one shard (same size); v1's shards with v2's manifest and signature.
  ReleaseSpec v1_spec;
  Release v1 = make_release(v1_spec);
  ReleaseSpec v2_spec;
  v2_spec.version = 4;
  v2_spec.files["model-00002-of-00002.safetensors"] = testing::default_shard(2, 9);
  Release v2 = make_release(v2_spec);
  for (const char* f : {"SHA256SUMS", "release.dsse.json"}) {
    fs::copy_file(v2.dir / f, v1.dir / f, fs::copy_options::overwrite_existing);
  }
  AgentRun run =
      run_agent({"verify", v1.dir.string(), "--public-key", v2.pub.string(), "--min-version", "4"});
  expect_refused(run, 33, "DigestMismatch", "model-00002-of-00002.safetensors");
}

// ---- Command line and keys ----

TEST(VerifyCli, RefusesABadPublicKeyFile) {
  Release r = make_release();
  write_file(r.tmp.path(), "bad.pem", "not a key");
  AgentRun run = run_agent({"verify", r.dir.string(), "--public-key", (r.tmp.path() / "bad.pem").string()});
  expect_refused(run, 3, "KeyInvalid");
}

TEST(VerifyCli, ReportsUsageErrorsToTheTerminationLog) {
  Release r = make_release();
  fs::path log = r.tmp.path() / "termination-log";
  AgentRun run = run_agent({"verify", r.dir.string(), "--public-key", r.pub.string(), "--min-version", "abc",
                            "--termination-log", log.string()});
  EXPECT_EQ(run.exit_code, 2);
  auto j = parse_json(*read_file(log), "log");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["reason"], "UsageError");
  EXPECT_EQ((*j)["exitCode"], 2);
  EXPECT_EQ(run_agent({"verify", r.dir.string()}).exit_code, 2)
      << "no --public-key: there is no unsigned mode";
  EXPECT_EQ(run_agent({"frobnicate"}).exit_code, 2);
  EXPECT_EQ(run_agent({}).exit_code, 2);
}

}  // namespace
}  // namespace infergate::agent
