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
  // vLLM reads compressed-tensors from config.json itself.
  EXPECT_FALSE(has(ok->container.args, "--quantization"));
}

// experts_int8 quantizes bf16 weights while loading: what would be served is not the signed release.
TEST(VllmEngine, RefusesLoadTimeQuantizationAsAnInt8Method) {
  auto e = engine_command(
      config([](Json& j) {
        j["spec"]["engine"] = {{"kind", "vllm"}, {"image", "v"}, {"quantization", "experts_int8"}};
        j["spec"]["serving"]["kvCacheDtype"] = "fp8";
      }),
      "m", Layout{}, Images{});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().reason(), "UnsupportedQuantization");
  EXPECT_NE(e.error().message().find("compressed-tensors"), std::string::npos) << e.error().message();
}

// An explicit --quantization awq|gptq stops vLLM from upgrading to its Marlin kernels: the adapter
// leaves detection to vLLM and passes only a method the user named as a kernel choice.
TEST(VllmEngine, LeavesAwqAndGptqToDetectionSoVllmPicksMarlin) {
  for (std::string method : {"awq", "gptq"}) {
    auto e =
        engine_command(config([&](Json& j) {
                         j["spec"]["engine"] = {{"kind", "vllm"}, {"image", "v"}, {"quantization", method}};
                         j["spec"]["serving"]["weightFormat"] = "int4";
                         j["spec"]["serving"]["kvCacheDtype"] = "fp8";
                       }),
                       "m", Layout{}, Images{});
    ASSERT_TRUE(e.ok()) << method << ": " << e.error().to_string();
    EXPECT_FALSE(has(e->container.args, "--quantization")) << method;
    EXPECT_FALSE(has(e->container.args, "--dtype")) << method;
  }
  auto marlin = engine_command(
      config([&](Json& j) {
        j["spec"]["engine"] = {{"kind", "vllm"}, {"image", "v"}, {"quantization", "awq_marlin"}};
        j["spec"]["serving"]["weightFormat"] = "int4";
        j["spec"]["serving"]["kvCacheDtype"] = "fp8";
      }),
      "m", Layout{}, Images{});
  ASSERT_TRUE(marlin.ok());
  EXPECT_EQ(arg(marlin->container.args, "--quantization"), "awq_marlin");
}

// The usual Hugging Face release is bf16 and the default kvCacheDtype fp16: vLLM keeps an unquantized
// cache in the model's dtype, so both 16-bit KV dtypes run as "auto".
TEST(VllmEngine, RunsABf16ReleaseWithTheDefault16BitKvCache) {
  for (std::string kv : {"fp16", "bf16"}) {
    auto e = engine_command(config([&](Json& j) {
                              j["spec"]["engine"] = {{"kind", "vllm"}, {"image", "v"}};
                              j["spec"]["serving"]["weightFormat"] = "bf16";
                              j["spec"]["serving"]["kvCacheDtype"] = kv;
                            }),
                            "m", Layout{}, Images{});
    ASSERT_TRUE(e.ok()) << kv << ": " << e.error().to_string();
    EXPECT_EQ(arg(e->container.args, "--kv-cache-dtype"), "auto");
    EXPECT_EQ(arg(e->container.args, "--dtype"), "bfloat16");
  }
}

// vLLM >= 0.20 (torch >= 2.11) calls getpass.getuser(), which fails for uid 65532 without USER/LOGNAME.
TEST(VllmEngine, SetsUserAndWritableCachesForANonRootPodWithoutAPasswdEntry) {
  auto e = engine_command(config([](Json& j) {
                            j["spec"]["engine"] = {{"kind", "vllm"}, {"image", "v"}};
                            j["spec"]["serving"]["weightFormat"] = "bf16";
                            j["spec"]["serving"]["kvCacheDtype"] = "fp8";
                          }),
                          "m", Layout{}, Images{});
  ASSERT_TRUE(e.ok());
  const auto& env = e->container.env;
  EXPECT_FALSE(env.at("USER").empty());
  EXPECT_FALSE(env.at("LOGNAME").empty());
  for (const char* dir : {"HOME", "XDG_CACHE_HOME", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "HF_HOME",
                          "VLLM_CACHE_ROOT"}) {
    EXPECT_EQ(env.at(dir).rfind("/tmp", 0), 0u) << dir << " is not on the writable /tmp emptyDir";
  }
}

