// Engine adapters: arguments derived from the spec, and refusals of what an engine cannot run.
#include "infergate/operator/api/engine.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "api/testdata.h"

namespace infergate::op::api {
namespace {

PodConfig config(std::function<void(Json&)> edit = {}) {
  Json j = testing::valid_model();
  if (edit) edit(j);
  auto m = parse_inference_model(j);
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  return pod_config(m->spec);
}

// The value following `flag` in args, or "<absent>".
std::string arg(const std::vector<std::string>& args, std::string_view flag) {
  auto it = std::find(args.begin(), args.end(), flag);
  if (it == args.end() || it + 1 == args.end()) return "<absent>";
  return *(it + 1);
}

bool has(const std::vector<std::string>& args, std::string_view flag) {
  return std::find(args.begin(), args.end(), flag) != args.end();
}

TEST(AgentVerify, CarriesTrustSettingsAndTerminationLog) {
  auto cmd = agent_verify_command(config(), Layout{}, Images{});
  EXPECT_EQ(cmd.image, "infergate/agent:0.1.0");
  EXPECT_EQ(cmd.command, std::vector<std::string>{"infergate-agent"});
  ASSERT_GE(cmd.args.size(), 2u);
  EXPECT_EQ(cmd.args[0], "verify");
  EXPECT_EQ(cmd.args[1], "/models/glm-4-9b/r3");
  EXPECT_EQ(arg(cmd.args, "--public-key"), "/etc/infergate/trust/");
  EXPECT_EQ(arg(cmd.args, "--expect-name"), "glm-4-9b");
  EXPECT_EQ(arg(cmd.args, "--min-version"), "3");
  EXPECT_EQ(arg(cmd.args, "--expect-weight-format"), "int8");
  EXPECT_EQ(arg(cmd.args, "--termination-log"), "/dev/termination-log");
}

TEST(AgentVerify, OmitsOptionalTrustFlags) {
  auto cmd = agent_verify_command(config([](Json& j) {
                                    j["spec"]["artifact"]["trust"].erase("expectName");
                                    j["spec"]["artifact"]["trust"].erase("minVersion");
                                  }),
                                  Layout{}, Images{});
  EXPECT_FALSE(has(cmd.args, "--expect-name"));
  EXPECT_FALSE(has(cmd.args, "--min-version"));
}

TEST(AgentVerify, PassesTheTrustedFormatsTheTrustDirectoryAndTheKeylessIdentities) {
  auto cmd = agent_verify_command(
      config([](Json& j) {
        auto& t = j["spec"]["artifact"]["trust"];
        t["formats"] = {"infergate", "oms"};
        t["identities"] = Json::array({{{"subject", "a@example.com"}, {"issuer", "https://i"}},
                                       {{"subject", "b@example.com"}, {"issuer", "https://j"}}});
      }),
      Layout{}, Images{});
  EXPECT_FALSE(has(cmd.args, "--public-key"));
  EXPECT_EQ(arg(cmd.args, "--trust-dir"), "/etc/infergate/trust/");
  EXPECT_EQ(std::count(cmd.args.begin(), cmd.args.end(), "--format"), 2);
  auto id = std::find(cmd.args.begin(), cmd.args.end(), "b@example.com");
  ASSERT_NE(id, cmd.args.end());
  EXPECT_EQ(*(id - 1), "--identity");
  EXPECT_EQ(*(id + 1), "--issuer");
  EXPECT_EQ(*(id + 2), "https://j");
  EXPECT_EQ(arg(cmd.args, "--min-version"), "3");
}

TEST(BundledEngine, HashesWhileLoadingOnlyWhenOurSignedManifestIsAllowed) {
  auto oms_only = config([](Json& j) {
    j["spec"]["artifact"]["trust"].erase("minVersion");
    j["spec"]["artifact"]["trust"]["formats"] = {"oms"};
  });
  auto e = engine_command(oms_only, "m", Layout{}, Images{});
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  EXPECT_FALSE(has(e->container.args, "--verified-manifest"));
  EXPECT_EQ(arg(e->container.args, "--served-model-name"), "m");
  auto both = config([](Json& j) { j["spec"]["artifact"]["trust"]["formats"] = {"oms", "infergate"}; });
  EXPECT_TRUE(has(engine_command(both, "m", Layout{}, Images{})->container.args, "--verified-manifest"));
}

TEST(BundledEngine, MirrorsTheSpecAndPicksTheCudaImageForGpus) {
  auto e = engine_command(config(), "glm-4-9b", Layout{}, Images{});
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  EXPECT_EQ(e->container.image, "infergate/runtime-cuda:0.1.0");
  EXPECT_EQ(e->container.args[0], "serve");
  EXPECT_EQ(arg(e->container.args, "--model"), "/models/glm-4-9b/r3");
  EXPECT_EQ(arg(e->container.args, "--weight-format"), "int8");
  EXPECT_EQ(arg(e->container.args, "--kv-cache-dtype"), "int8");
  EXPECT_EQ(arg(e->container.args, "--max-context-length"), "32768");
  EXPECT_EQ(arg(e->container.args, "--max-concurrency"), "16");
  EXPECT_EQ(arg(e->container.args, "--verified-manifest"), "/models/glm-4-9b/r3/SHA256SUMS");
  EXPECT_EQ(arg(e->container.args, "--port"), "8000");
  // Clients (and the local router) ask for the model by the InferenceModel's name.
  EXPECT_EQ(arg(e->container.args, "--served-model-name"), "glm-4-9b");
  EXPECT_EQ(e->readiness_path, "/readyz");
  EXPECT_EQ(e->liveness_path, "/healthz");
  auto cpu = engine_command(config([](Json& j) { j["spec"].erase("resources"); }), "m", Layout{}, Images{});
  EXPECT_EQ(cpu->container.image, "infergate/runtime:0.1.0");
}

TEST(BundledEngine, RefusesArgsThatRepeatAManagedFlag) {
  auto e = engine_command(config([](Json& j) { j["spec"]["engine"]["args"] = {"--kv-cache-dtype=fp16"}; }),
                          "m", Layout{}, Images{});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().reason(), "ConflictingEngineArgs");
}

TEST(VllmEngine, MapsFp8KvAndLimits) {
  auto e = engine_command(config([](Json& j) {
                            j["spec"]["engine"] = {{"kind", "vllm"}, {"image", "vllm/vllm-openai:v0.9.0"}};
                            j["spec"]["serving"]["weightFormat"] = "bf16";
                            j["spec"]["serving"]["kvCacheDtype"] = "fp8";
                            j["spec"]["resources"]["limits"]["nvidia.com/gpu"] = "2";
                          }),
                          "glm", Layout{}, Images{});
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  const auto& a = e->container.args;
  EXPECT_EQ(arg(a, "--kv-cache-dtype"), "fp8");
  EXPECT_EQ(arg(a, "--max-model-len"), "32768");
  EXPECT_EQ(arg(a, "--max-num-seqs"), "16");
  EXPECT_EQ(arg(a, "--dtype"), "bfloat16");
  EXPECT_EQ(arg(a, "--tensor-parallel-size"), "2");
  EXPECT_FALSE(has(a, "--quantization"));
  EXPECT_EQ(e->readiness_path, "/health");
  EXPECT_EQ(e->container.env.at("HF_HUB_OFFLINE"), "1");
}

TEST(VllmEngine, RefusesInt8KvCache) {
  auto e = engine_command(config([](Json& j) {
                            j["spec"]["engine"] = {{"kind", "vllm"}, {"image", "v"}};
                          }),
                          "m", Layout{}, Images{});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().reason(), "UnsupportedKvCacheDtype");
  EXPECT_NE(e.error().message().find("vLLM has no int8 KV cache"), std::string::npos) << e.error().message();
}

