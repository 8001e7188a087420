// Test helpers (see agent_test_util.h).
#include "agent_test_util.h"

#include <cstring>

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

std::string safetensors_bytes(const std::string& dtype, size_t elements, size_t element_bytes, char fill,
                              const std::string& name) {
  size_t n = elements * element_bytes;
  Json header = {{name, {{"dtype", dtype}, {"shape", {elements}}, {"data_offsets", {0, n}}}},
                 {"__metadata__", {{"format", "pt"}}}};
  std::string h = header.dump();
  std::string out;
  uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  out += h;
  out += std::string(n, fill);
  return out;
}

std::string safetensors_tensors(const std::vector<TensorBytes>& tensors) {
  static const std::map<std::string, size_t> kSize = {{"F32", 4}, {"BF16", 2}, {"F16", 2}, {"F8_E4M3", 1},
                                                      {"I32", 4}, {"I64", 8},  {"I8", 1},  {"U8", 1}};
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::string data;
  for (const TensorBytes& t : tensors) {
    uint64_t n = 1;
    for (uint64_t d : t.shape) n *= d;
    std::string bytes = t.bytes;
    if (bytes.empty()) {
      bytes.assign(n * kSize.at(t.dtype), '\0');
      for (uint64_t i = 0; i < n; ++i) {
        if (t.dtype == "F32") {
          const float one = 1.0f;
          std::memcpy(bytes.data() + 4 * i, &one, 4);
        } else if (t.dtype == "BF16") {
          bytes[2 * i + 1] = '\x3f', bytes[2 * i] = '\x80';
        } else if (t.dtype == "F16") {
          bytes[2 * i + 1] = '\x3c';
        }
      }
    }
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data += bytes;
  }
  std::string h = header.dump();
  std::string out;
  uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  return out + h + data;
}