// Every spelling vLLM's FlexibleArgumentParser maps onto a flag the operator sets: underscores,
// `=value`, argparse prefixes, short aliases with attached values; and inputs the agent did not verify.
TEST(VllmEngine, RefusesEverySpellingOfAnOwnedFlagAndUnverifiedInputs) {
  for (std::string a : {"--max_model_len=4096", "--max-model-len", "--max-model", "--tensor_parallel_size",
                        "-tp", "-tp8", "--model=/elsewhere", "--kv_cache_dtype", "-q", "--served_model_name",
                        "--config", "--tokenizer=/tmp/t", "--download-dir", "--load_format", "--lora-modules",
                        "--speculative-config", "--hf-config-path"}) {
    auto e = engine_command(config([&](Json& j) {
                              j["spec"]["engine"] = {{"kind", "vllm"}, {"image", "v"}, {"args", {a, "x"}}};
                              j["spec"]["serving"]["weightFormat"] = "bf16";
                              j["spec"]["serving"]["kvCacheDtype"] = "fp8";
                            }),
                            "m", Layout{}, Images{});
    ASSERT_FALSE(e.ok()) << a << " was accepted";
    EXPECT_EQ(e.error().reason(), "ConflictingEngineArgs") << a;
    EXPECT_NE(e.error().message().find(a), std::string::npos) << e.error().message();
  }
  auto fine = engine_command(
      config([](Json& j) {
        j["spec"]["engine"] = {
            {"kind", "vllm"},
            {"image", "v"},
            {"args", {"--gpu-memory-utilization=0.85", "--enable-prefix-caching", "--trust-remote-code"}}};
        j["spec"]["serving"]["weightFormat"] = "bf16";
        j["spec"]["serving"]["kvCacheDtype"] = "fp8";
      }),
      "m", Layout{}, Images{});
  EXPECT_TRUE(fine.ok()) << fine.error().to_string();
}

TEST(VllmEngine, BfloatAndFloatKvOfTheOtherTypeBothRunUnquantized) {
  auto e = engine_command(config([](Json& j) {
                            j["spec"]["engine"] = {{"kind", "vllm"}, {"image", "v"}};
                            j["spec"]["serving"]["weightFormat"] = "fp16";
                            j["spec"]["serving"]["kvCacheDtype"] = "bf16";
                          }),
                          "m", Layout{}, Images{});
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  EXPECT_EQ(arg(e->container.args, "--dtype"), "float16");
}

TEST(Engines, RefusesAnImageOlderThanEveryProfileRow) {
  auto e = engine_command(config([](Json& j) {
                            j["spec"]["engine"] = {{"kind", "vllm"}, {"image", "vllm/vllm-openai:v0.5.4"}};
                            j["spec"]["serving"]["weightFormat"] = "bf16";
                            j["spec"]["serving"]["kvCacheDtype"] = "fp8";
                          }),
                          "m", Layout{}, Images{});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().reason(), "UnsupportedEngineVersion");
  EXPECT_NE(e.error().message().find("v0.5.4"), std::string::npos) << e.error().message();
  EXPECT_NE(e.error().message().find("spec.engine.image"), std::string::npos);
}

TEST(EngineProfiles, ReadTheVersionFromEachEnginesImageTags) {
  EXPECT_EQ(image_engine_version(EngineKind::kVllm, "vllm/vllm-openai:v0.11.0"), (EngineVersion{0, 11, 0}));
  EXPECT_EQ(image_engine_version(EngineKind::kSglang, "lmsysorg/sglang:v0.5.3-cu126"),
            (EngineVersion{0, 5, 3}));
  EXPECT_EQ(image_engine_version(EngineKind::kSglang, "lmsysorg/sglang:v0.4"), (EngineVersion{0, 4, 0}));
  EXPECT_EQ(image_engine_version(EngineKind::kVllm, "registry:5000/vllm:v0.10.2@sha256:abc"),
            (EngineVersion{0, 10, 2}));
  EXPECT_EQ(image_engine_version(EngineKind::kLlamacpp, "ghcr.io/ggml-org/llama.cpp:server-cuda-b6500"),
            (EngineVersion{0, 6500, 0}));
  EXPECT_EQ(image_engine_version(EngineKind::kLlamacpp, "ghcr.io/ggml-org/llama.cpp:server-b5000"),
            (EngineVersion{0, 5000, 0}));
  EXPECT_FALSE(image_engine_version(EngineKind::kVllm, "vllm/vllm-openai:latest"));
  EXPECT_FALSE(image_engine_version(EngineKind::kVllm, "vllm/vllm-openai@sha256:abc"));
  EXPECT_FALSE(image_engine_version(EngineKind::kVllm, "registry:5000/vllm"));
  EXPECT_FALSE(image_engine_version(EngineKind::kLlamacpp, "ghcr.io/ggml-org/llama.cpp:server-cuda"));
}