TEST(VllmEngine, NeedsAnExportedQuantizationForInt8Weights) {
  auto base = [](Json& j) {
    j["spec"]["engine"] = {{"kind", "vllm"}, {"image", "v"}};
    j["spec"]["serving"]["kvCacheDtype"] = "fp8";
  };
  auto missing = engine_command(config(base), "m", Layout{}, Images{});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().reason(), "UnsupportedWeightFormat");
  auto wrong = engine_command(config([&](Json& j) {
                                base(j);
                                j["spec"]["engine"]["quantization"] = "awq";
                              }),
                              "m", Layout{}, Images{});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().reason(), "UnsupportedQuantization");
  auto ok = engine_command(config([&](Json& j) {
                             base(j);
                             j["spec"]["engine"]["quantization"] = "compressed-tensors";
                           }),
                           "m", Layout{}, Images{});
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  EXPECT_EQ(arg(ok->container.args, "--quantization"), "compressed-tensors");
}

TEST(VllmEngine, RefusesA16BitKvCacheOfTheOtherType) {
  auto e = engine_command(config([](Json& j) {
                            j["spec"]["engine"] = {{"kind", "vllm"}, {"image", "v"}};
                            j["spec"]["serving"]["weightFormat"] = "bf16";
                            j["spec"]["serving"]["kvCacheDtype"] = "fp16";
                          }),
                          "m", Layout{}, Images{});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().reason(), "UnsupportedKvCacheDtype");
}

