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

// A small safetensors file: one tensor `name` of `elements` values of `dtype` (F16, BF16, I8, ...).
std::string safetensors_bytes(const std::string& dtype, size_t elements, size_t element_bytes, char fill = 1,
                              const std::string& name = "weight");
// Shard 1 or 2 of the default model (each its own tensor, as a checkpoint's shards are), filled with `fill`.
std::string default_shard(int shard, char fill);

// A safetensors file of several tensors; `bytes` empty means: filled with 1.0 for float dtypes (so scales
// are valid), zeros otherwise.
struct TensorBytes {
  std::string name;
  std::string dtype;  // "BF16", "I32", "F8_E4M3", ...
  std::vector<uint64_t> shape;
  std::string bytes;
};
std::string safetensors_tensors(const std::vector<TensorBytes>& tensors);

// A tiny Kimi-K2-Thinking-shaped release (config.json with its compressed-tensors quantization_config and
// ignore list, model.safetensors): one dense layer, one MoE layer with two routed experts in
// pack-quantized INT4 (group 32, symmetric, I32 packed words, I64 weight_shape), the rest BF16.
// `edit` may change the tensors before they are written.
std::map<std::string, std::string> kimi_thinking_files(
    const std::function<void(std::vector<TensorBytes>&)>& edit = {});
// Our own int8 release as `infergate-runtime quantize` writes it: config.json's infergate
// quantization_config, quantization.json, one linear's qweight (I8) and scales (F16).
std::map<std::string, std::string> ours_int8_files();
// A tiny DeepSeek-V3-shaped FP8 release: every linear F8_E4M3 with F32 128x128 weight_scale_inv, the
// router and lm_head BF16, e_score_correction_bias F32.
std::map<std::string, std::string> deepseek_fp8_files();

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

// Statements signed before the weights description decided the format (tests/agent/fixtures/pre-description,
// made by its make.sh with the agent of commit 18c4046): "int4-fake" (weightFormat int4) and "fp8-dtype"
// (weightFormat fp8_e4m3), with key.pub.pem.
fs::path pre_description_fixture(const std::string& name);

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
