// `verify --install-agent DIR`: the init container copies a self-contained agent into a shared volume,
// and the engine container runs it as `DIR/lib/ld.so --library-path DIR/lib DIR/bin/infergate-agent
// exec ...` without our LD_LIBRARY_PATH; it re-verifies on every start and never leaks our libraries.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <sstream>

#include "agent_test_util.h"
#include "infergate/common/subprocess.h"

namespace infergate::agent {
namespace {

using testing::AgentRun;
using testing::make_release;
using testing::Release;
using testing::run_agent;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

AgentRun verify_installing(const Release& r, const fs::path& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"verify",       r.dir.string(),    "--public-key",
                                   r.pub.string(), "--install-agent", dir.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_agent(args);
}

// An empty directory standing for the pod's shared emptyDir.
struct Shared {
  TempDir tmp = *TempDir::create("install-cli");
  fs::path dir = tmp.path() / "agent";
  Shared() { fs::create_directory(dir); }
};

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

struct InstalledRun {
  ExitStatus status;
  std::string out, err;
  Json report;
};

// Runs the installed agent as the engine container does: through its own loader, with exactly `env`
// (no LD_LIBRARY_PATH among it unless given).
InstalledRun run_installed(const fs::path& dir, std::vector<std::string> args,
                           const std::map<std::string, std::string>& env) {
  InstalledRun run;
  auto scratch = *TempDir::create("installed-run");
  fs::path report = scratch.path() / "report.json";
  auto dash = std::find(args.begin(), args.end(), "--");
  dash = args.insert(dash, report.string());
  args.insert(dash, "--report");
  SpawnOptions o;
  o.argv = {(dir / "lib/ld.so").string(), "--library-path", (dir / "lib").string(),
            (dir / "bin/infergate-agent").string()};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.clear_env = true;
  o.env = env;
  o.stdout_file = scratch.path() / "out";
  o.stderr_file = scratch.path() / "err";
  auto p = Subprocess::spawn(o);
  EXPECT_TRUE(p.ok()) << p.error().to_string();
  if (!p.ok()) return run;
  auto st = p->wait_for(60s);
  EXPECT_TRUE(st.has_value()) << "the installed agent did not finish within 60 s";
  if (!st) return run;
  run.status = *st;
  run.out = read_file(o.stdout_file).value_or("");
  run.err = read_file(o.stderr_file).value_or("");
  if (auto text = read_file(report); text.ok()) run.report = parse_json(*text, "report").value_or(Json());
  return run;
}

std::vector<std::string> exec_args(const Release& r, std::vector<std::string> command) {
  std::vector<std::string> a = {"exec", r.dir.string(), "--public-key", r.pub.string(), "--"};
  a.insert(a.end(), command.begin(), command.end());
  return a;
}

TEST(InstallCli, InstallsASelfContainedAgentAfterVerifying) {
  Release r = make_release();
  Shared shared;
  AgentRun run = verify_installing(r, shared.dir);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.reason(), "Verified");
  EXPECT_EQ(run.out, run.report_text) << "one report line, after the install";

  EXPECT_EQ(*read_file(shared.dir / "bin/infergate-agent", 1u << 30),
            *read_file(INFERGATE_AGENT_BIN, 1u << 30));
  ASSERT_TRUE(fs::exists(shared.dir / "lib/ld.so"));
  EXPECT_TRUE(fs::exists(shared.dir / "lib/libc.so.6")) << "named by SONAME, as the loader looks for it";
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(shared.dir)) {
    struct stat st {};
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
    if (S_ISDIR(st.st_mode)) continue;
    ++files;
    EXPECT_TRUE(S_ISREG(st.st_mode)) << e.path();
    EXPECT_EQ(st.st_mode & 07777, 0555u) << e.path();
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "left behind: " << e.path();
  }
  EXPECT_GE(files, 4u);

  // Every library the installed agent needs resolves inside DIR/lib.
  auto list =
      run_command({(shared.dir / "lib/ld.so").string(), "--library-path", (shared.dir / "lib").string(),
                   "--list", (shared.dir / "bin/infergate-agent").string()},
                  30s, {}, {}, 1u << 20);
  ASSERT_TRUE(list.ok());
  ASSERT_TRUE(list->status.success()) << list->err;
  size_t resolved = 0;
  for (const auto& line : lines(list->out)) {
    size_t arrow = line.find("=> ");
    if (arrow == std::string::npos) continue;
    ++resolved;
    EXPECT_EQ(line.find((shared.dir / "lib").string() + "/", arrow), arrow + 3) << line;
  }
  EXPECT_GE(resolved, 2u) << list->out;

  // An init container that restarts installs again over the same volume.
  AgentRun again = verify_installing(r, shared.dir);
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

TEST(InstallCli, TheInstalledAgentExecsTheEngineWithTheWrappersEnvironment) {
  Release r = make_release();
  Shared shared;
  ASSERT_EQ(verify_installing(r, shared.dir).exit_code, 0);
  std::map<std::string, std::string> env = {{"PATH", "/usr/bin:/bin"}, {"ENGINE_SETTING", "a b"}};
  InstalledRun run = run_installed(shared.dir, exec_args(r, {"/bin/sh", "-c", "echo ok; /usr/bin/env"}), env);
  EXPECT_TRUE(run.status.success()) << run.status.describe() << run.err;
  EXPECT_EQ(run.report.value("reason", ""), "Verified");
  auto out = lines(run.out);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out[0], "ok");
  EXPECT_EQ(run.out.find("LD_LIBRARY_PATH"), std::string::npos) << run.out;

