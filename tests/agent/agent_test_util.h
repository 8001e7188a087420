// Helpers for the agent's tests: building artifact trees, signing them with the library, and
// running the real binary with its report read back.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "infergate/agent/signing/keys.h"
#include "infergate/agent/signing/oms_statement.h"
#include "infergate/agent/signing/statement.h"
#include "infergate/common/clock.h"
#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/common/result.h"

namespace infergate::agent::testing {

namespace fs = std::filesystem;

// A small safetensors file: one tensor of `elements` values of `dtype` (F16, BF16, I8, ...).
std::string safetensors_bytes(const std::string& dtype, size_t elements, size_t element_bytes, char fill = 1);

// Writes `content` to dir/path, creating parent directories.
void write_file(const fs::path& dir, const std::string& path, const std::string& content);

// The default model: config.json, tokenizer.json, two fp16 safetensors shards, a nested file.
std::map<std::string, std::string> default_model_files();

// A signed release in a temporary directory, built with the library (manifest, then sign).
struct Release {
  TempDir tmp;
  fs::path dir;  // tmp/model
  fs::path key;  // tmp/key.key
  fs::path pub;  // tmp/key.pub.pem
  PrivateKey private_key;
};

struct ReleaseSpec {
  std::map<std::string, std::string> files = default_model_files();
  std::string name = "demo-model";
  int64_t version = 3;
  std::optional<std::string> weight_format;
  std::optional<std::chrono::seconds> expires_in;
  KeyType key_type = KeyType::kEd25519;
  const Clock* clock = nullptr;
};

Release make_release(const ReleaseSpec& spec = {});

// (Re)writes SHA256SUMS and release.dsse.json for the tree as it is now.
void resign(Release& r, const ReleaseSpec& spec = {});

// Writes `manifest_text` as SHA256SUMS and signs a statement over it with r's key, bypassing the
// checks sign_release makes (what a broken or hostile signer could produce). `sizes` defaults to
// the sizes of the files as they are; `edit` may change the statement before it is signed.
void sign_raw(Release& r, const std::string& manifest_text,
              std::optional<std::map<std::string, uint64_t>> sizes = std::nullopt,
              const std::function<void(ReleaseStatement&)>& edit = {});

// A fresh key pair written as prefix.key / prefix.pub.pem.
PrivateKey make_key(const fs::path& prefix, KeyType type = KeyType::kEd25519);

// The checked-in OMS fixtures (tests/agent/fixtures/oms, made by its make.sh with sigstore-js).
fs::path oms_fixture(const std::string& name);
inline constexpr const char* kFixtureIdentity = "publisher@example.com";
inline constexpr const char* kFixtureIssuer = "https://accounts.example.com";

// A copy of the fixture model in a temporary directory, with `bundle`'s model.sig (e.g. "keyless") in
// it; tmp/model is the artifact directory.
struct OmsRelease {
  TempDir tmp;
  fs::path dir;
};
OmsRelease copy_oms_fixture(const std::string& bundle);

// Signs DIR's files as `serialization` says (hashed by the agent's own serializer) into DIR/model.sig,
// a key bundle; `edit` may change the statement first (its subject digest is recomputed after).
void sign_oms_raw(const fs::path& dir, const PrivateKey& key, const OmsSerialization& serialization,
                  const std::function<void(OmsStatement&)>& edit = {});

struct AgentRun {
  int exit_code = -1;
  std::string out;
  std::string err;
  Json report;  // the --report file's JSON (null when absent)
  std::string report_text;
  std::string reason() const;
};

// Runs build/bin/infergate-agent with `args` (a --report FILE in a scratch directory is added for
// verify and exec unless `add_report` is false). `wrapper` is put in front (e.g. setpriv ...).
AgentRun run_agent(std::vector<std::string> args, bool add_report = true,
                   const std::vector<std::string>& wrapper = {});

// Every entry under dir with its mode, size and mtime: to prove that verify writes nothing there.
std::map<std::string, std::string> snapshot(const fs::path& dir);

}  // namespace infergate::agent::testing
