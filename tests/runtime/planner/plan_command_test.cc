// `infergate-runtime plan` and `plan-table` as a user runs them: output, exit codes (0 fits, 1 does
// not fit, 2 bad input), errors that name the flag, --json, and a compressed model directory.
#include <gtest/gtest.h>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/common/subprocess.h"
#include "infergate/runtime/model/quantize.h"
#include "infergate/runtime/model/test_model.h"
#include "testing.h"

namespace infergate::runtime::planner {
namespace {

CommandResult run(std::vector<std::string> args) {
  args.insert(args.begin(), INFERGATE_RUNTIME_BIN);
  auto r = run_command(args, std::chrono::seconds(60));
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().to_string());
  return r.ok() ? *r : CommandResult{};
}

std::vector<std::string> llama(std::vector<std::string> extra) {
  std::vector<std::string> a = {"plan",
                                "--config",
                                testing::fixture("llama-3-70b"),
                                "--gpu",
                                "h200",
                                "--weight-format",
                                "int4",
                                "--kv-cache-dtype",
                                "int8",
                                "--max-context-length",
                                "8192",
                                "--max-concurrency",
                                "16"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// The Llama-3-70B command with `flag` set to `value` (replaced when the command has it).
std::vector<std::string> llama_with(const std::string& flag, const std::string& value) {
  std::vector<std::string> a = llama({});
  for (size_t i = 0; i + 1 < a.size(); ++i) {
    if (a[i] == flag) {
      a[i + 1] = value;
      return a;
    }
  }
  a.push_back(flag);
  a.push_back(value);
  return a;
}

TEST(PlanCommand, PrintsTheTextbookLineFirstThenTheAllocationAndExitsZeroWhenItFits) {
  CommandResult r = run(llama({}));
  EXPECT_EQ(r.status.code, 0) << r.err;
  EXPECT_EQ(
      r.out.rfind("textbook KV estimate: 80 layers x 2 x 8192 tokens x 8 kv_heads x 128 head_dim x 1 byte x "
                  "16 sequences = 21.47 GB",
                  0),
      0u)
      << r.out;
  for (const char* part : {"KV cache", "weights", "workspace", "reserves", "total", "verdict: fits",
                           "max concurrency at 8192 tokens:", "max context at 16 sequences:"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }
}

TEST(PlanCommand, ExitsOneWhenItDoesNotFit) {
  CommandResult r = run(llama({"--gpu-memory", "40GB"}));
  // --gpu and --gpu-memory together is bad input; alone, 40 GB is too small for 16 x 8192 here.
  EXPECT_EQ(r.status.code, 2);
  std::vector<std::string> a = llama({});
  a[4] = "rtx-4090";
  r = run(a);
  EXPECT_EQ(r.status.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("verdict: does not fit (WeightsTooLarge)"), std::string::npos) << r.out;
}

TEST(PlanCommand, JsonIsOneObjectWithTheVerdict) {
  CommandResult r = run(llama({"--json", "--tensor-parallel", "2"}));
  EXPECT_EQ(r.status.code, 0) << r.err;
  auto j = parse_json(r.out, "plan --json");
  ASSERT_TRUE(j.ok()) << r.out;
  EXPECT_EQ((*j)["fits"], true);
  EXPECT_EQ((*j)["reason"], "Fits");
  EXPECT_EQ((*j)["gpu"]["count"], 2);
  EXPECT_EQ((*j)["kv_cache"]["kv_heads_per_gpu"], 4);
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line";
}

TEST(PlanCommand, BadInputExitsTwoNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string flag;
  };
  std::vector<std::string> no_gpu = llama({});
  no_gpu.erase(no_gpu.begin() + 3, no_gpu.begin() + 5);
  const std::vector<Case> cases = {
      {llama_with("--max-concurrency", "-4"), "--max-concurrency"},
      {llama_with("--max-context-length", "0"), "--max-context-length"},
      {llama_with("--max-context-length", "many"), "--max-context-length"},
      {llama_with("--kv-cache-dtype", "fp4"), "--kv-cache-dtype"},
      {llama_with("--weight-format", "int3"), "--weight-format"},
      {llama({"--tensor-parallel", "3"}), "--tensor-parallel"},
      {llama({"--group-size", "48"}), "--group-size"},
      {llama({"--fragmentation-reserve", "90%"}), "--fragmentation-reserve"},
      {llama({"--cuda-graph-reserve", "lots"}), "--cuda-graph-reserve"},
      {no_gpu, "--gpu"},
  };
  for (const Case& c : cases) {
    CommandResult r = run(c.args);
    EXPECT_EQ(r.status.code, 2) << c.flag << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(c.flag + ":"), std::string::npos) << c.flag << ": " << r.err;
  }
  std::vector<std::string> unknown_gpu = llama({});
  unknown_gpu[4] = "h300";
  CommandResult r = run(unknown_gpu);
  EXPECT_EQ(r.status.code, 2);
  EXPECT_NE(r.err.find("--gpu: unknown GPU 'h300'"), std::string::npos) << r.err;
}

TEST(PlanCommand, ACompressedDirectoryFixesTheWeightFormat) {
  auto dir = TempDir::create("plan-cli");
  ASSERT_TRUE(dir.ok());
  model::TestModelOptions mo;
  mo.out = dir->path() / "dense";
  ASSERT_TRUE(model::make_test_model(mo).ok());
  model::QuantizeOptions q;
  q.model = mo.out;
  q.out = dir->path() / "int4";
  q.scheme = {model::WeightFormat::kInt4, 64, false, model::DType::kF16};
  q.threads = 1;
  ASSERT_TRUE(model::quantize_model(q).ok());
  const std::string m = q.out.string();
  CommandResult r = run({"plan", "--model", m, "--gpu-memory", "1GiB", "--kv-cache-dtype", "int4-kivi",
                         "--max-context-length", "1024", "--max-concurrency", "4", "--json",
                         "--cuda-context-reserve", "0", "--cuda-graph-reserve", "0"});
  EXPECT_EQ(r.status.code, 0) << r.err;
  auto j = parse_json(r.out, "plan");
  ASSERT_TRUE(j.ok()) << r.out;
  EXPECT_EQ((*j)["settings"]["weight_format"], "int4");
  EXPECT_EQ((*j)["settings"]["group_size"], 64);
  EXPECT_GT((*j)["kv_cache"]["staging_bytes_per_sequence"].get<int64_t>(), 0);
  r = run({"plan", "--model", mo.out.string(), "--gpu", "h100", "--weight-format", "int4", "--kv-cache-dtype",
           "fp16", "--max-context-length", "1024", "--max-concurrency", "4"});
  EXPECT_EQ(r.status.code, 0) << r.err;
  EXPECT_NE(r.out.find("note: the directory holds uncompressed weights"), std::string::npos) << r.out;
  r = run({"plan", "--model", m, "--gpu", "h100", "--weight-format", "int8", "--kv-cache-dtype", "fp16",
           "--max-context-length", "1024", "--max-concurrency", "4"});
  EXPECT_EQ(r.status.code, 2);
  EXPECT_NE(r.err.find("--weight-format: the model directory holds int4 weights"), std::string::npos)
      << r.err;
}

TEST(PlanCommand, ListsTheGpuCatalogue) {
  CommandResult r = run({"plan", "--list-gpus"});
  EXPECT_EQ(r.status.code, 0);
  for (const GpuSpec& g : gpu_catalog()) EXPECT_NE(r.out.find(g.name + "\t"), std::string::npos) << g.name;
}

}  // namespace
}  // namespace infergate::runtime::planner