  // The engine's environment is the wrapper's, variable for variable.
  InstalledRun plain = run_installed(shared.dir, exec_args(r, {"/usr/bin/env"}), env);
  ASSERT_TRUE(plain.status.success()) << plain.status.describe() << plain.err;
  auto vars = lines(plain.out);
  std::sort(vars.begin(), vars.end());
  EXPECT_EQ(vars, (std::vector<std::string>{"ENGINE_SETTING=a b", "PATH=/usr/bin:/bin"}));
}

TEST(InstallCli, TheInstalledAgentRefusesATreeTamperedWithBeforeARestart) {
  Release r = make_release();
  Shared shared;
  ASSERT_EQ(verify_installing(r, shared.dir).exit_code, 0);
  std::string shard = *read_file(r.dir / "model-00002-of-00002.safetensors");
  shard[shard.size() - 1] ^= 1;  // same size: only the digest can tell
  testing::write_file(r.dir, "model-00002-of-00002.safetensors", shard);
  fs::path marker = shared.tmp.path() / "engine-started";
  InstalledRun run = run_installed(shared.dir, exec_args(r, {"/bin/sh", "-c", "touch " + marker.string()}),
                                   {{"PATH", "/usr/bin:/bin"}});
  EXPECT_EQ(run.status.code, 33) << run.status.describe() << run.err;
  EXPECT_EQ(run.report.value("reason", ""), "DigestMismatch");
  EXPECT_EQ(run.report.value("file", ""), "model-00002-of-00002.safetensors");
  EXPECT_FALSE(fs::exists(marker)) << "the engine must never start on a tampered tree";
  EXPECT_EQ(run.out, "");
}

TEST(InstallCli, TheInstalledAgentStartedThroughItsLoaderInstallsTheSameAgent) {
  // Run by ld.so, /proc/self/exe is the loader: the agent must still copy itself, not the loader.
  Release r = make_release();
  Shared shared;
  ASSERT_EQ(verify_installing(r, shared.dir).exit_code, 0);
  fs::path second = shared.tmp.path() / "second";
  fs::create_directory(second);
  InstalledRun run = run_installed(
      shared.dir,
      {"verify", r.dir.string(), "--public-key", r.pub.string(), "--install-agent", second.string()}, {});
  ASSERT_TRUE(run.status.success()) << run.status.describe() << run.err;
  for (const char* file : {"bin/infergate-agent", "lib/ld.so", "lib/libc.so.6"}) {
    EXPECT_EQ(*read_file(second / file, 1u << 30), *read_file(shared.dir / file, 1u << 30)) << file;
  }
}

TEST(InstallCli, RefusesAnInstallDirectoryThatIsMissingOrNotADirectory) {
  Release r = make_release();
  Shared shared;
  AgentRun missing = verify_installing(r, shared.tmp.path() / "absent");
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_EQ(missing.reason(), "UsageError");
  EXPECT_NE(missing.report.value("message", "").find("absent"), std::string::npos) << missing.report_text;
  EXPECT_FALSE(fs::exists(shared.tmp.path() / "absent"));

  testing::write_file(shared.tmp.path(), "a-file", "x");
  AgentRun file = verify_installing(r, shared.tmp.path() / "a-file");
  EXPECT_EQ(file.exit_code, 2) << file.err;
  EXPECT_NE(file.report.value("message", "").find("not a directory"), std::string::npos) << file.report_text;

  AgentRun in_artifact = verify_installing(r, r.dir / "extra");
  EXPECT_EQ(in_artifact.exit_code, 2) << in_artifact.err;
  EXPECT_NE(in_artifact.report.value("message", "").find("inside the artifact directory"), std::string::npos);
}

TEST(InstallCli, InstallsNothingWhenVerificationFails) {
  Release r = make_release();
  Shared shared;
  std::string tok = *read_file(r.dir / "tokenizer.json");
  tok[1] ^= 1;
  testing::write_file(r.dir, "tokenizer.json", tok);
  AgentRun run = verify_installing(r, shared.dir);
  EXPECT_EQ(run.exit_code, 33);
  EXPECT_EQ(run.reason(), "DigestMismatch");
  EXPECT_TRUE(fs::is_empty(shared.dir));
}

TEST(InstallCli, ReportsAnInstallThatFailsWithItsOwnReason) {
  Release r = make_release();
  Shared shared;
  testing::write_file(shared.dir, "bin", "not a directory");
  fs::path termination = shared.tmp.path() / "termination-log";
  AgentRun run = verify_installing(r, shared.dir, {"--termination-log", termination.string()});
  EXPECT_EQ(run.exit_code, 42) << run.err;
  EXPECT_EQ(run.reason(), "AgentInstallFailed");
  EXPECT_EQ(run.report.value("file", ""), (shared.dir / "bin").string());
  EXPECT_NE(run.report.value("message", "").find("not a directory"), std::string::npos) << run.report_text;
  EXPECT_EQ(*read_file(termination), run.report_text) << "the termination log says so too";
  EXPECT_EQ(run.out, run.report_text) << "one line: the refusal, not a success before it";
  EXPECT_FALSE(fs::exists(shared.dir / "lib/ld.so")) << "nothing is written before every directory is ready";
}

TEST(InstallCli, InstallAgentBelongsToVerifyNotExec) {
  Release r = make_release();
  Shared shared;
  fs::path marker = shared.tmp.path() / "started";
  AgentRun run = run_agent({"exec", r.dir.string(), "--public-key", r.pub.string(), "--install-agent",
                            shared.dir.string(), "--", "/bin/sh", "-c", "touch " + marker.string()});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("--install-agent belongs to verify"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_TRUE(fs::is_empty(shared.dir));
}

}  // namespace
}  // namespace infergate::agent