// Each profile row is the data the adapters and gates read: the rows stay consistent with the
// adapters' refusals and with what the CRD says per engine.
TEST(EngineProfiles, EveryRowNamesItsCommandKvSpellingsAndOwnedFlags) {
  for (const auto& p : engine_profiles()) {
    SCOPED_TRACE(std::string(p.name) + " " + std::string(p.release));
    EXPECT_FALSE(p.command.empty());
    EXPECT_FALSE(p.kv_cache_dtype.empty());
    EXPECT_FALSE(p.owned.empty());
    for (const auto& f : p.owned) EXPECT_FALSE(f.spellings.empty());
    for (const auto& m : p.quantization_passed) {
      bool listed = false;
      for (const auto& [wf, methods] : p.quantization_methods)
        listed = listed || std::find(methods.begin(), methods.end(), m) != methods.end();
      EXPECT_TRUE(listed) << m;
    }
  }
}

TEST(SglangEngine, TurnsMetricsOnAndRefusesItsAliasesAndPrefixes) {
  auto make = [](std::vector<std::string> args) {
    return engine_command(
        config([&](Json& j) {
          j["spec"]["engine"] = {{"kind", "sglang"}, {"image", "lmsysorg/sglang:v0.5.3"}, {"args", args}};
          j["spec"]["serving"]["weightFormat"] = "bf16";
          j["spec"]["serving"]["kvCacheDtype"] = "fp8";
        }),
        "m", Layout{}, Images{});
  };
  auto e = make({});
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  EXPECT_TRUE(has(e->container.args, "--enable-metrics"));
  EXPECT_EQ(e->container.env.at("USER"), "infergate");
  for (std::string a : {"--model", "--model=/x", "--tensor-parallel-size", "--tp", "--tp-size=2", "--context",
                        "--config", "--tokenizer-path", "--speculative-draft-model-path"}) {
    auto bad = make({a, "1"});
    ASSERT_FALSE(bad.ok()) << a;
    EXPECT_EQ(bad.error().reason(), "ConflictingEngineArgs") << a;
  }
  // SGLang's argparse does not rewrite underscores: --tp_size is the engine's own error, not an override.
  EXPECT_TRUE(make({"--mem-fraction-static", "0.85"}).ok());
}

TEST(LlamacppEngine, FlashAttentionSpelledForTheImagesBuildAndDownloadsRefused) {
  auto make = [](std::string image, std::vector<std::string> args = {}) {
    return engine_command(
        config([&](Json& j) {
          j["spec"]["engine"] = {
              {"kind", "llamacpp"}, {"image", image}, {"modelFile", "m.gguf"}, {"args", args}};
        }),
        "m", Layout{}, Images{});
  };
  auto old = make("ghcr.io/ggml-org/llama.cpp:server-b5000");
  ASSERT_TRUE(old.ok()) << old.error().to_string();
  const auto& a = old->container.args;
  auto fa = std::find(a.begin(), a.end(), "--flash-attn");
  ASSERT_NE(fa, a.end());
  EXPECT_TRUE(fa + 1 == a.end() || (fa + 1)->rfind("-", 0) == 0) << "a bare switch before b6327";
  auto now = make("ghcr.io/ggml-org/llama.cpp:server-cuda-b6500");
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(arg(now->container.args, "--flash-attn"), "on");
  EXPECT_TRUE(has(now->container.args, "--metrics"));
  for (std::string bad :
       {"-hf", "--hf-repo", "-mu", "--model-url", "-dr", "--lora", "-m", "--ctx_size", "-fa"}) {
    auto e = make("ghcr.io/ggml-org/llama.cpp:server", {bad, "x"});
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.error().reason(), "ConflictingEngineArgs") << bad;
  }
  // llama.cpp has no --flag=value and no prefixes: "--ctx" is its own (unknown) flag.
  EXPECT_TRUE(make("ghcr.io/ggml-org/llama.cpp:server", {"--threads", "8"}).ok());
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
  EXPECT_EQ(e->container.command, std::vector<std::string>{"/app/llama-server"});
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
