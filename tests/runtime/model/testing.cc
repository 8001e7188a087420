// Test helpers for runtime/model.
#include "testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace infergate::runtime::model::testing {
namespace fs = std::filesystem;

TempDir temp_dir() {
  auto d = TempDir::create("infergate-model-test");
  if (!d.ok()) {
    ADD_FAILURE() << d.error().to_string();
    std::abort();
  }
  return std::move(d).value();
}

std::string safetensors_bytes_with_length(uint64_t length, std::string_view header, std::string_view data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((length >> (8 * i)) & 0xff);
  out.append(header);
  out.append(data);
  return out;
}

std::string safetensors_bytes(std::string_view header, std::string_view data) {
  return safetensors_bytes_with_length(header.size(), header, data);
}

void write_bytes(const fs::path& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

CommandResult run_runtime(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {INFERGATE_RUNTIME_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_command(argv, std::chrono::minutes(2));
  if (!r.ok()) {
    ADD_FAILURE() << r.error().to_string();
    return {};
  }
  return std::move(r).value();
}

CommandResult run_python(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {INFERGATE_SYSTEM_PYTHON};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_command(argv, std::chrono::minutes(2));
  if (!r.ok()) {
    ADD_FAILURE() << r.error().to_string();
    return {};
  }
  return std::move(r).value();
}

fs::path source_file(std::string_view name) { return fs::path(INFERGATE_MODEL_TEST_DIR) / std::string(name); }

std::vector<std::pair<std::string, std::string>> tree(const fs::path& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out.emplace_back(fs::relative(e.path(), dir).string(), read_bytes(e.path()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace infergate::runtime::model::testing

#include "infergate/runtime/model/safetensors.h"

namespace infergate::runtime::model::testing {

TestModelOptions small_model(const fs::path& dir, Architecture arch) {
  TestModelOptions o;
  o.out = dir;
  o.arch = arch;
  o.layers = 2;
  o.hidden = 64;
  o.heads = 4;
  o.kv_heads = 2;
  o.vocab = 400;
  o.seed = 7;
  return o;
}

void make_small_model(const TestModelOptions& o) {
  Status s = make_test_model(o);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
}

void rewrite_safetensors(const fs::path& path, const std::function<void(std::vector<OwnedTensor>&)>& edit) {
  std::vector<OwnedTensor> tensors;
  {
    auto f = SafetensorsFile::open_path(path);
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    for (const TensorInfo& t : f->tensors()) {
      auto d = f->data(t);
      tensors.push_back({{t.name, t.dtype, t.shape}, std::vector<uint8_t>(d.begin(), d.end())});
    }
  }
  edit(tensors);
  std::vector<TensorData> data;
  for (const auto& t : tensors) data.push_back({t.spec, t.bytes});
  ASSERT_TRUE(write_safetensors(path, data).ok());
}

}  // namespace infergate::runtime::model::testing
