// `make-test-model` and `quantize`: thin flag parsing over runtime/model (test_model.h, quantize.h).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <map>

#include "cli/command.h"
#include "infergate/common/json.h"
#include "infergate/runtime/model/quantize.h"
#include "infergate/runtime/model/test_model.h"

namespace infergate::runtime::cli {
namespace {
namespace m = infergate::runtime::model;

int fail(std::string_view command, const Error& e) {
  std::cerr << "infergate-runtime " << command << ": " << e.to_string() << "\n";
  return 1;
}

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return buf;
}

const bool kMakeTestModel = register_command(
    {"make-test-model", "write a deterministic synthetic checkpoint (HF layout) with a small BPE tokenizer",
     [](CLI::App& app) {
       auto o = std::make_shared<m::TestModelOptions>();
       auto arch = std::make_shared<std::string>();
       auto dtype = std::make_shared<std::string>("f16");
       app.add_option("--out", o->out, "output directory (created; must be empty unless --force)")
           ->required();
       app.add_option("--arch", *arch,
                      "llama, qwen2, glm, glm4, glm4_moe (GLM-4.5's routed experts), deepseek_v3 or kimi_k2 "
                      "(multi-head latent attention over the same experts)")
           ->required()
           ->check(CLI::IsMember({"llama", "qwen2", "glm", "glm4", "glm4_moe", "deepseek_v3", "kimi_k2"}));
       app.add_option("--layers", o->layers, "decoder layers")->capture_default_str();
       app.add_option("--hidden", o->hidden, "hidden size")->capture_default_str();
       app.add_option("--heads", o->heads, "attention heads")->capture_default_str();
       app.add_option("--kv-heads", o->kv_heads, "key/value heads (grouped-query attention)")
           ->capture_default_str();
       app.add_option("--vocab", o->vocab, "vocabulary size (>= 260)")->capture_default_str();
       app.add_option("--seed", o->seed, "random seed")->capture_default_str();
       app.add_option("--intermediate", o->intermediate,
                      "MLP size (default: 8/3 x hidden, rounded up to 32)");
       app.add_option("--outlier-channels", o->outlier_channels,
                      "key channels per KV head given large magnitudes (rounded up to whole rotary pairs)")
           ->capture_default_str();
       app.add_option("--dtype", *dtype, "f16, bf16 or f32")
           ->check(CLI::IsMember({"f16", "bf16", "f32"}))
           ->capture_default_str();
       app.add_option("--max-position", o->max_position, "max_position_embeddings")->capture_default_str();
       app.add_flag("--tie-embeddings", o->tie_embeddings, "share the embedding matrix with lm_head");
       app.add_option("--max-shard-bytes", o->max_shard_bytes,
                      "split the weights into shards of at most this many bytes, with an index (0: one file)")
           ->capture_default_str();
       app.add_flag("--force", o->force, "replace a non-empty output directory");
       m::TestMoeOptions& moe = o->moe;
       app.add_option("--experts", moe.experts, "glm4_moe: routed experts")->capture_default_str();
       app.add_option("--experts-per-token", moe.experts_per_token, "glm4_moe: experts chosen per token")
           ->capture_default_str();
       app.add_option("--expert-groups", moe.groups, "glm4_moe: expert groups (n_group)")
           ->capture_default_str();
       app.add_option("--topk-groups", moe.topk_groups,
                      "glm4_moe: groups a token may choose from (topk_group)")
           ->capture_default_str();
       app.add_option("--shared-experts", moe.shared_experts, "glm4_moe: shared experts")
           ->capture_default_str();
       app.add_option("--dense-layers", moe.dense_layers, "glm4_moe: leading layers with a dense MLP")
           ->capture_default_str();
       app.add_option("--moe-intermediate", moe.intermediate,
                      "glm4_moe: each expert's width (default: hidden / 2, rounded up to 16)");
       app.add_option("--routed-scaling", moe.routed_scaling, "glm4_moe: routed_scaling_factor")
           ->capture_default_str();
       app.add_flag("!--no-qk-norm", moe.qk_norm, "glm4_moe: no per-head q/k norms (as GLM-4.5-Air)");
       m::TestMlaOptions& mla = o->mla;
       app.add_option("--q-lora-rank", mla.q_lora_rank,
                      "deepseek_v3: low-rank query width (0: a plain q_proj)")
           ->capture_default_str();
       app.add_option("--kv-lora-rank", mla.kv_lora_rank, "deepseek_v3: the cached latent's width")
           ->capture_default_str();
       app.add_option("--qk-nope-head-dim", mla.qk_nope_head_dim,
                      "deepseek_v3: per-head key width without rope")
           ->capture_default_str();
       app.add_option("--qk-rope-head-dim", mla.qk_rope_head_dim, "deepseek_v3: the shared rope key's width")
           ->capture_default_str();
       app.add_option("--v-head-dim", mla.v_head_dim, "deepseek_v3: per-head value width")
           ->capture_default_str();
       app.add_flag("!--no-yarn", mla.yarn, "deepseek_v3: plain rope instead of YaRN");
       m::TestPublishedOptions& pub = o->published;
       app.add_option(
           "--weight-format", pub.format,
           "write the linear layers as a published release does: fp8-block (DeepSeek-V3, Kimi-K2-Instruct), "
           "fp8-channel (GLM-4.5/4.6-FP8), int4-ct-<gG|ch>-<sym|asym> (compressed-tensors, Kimi-K2-Thinking: "
           "int4-ct-g32-sym), awq-<gG>, gptq-<gG>[-v2]; default: dense");
       auto modules = std::make_shared<std::string>("default");
       app.add_option(
              "--quantized-modules", *modules,
              "which linears --weight-format quantizes: default (routed experts for int4-ct on MoE, as "
              "Kimi-K2-Thinking; every linear but lm_head otherwise), all, routed-experts")
           ->check(CLI::IsMember({"default", "all", "routed-experts"}))
           ->capture_default_str();
       app.add_flag("--act-order", pub.act_order,
                    "int4-ct and gptq: group columns by activation order (g_idx)");
       app.add_flag("--ue8m0-scales", pub.ue8m0, "fp8-block: power-of-two scales (scale_fmt ue8m0)");
       return [o, arch, dtype, modules]() {
         using Modules = m::TestPublishedOptions::Modules;
         o->published.modules = *modules == "all"              ? Modules::kAllLinear
                                : *modules == "routed-experts" ? Modules::kRoutedExperts
                                                               : Modules::kDefault;
         static const std::map<std::string, m::Architecture> archs = {
             {"llama", m::Architecture::kLlama},       {"qwen2", m::Architecture::kQwen2},
             {"glm", m::Architecture::kGlm},           {"glm4", m::Architecture::kGlm4},
             {"glm4_moe", m::Architecture::kGlm4Moe},  {"deepseek_v3", m::Architecture::kDeepseekV3},
             {"kimi_k2", m::Architecture::kDeepseekV3}};
         o->arch = archs.at(*arch);
         o->mla.kimi = *arch == "kimi_k2";
         o->dtype = *dtype == "f16" ? m::DType::kF16 : *dtype == "bf16" ? m::DType::kBF16 : m::DType::kF32;
         Status s = m::make_test_model(*o);
         if (!s.ok()) return fail("make-test-model", s.error());
         std::cout << "wrote " << o->out.string() << "\n";
         return 0;
       };
     }});

std::atomic<bool> g_interrupted{false};
void on_signal(int) { g_interrupted.store(true); }

const bool kQuantize = register_command(
    {"quantize",
     "compress a checkpoint's linear layers to int8 or int4 (streaming, deterministic, atomic output)",
     [](CLI::App& app) {
       auto o = std::make_shared<m::QuantizeOptions>();
       auto format = std::make_shared<std::string>();
       auto group = std::make_shared<int64_t>(128);
       auto scale = std::make_shared<std::string>("f16");
       auto json = std::make_shared<bool>(false);
       app.add_option("--model", o->model, "input model directory (Hugging Face layout, safetensors)")
           ->required();
       app.add_option("--out", o->out, "output directory (must be empty or absent unless --force)")
           ->required();
       app.add_option("--weight-format", *format, "int8 (per output channel) or int4 (group-wise)")
           ->required()
           ->check(CLI::IsMember({"int8", "int4"}));
       app.add_option("--group-size", *group, "int4 group size along the input dimension")
           ->capture_default_str();
       app.add_flag("--symmetric", o->scheme.symmetric,
                    "int4 without zero points (int8 is always symmetric); default: asymmetric int4");
       app.add_option("--scale-dtype", *scale, "f16 or bf16 scales")
           ->check(CLI::IsMember({"f16", "bf16"}))
           ->capture_default_str();
       app.add_flag("--quantize-lm-head", o->quantize_lm_head,
                    "quantize lm_head too (kept unquantized by default)");
       app.add_option("--threads", o->threads, "worker threads (0: the machine's cores, at most 8)")
           ->capture_default_str();
       app.add_flag("--force", o->force, "replace a non-empty output directory");
       app.add_flag("--json", *json, "print the report as one JSON object");
       o->scheme.symmetric = false;
       return [o, format, group, scale, json]() {
         o->scheme.format = *format == "int8" ? m::WeightFormat::kInt8 : m::WeightFormat::kInt4;
         o->scheme.group_size = o->scheme.format == m::WeightFormat::kInt4 ? *group : 0;
         if (o->scheme.format == m::WeightFormat::kInt8) o->scheme.symmetric = true;
         o->scheme.scale_dtype = *scale == "bf16" ? m::DType::kBF16 : m::DType::kF16;
         o->cancel = &g_interrupted;
         struct sigaction sa {};
         sa.sa_handler = on_signal;
         sigemptyset(&sa.sa_mask);
         sigaction(SIGINT, &sa, nullptr);
         sigaction(SIGTERM, &sa, nullptr);
         const bool tty = isatty(STDERR_FILENO) == 1;
         if (tty) {
           o->progress = [](const m::QuantizeProgress& p) {
             double pct = p.bytes_total
                              ? 100.0 * static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total)
                              : 100;
             std::fprintf(stderr, "\r\033[K[%zu/%zu] %5.1f%%  %.*s", p.tensor_index + 1, p.tensor_count, pct,
                          static_cast<int>(std::min<size_t>(p.tensor.size(), 70)), p.tensor.data());
             std::fflush(stderr);
           };
         }
         auto r = m::quantize_model(*o);
         if (tty) std::fprintf(stderr, "\r\033[K");
         if (!r.ok()) return fail("quantize", r.error());
         const m::QuantizeReport& q = *r;
         double gbps = q.seconds > 0 ? static_cast<double>(q.input_bytes) / q.seconds / 1e9 : 0;
         double peak_frac =
             q.input_bytes ? static_cast<double>(q.peak_rss_bytes) / static_cast<double>(q.input_bytes) : 0;
         if (*json) {
           Json j = {{"input_bytes", q.input_bytes},
                     {"output_bytes", q.output_bytes},
                     {"tensors_quantized", q.tensors_quantized},
                     {"tensors_copied", q.tensors_copied},
                     {"max_rel_error", q.max_rel_error},
                     {"mean_rms_rel_error", q.mean_rms_rel_error},
                     {"seconds", q.seconds},
                     {"throughput_gb_per_s", gbps},
                     {"peak_rss_bytes", q.peak_rss_bytes},
                     {"peak_rss_fraction_of_model", peak_frac}};
           std::cout << j.dump() << "\n";
         } else {
           std::printf("quantized %zu tensors to %s, copied %zu; %s -> %s in %.2f s (%.2f GB/s of input)\n",
                       q.tensors_quantized, format->c_str(), q.tensors_copied,
                       human_bytes(q.input_bytes).c_str(), human_bytes(q.output_bytes).c_str(), q.seconds,
                       gbps);
           std::printf(
               "peak memory %s (%.1f%% of the model's %s); max relative error %.4f, mean RMS relative error "
               "%.4f\n",
               human_bytes(q.peak_rss_bytes).c_str(), 100 * peak_frac, human_bytes(q.input_bytes).c_str(),
               q.max_rel_error, q.mean_rms_rel_error);
         }
         return 0;
       };
     }});

}  // namespace
}  // namespace infergate::runtime::cli
