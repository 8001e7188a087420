// --device and --tensor-parallel as the engine and the commands resolve them. Written to hold on
// any machine: with a GPU, auto picks CUDA; without one (or in a CPU-only build), cuda is refused
// with NoDevice and auto falls back to the CPU.
#include "infergate/engine/device.h"

#include <gtest/gtest.h>

#include "infergate/common/json.h"
#include "infergate/engine/cuda_backend.h"
#include "infergate/engine/engine.h"
#include "testing.h"

namespace infergate::runtime::engine {
namespace {

using testing::make_model;
using testing::run_runtime;
using testing::small_options;
using testing::temp_dir;

TEST(Device, CpuIsAlwaysAvailable) {
  auto d = resolve_device("cpu");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, Device::kCpu);
  EXPECT_EQ(device_name(*d), "cpu");
}

TEST(Device, AutoPicksCudaExactlyWhenAGpuIsPresent) {
  auto d = resolve_device("auto");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, cuda_device_count() > 0 ? Device::kCuda : Device::kCpu);
}

TEST(Device, CudaWithoutAGpuIsRefusedWithNoDevice) {
  auto d = resolve_device("cuda");
  if (cuda_device_count() > 0) {
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(*d, Device::kCuda);
    return;
  }
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().reason(), "NoDevice");
  EXPECT_EQ(d.error().code(), ErrorCode::kUnavailable);
  if (!cuda_backend_built()) {
    EXPECT_NE(d.error().message().find("INFERGATE_CUDA"), std::string::npos) << d.error().message();
  }
}

TEST(Device, UnknownNamesAreRefusedNamingTheValue) {
  for (const char* name : {"gpu", "CUDA", "", "tpu"}) {
    auto d = resolve_device(name);
    ASSERT_FALSE(d.ok()) << name;
    EXPECT_EQ(d.error().reason(), "UnknownDevice");
    EXPECT_NE(d.error().message().find(std::string("\"") + name + "\""), std::string::npos);
  }
}

TEST(Device, MakeCudaBackendWithoutAGpuRefusesWithNoDevice) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  TempDir dir = temp_dir();
  auto model = testing::open_model(make_model(dir.path() / "m", small_options()));
  ASSERT_TRUE(model);
  auto b = make_cuda_backend(model, CudaBackendOptions{});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().reason(), "NoDevice");
}

class LoadOnDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = make_model(dir_.path() / "m", small_options()); }
  EngineConfig config(const std::string& device, int32_t tp = 1) {
    EngineConfig c;
    c.model_dir = model_;
    c.device = device;
    c.tensor_parallel = tp;
    c.max_context = 64;
    c.max_sequences = 1;
    return c;
  }
  TempDir dir_ = temp_dir();
  std::filesystem::path model_;
};

TEST_F(LoadOnDeviceTest, LoadEngineRunsOnTheResolvedDevice) {
  auto le = load_engine(config("auto"));
  ASSERT_TRUE(le.ok()) << le.error().to_string();
  EXPECT_EQ(le->engine->backend().name(), cuda_device_count() > 0 ? "cuda" : "cpu");
  auto cpu = load_engine(config("cpu"));
  ASSERT_TRUE(cpu.ok()) << cpu.error().to_string();
  EXPECT_EQ(cpu->engine->backend().name(), "cpu");
}

TEST_F(LoadOnDeviceTest, LoadEngineRefusesCudaWithoutAGpuAndTensorParallelOnTheCpu) {
  if (cuda_device_count() == 0) {
    auto le = load_engine(config("cuda"));
    ASSERT_FALSE(le.ok());
    EXPECT_EQ(le.error().reason(), "NoDevice");
  }
  auto tp = load_engine(config("cpu", 2));
  ASSERT_FALSE(tp.ok());
  EXPECT_EQ(tp.error().reason(), "InvalidTensorParallel");
  EXPECT_NE(tp.error().message().find("--device cuda"), std::string::npos);
  auto bad = load_engine(config("gpu"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().reason(), "UnknownDevice");
}

TEST_F(LoadOnDeviceTest, GenerateCommandTakesDeviceAndRefusesCudaWithoutAGpu) {
  CommandResult cpu =
      run_runtime({"generate", "--model", model_.string(), "--weight-format", "fp16", "--kv-cache-dtype",
                   "fp16", "--prompt", "hello", "--max-tokens", "2", "--device", "cpu", "--json"});
  EXPECT_EQ(cpu.status.code, 0) << cpu.err;
  if (cuda_device_count() > 0) return;
  CommandResult gpu =
      run_runtime({"generate", "--model", model_.string(), "--weight-format", "fp16", "--kv-cache-dtype",
                   "fp16", "--prompt", "hello", "--device", "cuda", "--json"});
  EXPECT_EQ(gpu.status.code, 1) << gpu.err;
  auto j = parse_json(gpu.out, "error json");
  ASSERT_TRUE(j.ok()) << gpu.out;
  EXPECT_EQ((*j)["error"]["reason"], "NoDevice");
  CommandResult tp = run_runtime({"generate", "--model", model_.string(), "--weight-format", "fp16",
                                  "--kv-cache-dtype", "fp16", "--prompt", "hello", "--tensor-parallel", "0"});
  EXPECT_EQ(tp.status.code, 2) << tp.err;  // CLI11 range check: usage
}

}  // namespace
}  // namespace infergate::runtime::engine