TEST(SglangEngine, UsesItsOwnFlagNames) {
  auto e = engine_command(config([](Json& j) {
                            j["spec"]["engine"] = {{"kind", "sglang"}, {"image", "lmsysorg/sglang:v0.4"}};
                            j["spec"]["serving"]["weightFormat"] = "fp16";
                            j["spec"]["serving"]["kvCacheDtype"] = "fp8";
                          }),
                          "glm", Layout{}, Images{});
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  EXPECT_EQ(arg(e->container.args, "--model-path"), "/models/glm-4-9b/r3");
  EXPECT_EQ(arg(e->container.args, "--context-length"), "32768");
  EXPECT_EQ(arg(e->container.args, "--max-running-requests"), "16");
  EXPECT_EQ(arg(e->container.args, "--kv-cache-dtype"), "fp8_e4m3");
  EXPECT_EQ(e->port, 30000);
}

TEST(LlamacppEngine, MapsInt8KvToQ8AndScalesContextBySlots) {
  auto e = engine_command(config([](Json& j) {
                            j["spec"]["engine"] = {{"kind", "llamacpp"},
                                                   {"image", "ghcr.io/ggml-org/llama.cpp:server"},
                                                   {"modelFile", "glm-4-9b-q8_0.gguf"}};
                          }),
                          "glm", Layout{}, Images{});
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  const auto& a = e->container.args;
  EXPECT_EQ(arg(a, "--model"), "/models/glm-4-9b/r3/glm-4-9b-q8_0.gguf");
  EXPECT_EQ(arg(a, "--cache-type-k"), "q8_0");
  EXPECT_EQ(arg(a, "--cache-type-v"), "q8_0");
  EXPECT_EQ(arg(a, "--flash-attn"), "on");
  EXPECT_EQ(arg(a, "--ctx-size"), std::to_string(32768 * 16));
  EXPECT_EQ(arg(a, "--parallel"), "16");
  EXPECT_TRUE(e->container.command.empty());
}

TEST(LlamacppEngine, RefusesFp8KvAndAMissingGgufFile) {
  auto fp8 =
      engine_command(config([](Json& j) {
                       j["spec"]["engine"] = {{"kind", "llamacpp"}, {"image", "l"}, {"modelFile", "m.gguf"}};
                       j["spec"]["serving"]["kvCacheDtype"] = "fp8";
                     }),
                     "m", Layout{}, Images{});
  ASSERT_FALSE(fp8.ok());
  EXPECT_EQ(fp8.error().reason(), "UnsupportedKvCacheDtype");
  auto nofile = engine_command(config([](Json& j) {
                                 j["spec"]["engine"] = {{"kind", "llamacpp"}, {"image", "l"}};
                               }),
                               "m", Layout{}, Images{});
  ASSERT_FALSE(nofile.ok());
  EXPECT_EQ(nofile.error().reason(), "MissingModelFile");
}

TEST(Engines, LayoutMovesPathsAndPortsForOtherPlatforms) {
  Layout local{"/var/lib/infergate/artifacts/", "/var/lib/infergate/keys", "/run/m/verdict.json", "127.0.0.1",
               41234};
  auto e = engine_command(config(), "m", local, Images{});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(arg(e->container.args, "--model"), "/var/lib/infergate/artifacts/glm-4-9b/r3");
  EXPECT_EQ(arg(e->container.args, "--host"), "127.0.0.1");
  EXPECT_EQ(e->port, 41234);
  auto v = agent_verify_command(config(), local, Images{});
  EXPECT_EQ(arg(v.args, "--public-key"), "/var/lib/infergate/keys/");
  EXPECT_EQ(arg(v.args, "--termination-log"), "/run/m/verdict.json");
}

}  // namespace
}  // namespace infergate::op::api
