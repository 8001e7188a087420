// Test helpers (see agent_test_util.h).
#include "agent_test_util.h"

#include "infergate/agent/manifest/oms_check.h"
#include "infergate/agent/signing/dsse.h"
#include "infergate/agent/signing/sigstore_bundle.h"

#include <gtest/gtest.h>

#include <fstream>

#include "infergate/agent/hashing/tree.h"
#include "infergate/agent/manifest/tree_check.h"
#include "infergate/agent/signing/dsse.h"
#include "infergate/agent/signing/release_signer.h"
#include "infergate/common/manifest.h"
#include "infergate/common/subprocess.h"

namespace infergate::agent::testing {

std::string safetensors_bytes(const std::string& dtype, size_t elements, size_t element_bytes, char fill) {
  size_t n = elements * element_bytes;
  Json header = {{"weight", {{"dtype", dtype}, {"shape", {elements}}, {"data_offsets", {0, n}}}},
                 {"__metadata__", {{"format", "pt"}}}};
  std::string h = header.dump();
  std::string out;
  uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  out += h;
  out += std::string(n, fill);
  return out;
}

void write_file(const fs::path& dir, const std::string& path, const std::string& content) {
  fs::path p = dir / path;
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(content.data(), static_cast<std::streamsize>(content.size()));
  ASSERT_TRUE(f.good()) << p;
}

std::map<std::string, std::string> default_model_files() {
  return {{"config.json", R"({"architectures":["LlamaForCausalLM"],"torch_dtype":"float16"})"},
          {"tokenizer.json", R"({"model":{"type":"BPE"}})"},
          {"model-00001-of-00002.safetensors", safetensors_bytes("F16", 40000, 2, 1)},
          {"model-00002-of-00002.safetensors", safetensors_bytes("F16", 30000, 2, 2)},
          {"extra/generation_config.json", R"({"do_sample":false})"}};
}

PrivateKey make_key(const fs::path& prefix, KeyType type) {
  auto key = PrivateKey::generate(type);
  EXPECT_TRUE(key.ok());
  auto st = write_key_pair(*key, prefix);
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  return *key;
}

void resign(Release& r, const ReleaseSpec& spec) {
  auto root = ArtifactRoot::open(r.dir);
  ASSERT_TRUE(root.ok()) << root.error().to_string();
  auto manifest = build_manifest(root->fd());
  ASSERT_TRUE(manifest.ok()) << manifest.error().to_string();
  ASSERT_TRUE(write_file_atomic(r.dir / "SHA256SUMS", manifest->to_text()).ok());
  SignOptions o;
  o.dir = r.dir;
  o.name = spec.name;
  o.version = spec.version;
  o.weight_format = spec.weight_format;
  o.expires_in = spec.expires_in;
  o.clock = spec.clock;
  auto signed_release = sign_release(o, r.private_key);
  ASSERT_TRUE(signed_release.ok()) << signed_release.error().to_string();
}

void sign_raw(Release& r, const std::string& manifest_text,
              std::optional<std::map<std::string, uint64_t>> sizes,
              const std::function<void(ReleaseStatement&)>& edit) {
  write_file(r.dir, "SHA256SUMS", manifest_text);
  ReleaseStatement s;
  s.manifest_digest = *sha256(manifest_text);
  s.name = "demo-model";
  s.version = 3;
  s.weight_format = "fp16";
  s.created_at = std::chrono::time_point_cast<std::chrono::seconds>(SystemClock::instance().wall_now());
  if (sizes) {
    s.file_sizes = *sizes;
  } else {
    for (auto it = fs::recursive_directory_iterator(r.dir); it != fs::recursive_directory_iterator(); ++it) {
      std::string rel = it->path().lexically_relative(r.dir).string();
      if (it->is_regular_file() && rel != "SHA256SUMS" && rel != "release.dsse.json") {
        s.file_sizes[rel] = it->file_size();
      }
    }
  }
  if (edit) edit(s);
  DsseEnvelope env{std::string(kInTotoPayloadType), serialize_statement(s), {}};
  auto sig = r.private_key.sign(dsse_pae(env.payload_type, env.payload));
  ASSERT_TRUE(sig.ok());
  env.signatures.push_back({r.private_key.key_id(), *sig});
  write_file(r.dir, "release.dsse.json", serialize_envelope(env));
}

Release make_release(const ReleaseSpec& spec) {
  auto tmp = TempDir::create("agent-test");
  EXPECT_TRUE(tmp.ok());
  Release r{std::move(tmp).value(), {}, {}, {}, *PrivateKey::generate(spec.key_type)};
  r.dir = r.tmp.path() / "model";
  r.key = r.tmp.path() / "key.key";
  r.pub = r.tmp.path() / "key.pub.pem";
  fs::create_directories(r.dir);
  for (const auto& [path, content] : spec.files) write_file(r.dir, path, content);
  EXPECT_TRUE(write_key_pair(r.private_key, r.tmp.path() / "key").ok());
  resign(r, spec);
  return r;
}

std::string AgentRun::reason() const {
  if (!report.is_object() || !report.contains("reason") || !report["reason"].is_string())
    return "(no report)";
  return report["reason"].get<std::string>();
}

fs::path oms_fixture(const std::string& name) {
  return fs::path(INFERGATE_SOURCE_DIR) / "tests/agent/fixtures/oms" / name;
}

OmsRelease copy_oms_fixture(const std::string& bundle) {
  OmsRelease r{*TempDir::create("oms-fixture"), {}};
  r.dir = r.tmp.path() / "model";
  fs::copy(oms_fixture("model"), r.dir, fs::copy_options::recursive);
  fs::copy_file(oms_fixture(bundle) / "model.sig", r.dir / "model.sig");
  return r;
}

void sign_oms_raw(const fs::path& dir, const PrivateKey& key, const OmsSerialization& serialization,
                  const std::function<void(OmsStatement&)>& edit) {
  auto root = ArtifactRoot::open(dir);
  ASSERT_TRUE(root.ok()) << root.error().to_string();
  OmsStatement s;
  s.model_name = dir.filename().string();
  s.serialization = serialization;
  TreeSummary summary;
  auto resources = build_oms_resources(root->fd(), serialization, {}, &summary);
  ASSERT_TRUE(resources.ok()) << resources.error().to_string();
  s.resources = *resources;
  if (edit) edit(s);
  s.root_digest = oms_root_digest(s.resources);
  SigstoreBundle b;
  b.media_type = std::string(kBundleMediaTypeV03);
  b.public_key_hint = key.public_key().pem_hint();
  b.envelope.payload_type = std::string(kInTotoPayloadType);
  b.envelope.payload = serialize_oms_statement(s);
  b.envelope.signatures.push_back({"", *key.sign(dsse_pae(b.envelope.payload_type, b.envelope.payload))});
  ASSERT_TRUE(write_file_atomic(dir / "model.sig", serialize_bundle(b), 0644).ok());
}

AgentRun run_agent(std::vector<std::string> args, bool add_report, const std::vector<std::string>& wrapper) {
  AgentRun out;
  auto scratch = TempDir::create("agent-run");
  EXPECT_TRUE(scratch.ok());
  fs::path report = scratch->path() / "report.json";
  if (add_report && !args.empty() && (args[0] == "verify" || args[0] == "exec")) {
    auto dash = std::find(args.begin(), args.end(), "--");
    dash = args.insert(dash, report.string());
    args.insert(dash, "--report");
  }
  std::vector<std::string> argv = wrapper;
  argv.push_back(INFERGATE_AGENT_BIN);
  argv.insert(argv.end(), args.begin(), args.end());
  if (!wrapper.empty()) ::chmod(scratch->path().c_str(), 0777);
  auto r = run_command(argv, std::chrono::seconds(60));
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  if (!r.ok()) return out;
  EXPECT_FALSE(r->timed_out) << "the agent did not finish within 60 s";
  out.exit_code = r->status.code;
  out.out = r->out;
  out.err = r->err;
  auto text = read_file(report);
  if (text.ok()) {
    out.report_text = *text;
    auto j = parse_json(*text, "report");
    if (j.ok()) out.report = *j;
  }
  return out;
}

std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
    struct stat st {};
    ::lstat(it->path().c_str(), &st);
    out[it->path().lexically_relative(dir).string()] =
        std::to_string(st.st_mode) + "/" + std::to_string(st.st_size) + "/" +
        std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + "/" +
        std::to_string(st.st_ino);
  }
  return out;
}

}  // namespace infergate::agent::testing