namespace {

std::string int64_pair(int64_t a, int64_t b) {
  std::string s(16, '\0');
  std::memcpy(s.data(), &a, 8);
  std::memcpy(s.data() + 8, &b, 8);
  return s;
}

// Dense layer 0, MoE layer 1 (two routed experts, a shared expert, the router); `linear` writes each
// linear (module, N, K, routed expert?).
std::vector<TensorBytes> moe_model(const std::function<void(std::vector<TensorBytes>&, const std::string&,
                                                            uint64_t, uint64_t, bool)>& linear) {
  std::vector<TensorBytes> t = {{"model.embed_tokens.weight", "BF16", {64, 32}, {}},
                                {"lm_head.weight", "BF16", {64, 32}, {}},
                                {"model.norm.weight", "BF16", {32}, {}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", "BF16", {32}, {}});
    linear(t, p + "self_attn.q_proj", 32, 32, false);
    linear(t, p + "self_attn.o_proj", 32, 32, false);
    if (l == 0) {
      linear(t, p + "mlp.up_proj", 64, 32, false);
      linear(t, p + "mlp.down_proj", 32, 64, false);
      continue;
    }
    t.push_back({p + "mlp.gate.weight", "BF16", {2, 32}, {}});
    t.push_back({p + "mlp.gate.e_score_correction_bias", "F32", {2}, {}});
    for (const std::string e : {"mlp.experts.0.", "mlp.experts.1.", "mlp.shared_experts."}) {
      const bool routed = e != "mlp.shared_experts.";
      linear(t, p + e + "up_proj", 64, 32, routed);
      linear(t, p + e + "down_proj", 32, 64, routed);
    }
  }
  return t;
}

}  // namespace

std::map<std::string, std::string> kimi_thinking_files(
    const std::function<void(std::vector<TensorBytes>&)>& edit) {
  auto tensors =
      moe_model([](std::vector<TensorBytes>& t, const std::string& m, uint64_t n, uint64_t k, bool routed) {
        if (!routed) {
          t.push_back({m + ".weight", "BF16", {n, k}, {}});
          return;
        }
        t.push_back({m + ".weight_packed", "I32", {n, k / 8}, {}});
        t.push_back({m + ".weight_scale", "BF16", {n, k / 32}, {}});
        t.push_back(
            {m + ".weight_shape", "I64", {2}, int64_pair(static_cast<int64_t>(n), static_cast<int64_t>(k))});
      });
  if (edit) edit(tensors);
  const Json weights = {{"actorder", nullptr},
                        {"block_structure", nullptr},
                        {"dynamic", false},
                        {"group_size", 32},
                        {"num_bits", 4},
                        {"observer", "minmax"},
                        {"observer_kwargs", Json::object()},
                        {"strategy", "group"},
                        {"symmetric", true},
                        {"type", "int"}};
  const Json q = {{"config_groups",
                   {{"group_0",
                     {{"input_activations", nullptr},
                      {"output_activations", nullptr},
                      {"targets", {"Linear"}},
                      {"weights", weights}}}}},
                  {"format", "pack-quantized"},
                  {"ignore",
                   {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                    R"(re:.*mlp\.(gate|up|gate_up|down)_proj.*)"}},
                  {"kv_cache_scheme", nullptr},
                  {"quant_method", "compressed-tensors"},
                  {"quantization_status", "compressed"}};
  const Json config = {{"architectures", {"DeepseekV3ForCausalLM"}},
                       {"model_type", "kimi_k2"},
                       {"num_hidden_layers", 2},
                       {"torch_dtype", "bfloat16"},
                       {"quantization_config", q}};
  return {{"config.json", config.dump(2)},
          {"model.safetensors", safetensors_tensors(tensors)},
          {"tokenizer.json", R"({"model":{"type":"BPE"}})"}};
}

std::map<std::string, std::string> ours_int8_files() {
  const Json q = {{"quant_method", "infergate"}, {"weight_format", "int8"}, {"bits", 8}, {"group_size", 0},
                  {"symmetric", true},           {"scale_dtype", "float16"}};
  const Json record = {{"format_version", 1},
                       {"weight_format", "int8"},
                       {"quantized", {{"model.layers.0.mlp.up_proj.weight", {{"shape", {16, 8}}}}}}};
  return {
      {"config.json", Json({{"torch_dtype", "float16"}, {"quantization_config", q}}).dump()},
      {"quantization.json", record.dump()},
      {"model.safetensors", safetensors_tensors({{"model.layers.0.mlp.up_proj.qweight", "I8", {16, 8}, {}},
                                                 {"model.layers.0.mlp.up_proj.scales", "F16", {16}, {}},
                                                 {"model.norm.weight", "F16", {8}, {}}})}};
}

std::map<std::string, std::string> deepseek_fp8_files() {
  auto tensors =
      moe_model([](std::vector<TensorBytes>& t, const std::string& m, uint64_t n, uint64_t k, bool) {
        t.push_back({m + ".weight", "F8_E4M3", {n, k}, {}});
        t.push_back({m + ".weight_scale_inv", "F32", {(n + 127) / 128, (k + 127) / 128}, {}});
      });
  const Json q = {{"activation_scheme", "dynamic"},
                  {"fmt", "e4m3"},
                  {"quant_method", "fp8"},
                  {"weight_block_size", {128, 128}}};
  const Json config = {{"architectures", {"DeepseekV3ForCausalLM"}},
                       {"model_type", "deepseek_v3"},
                       {"num_hidden_layers", 2},
                       {"torch_dtype", "bfloat16"},
                       {"quantization_config", q}};
  return {{"config.json", config.dump(2)}, {"model.safetensors", safetensors_tensors(tensors)}};
}

fs::path pre_description_fixture(const std::string& name) {
  return fs::path(INFERGATE_SOURCE_DIR) / "tests/agent/fixtures/pre-description" / name;
}

void write_file(const fs::path& dir, const std::string& path, const std::string& content) {
  fs::path p = dir / path;
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(content.data(), static_cast<std::streamsize>(content.size()));
  ASSERT_TRUE(f.good()) << p;
}

std::string default_shard(int shard, char fill) {
  return shard == 1 ? safetensors_bytes("F16", 40000, 2, fill, "model.embed_tokens.weight")
                    : safetensors_bytes("F16", 30000, 2, fill, "model.norm.weight");
}

std::map<std::string, std::string> default_model_files() {
  return {{"config.json", R"({"architectures":["LlamaForCausalLM"],"torch_dtype":"float16"})"},
          {"tokenizer.json", R"({"model":{"type":"BPE"}})"},
          {"model-00001-of-00002.safetensors", default_shard(1, 1)},
          {"model-00002-of-00002.safetensors", default_shard(2, 2)},
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
