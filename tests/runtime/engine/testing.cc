// Helpers shared by the engine tests.
#include "testing.h"

#include <gtest/gtest.h>

#include <chrono>

#include "infergate/common/json.h"
#include "infergate/runtime/model/quantize.h"

namespace infergate::runtime::engine::testing {

TempDir temp_dir() {
  auto d = TempDir::create("engine-test");
  if (!d.ok()) {
    ADD_FAILURE() << d.error().to_string();
    std::abort();
  }
  return std::move(*d);
}

model::TestModelOptions small_options(model::Architecture arch, uint64_t seed) {
  model::TestModelOptions o;
  o.arch = arch;
  o.seed = seed;
  o.vocab = 320;
  return o;
}

std::filesystem::path make_model(const std::filesystem::path& dir, model::TestModelOptions o) {
  o.out = dir;
  o.force = true;
  Status s = model::make_test_model(o);
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  return dir;
}

std::filesystem::path quantize(const std::filesystem::path& src, const std::filesystem::path& out,
                               model::WeightFormat format, bool symmetric, int64_t group) {
  model::QuantizeOptions q;
  q.model = src;
  q.out = out;
  q.force = true;
  q.scheme.format = format;
  q.scheme.symmetric = format == model::WeightFormat::kInt8 ? true : symmetric;
  q.scheme.group_size = format == model::WeightFormat::kInt4 ? group : 0;
  q.threads = 1;
  auto r = model::quantize_model(q);
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return out;
}

std::shared_ptr<const model::Model> open_model(const std::filesystem::path& dir) {
  auto m = model::Model::open(dir);
  if (!m.ok()) {
    ADD_FAILURE() << m.error().to_string();
    return nullptr;
  }
  return std::make_shared<const model::Model>(std::move(*m));
}

std::unique_ptr<Engine> make_engine(std::shared_ptr<const model::Model> model, const EngineSetup& s) {
  if (!model) return nullptr;
  CpuBackendOptions bo;
  bo.weight_format = s.weight_format;
  bo.reference_ops = s.reference_ops;
  bo.smooth_keys = s.smooth_keys;
  auto b = make_cpu_backend(model, bo);
  if (!b.ok()) {
    ADD_FAILURE() << b.error().to_string();
    return nullptr;
  }
  EngineOptions eo;
  eo.kv_dtype = s.kv_dtype;
  eo.max_sequences = s.max_sequences;
  eo.max_context = s.max_context;
  eo.num_blocks = s.num_blocks;
  auto e = Engine::create(model, std::move(*b), eo);
  if (!e.ok()) {
    ADD_FAILURE() << e.error().to_string();
    return nullptr;
  }
  return std::move(*e);
}

std::unique_ptr<Engine> make_engine(const std::filesystem::path& dir, const EngineSetup& s) {
  return make_engine(open_model(dir), s);
}

CommandResult run_runtime(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {INFERGATE_RUNTIME_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_command(argv, std::chrono::seconds(120));
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return r.ok() ? *r : CommandResult{};
}

CommandResult run_python(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {INFERGATE_SYSTEM_PYTHON};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_command(argv, std::chrono::seconds(120));
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return r.ok() ? *r : CommandResult{};
}

bool python_has_numpy() {
  if (!std::filesystem::exists(INFERGATE_SYSTEM_PYTHON)) return false;
  auto r = run_command({INFERGATE_SYSTEM_PYTHON, "-c", "import numpy"}, std::chrono::seconds(30));
  return r.ok() && r->status.success();
}

std::filesystem::path source_file(std::string_view name) {
  return std::filesystem::path(INFERGATE_ENGINE_TEST_DIR) / std::string(name);
}

std::vector<int32_t> greedy(Engine& e, const std::vector<int32_t>& prompt, int32_t n) {
  SamplingParams p;
  p.max_tokens = n;
  p.ignore_eos = true;
  auto r = generate(e, prompt, p);
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  std::vector<int32_t> out;
  if (r.ok()) {
    for (const auto& t : r->tokens) out.push_back(t.token);
  }
  return out;
}

std::filesystem::path with_config(const std::filesystem::path& src, const std::filesystem::path& dst,
                                  const std::function<void(Json&)>& edit) {
  std::filesystem::copy(src, dst, std::filesystem::copy_options::recursive);
  auto j = parse_json(*read_file(dst / "config.json"), "config.json");
  edit(*j);
  EXPECT_TRUE(write_file_atomic(dst / "config.json", dump_json(*j, 2)).ok());
  return dst;
}

Error load_error(const std::filesystem::path& dir, KvCacheDtype kv) {
  EngineConfig c;
  c.model_dir = dir;
  c.kv_dtype = kv;
  c.max_context = 64;
  auto r = load_engine(c);
  EXPECT_FALSE(r.ok());
  return r.ok() ? Error(ErrorCode::kInternal, "loaded") : r.error();
}

std::vector<std::vector<int32_t>> run_together(Engine& e, const std::vector<SeqId>& ids) {
  std::vector<std::vector<int32_t>> out(ids.size());
  for (int guard = 0; guard < 1000; ++guard) {
    std::vector<StepRequest> reqs;
    for (SeqId id : ids) {
      if (e.sequence(id)->status != SequenceStatus::kFinished) reqs.push_back({id, 0});
    }
    if (reqs.empty()) break;
    auto r = e.step(reqs);
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    if (!r.ok()) break;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    for (const auto& t : e.sequence(ids[i])->output) out[i].push_back(t.token);
  }
  return out;
}

SamplingParams greedy_params(int32_t n) {
  SamplingParams p;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

}  // namespace infergate::runtime::engine::testing
