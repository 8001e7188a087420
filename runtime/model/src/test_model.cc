// The synthetic test-model generator (see test_model.h for the weight scheme).
#include "infergate/runtime/model/test_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/runtime/model/checkpoint.h"
#include "infergate/runtime/model/published_weights.h"
#include "infergate/runtime/model/safetensors_writer.h"
#include "infergate/runtime/model/staged_dir.h"
#include "infergate/runtime/model/tokenizer.h"
#include "infergate/weights/quantization_config.h"

namespace infergate::runtime::model {
namespace {
namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

constexpr std::string_view kTrainingText =
    R"TEXT(The model server starts only after the init container has checked every file against the signed manifest.
If a shard changed, the digest differs, and the pod never becomes ready; the operator rolls the canary back.
Weights are compressed from sixteen bits to eight or four, and the KV cache can be quantized as well, which
lets the same GPU hold longer contexts and more concurrent requests. Each change is released as its own stage:
first the weights, then the cache, then the capacity. A stage is promoted only when quality and latency gates
pass; otherwise it is rolled back automatically, and the stable replicas keep serving.
It's a careful process, isn't it? We'll measure everything: tokens per second, time to first token, queue time.
They'd rather wait for the numbers than guess. I've seen rollouts fail because nobody looked at the KL divergence.
Numbers: 1, 2, 3, 10, 42, 128, 256, 1024, 4096, 32768, 131072; 3.14159, 2.71828, 0.001, 99.9%.
Dates like 2024-05-17 and times like 12:30:45 appear in logs, next to sizes such as 7.2 GiB and 141 GB.

部署大语言模型时，服务进程只会在初始化容器验证所有文件之后启动。如果任何一个分片被修改，摘要就会不同，
容器不会进入就绪状态，控制器会自动回滚金丝雀版本。权重可以从十六位压缩到八位或四位，键值缓存也可以量化，
这样同一块显卡就能容纳更长的上下文和更多的并发请求。每一次变更都作为单独的阶段发布：先是权重，然后是缓存，
最后是容量。只有质量和延迟指标都通过时才会推广，否则自动回滚，稳定版本继续提供服务。
我们测量每秒生成的令牌数、首个令牌的延迟和排队时间。模型、数据、验证、签名、发布、回滚、指标、质量。

Привет! Модель загружается только после проверки подписи. Bonjour, le modèle démarre après la vérification.
Hola, el modelo se carga después de verificar la firma. こんにちは、署名を確認してからモデルを読み込みます。

def quantize(weights, group_size=128):
    scales = [max(abs(w) for w in group) / 7 for group in chunks(weights, group_size)]
    return [round(w / s) for w, s in zip(weights, scales)]

for (int i = 0; i < n; ++i) { out[i] = scale * static_cast<float>(q[i]); }
{"model": "test", "weight_format": "int4", "kv_cache_dtype": "int8", "max_context_length": 32768}
)TEXT";

const std::vector<std::string> kSpecialTokens = {"<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>",
                                                 "<|im_end|>"};
constexpr std::string_view kChatTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% "
    "endif %}";

// xoshiro256** seeded by splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& s : s_) s = splitmix(seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Approximately standard normal: the sum of six uniforms, centred and scaled to unit variance.
  double normal() {
    double sum = 0;
    for (int k = 0; k < 3; ++k) {
      uint64_t x = next();
      sum += static_cast<double>(x >> 32) * 0x1p-32 + static_cast<double>(x & 0xffffffffu) * 0x1p-32;
    }
    return (sum - 3.0) * 1.4142135623730951;
  }
  static uint64_t splitmix(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

uint64_t seed_for(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  uint64_t x = seed ^ h;
  return Rng::splitmix(x);
}

Error option_error(std::string_view flag, std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::string(flag) + ": " + message, "InvalidOption")
      .with_detail("option", std::string(flag));
}

Status validate_moe(const TestModelOptions& o) {
  const TestMoeOptions& m = o.moe;
  if (m.experts < 2 || m.experts > 1024) return option_error("--experts", "must be in [2, 1024]");
  if (m.groups < 1 || m.experts % m.groups != 0)
    return option_error("--expert-groups", "must divide --experts");
  if (m.groups > 1 && m.experts / m.groups < 2) {
    return option_error("--expert-groups", "groups score by their two best experts: at least 2 per group");
  }
  if (m.topk_groups < 1 || m.topk_groups > m.groups)
    return option_error("--topk-groups", "must be in [1, --expert-groups]");
  if (m.experts_per_token < 1 || m.experts_per_token > m.topk_groups * (m.experts / m.groups)) {
    return option_error("--experts-per-token", "must be at least 1 and fit in the --topk-groups groups kept");
  }
  if (m.shared_experts < 0 || m.shared_experts > 16)
    return option_error("--shared-experts", "must be in [0, 16]");
  if (m.dense_layers < 0 || m.dense_layers > o.layers)
    return option_error("--dense-layers", "must be in [0, --layers]");
  if (m.intermediate < 0 || m.intermediate > 8 * 65536)
    return option_error("--moe-intermediate", "must be positive");
  if (!(m.routed_scaling > 0) || !std::isfinite(m.routed_scaling))
    return option_error("--routed-scaling", "must be positive");
  return ok_status();
}

Status validate_mla(const TestModelOptions& o) {
  const TestMlaOptions& m = o.mla;
  if (m.q_lora_rank < 0 || m.q_lora_rank > 65536)
    return option_error("--q-lora-rank", "must be in [0, 65536]");
  if (m.kv_lora_rank < 1 || m.qk_nope_head_dim < 1 || m.v_head_dim < 1)
    return option_error("--kv-lora-rank",
                        "--kv-lora-rank, --qk-nope-head-dim and --v-head-dim must be positive");
  if (m.qk_rope_head_dim < 2 || m.qk_rope_head_dim % 2 != 0)
    return option_error("--qk-rope-head-dim", "must be even and at least 2");
  if (m.kv_lora_rank + m.qk_rope_head_dim > 1024)
    return option_error("--kv-lora-rank", "the cached row (latent + rope) must be at most 1024 wide");
  if (o.outlier_channels > m.kv_lora_rank)
    return option_error("--outlier-channels", "at most --kv-lora-rank latent channels");
  return ok_status();
}

Status validate(const TestModelOptions& o) {
  if (o.arch != Architecture::kLlama && o.arch != Architecture::kQwen2 && o.arch != Architecture::kGlm &&
      o.arch != Architecture::kGlm4 && o.arch != Architecture::kGlm4Moe &&
      o.arch != Architecture::kDeepseekV3) {
    return option_error("--arch", "expected llama, qwen2, glm, glm4, glm4_moe, deepseek_v3 or kimi_k2");
  }
  if (o.layers < 1 || o.layers > 1024) return option_error("--layers", "must be in [1, 1024]");
  if (o.hidden < 8 || o.hidden > 65536) return option_error("--hidden", "must be in [8, 65536]");
  const bool mla = o.arch == Architecture::kDeepseekV3;  // head sizes of its own, one KV row per token
  if (o.heads < 1 || (!mla && o.hidden % o.heads != 0))
    return option_error("--heads", "must divide --hidden");
  if (!mla && (o.hidden / o.heads) % 2 != 0)
    return option_error("--heads", "hidden / heads (the head size) must be even");
  if (o.arch == Architecture::kGlm || o.arch == Architecture::kGlm4 || o.arch == Architecture::kGlm4Moe) {
    if ((o.hidden / o.heads) % 4 != 0)
      return option_error("--heads", "GLM's half rotary needs a head size divisible by 4");
  }
  if (!mla && (o.kv_heads < 1 || o.heads % o.kv_heads != 0))
    return option_error("--kv-heads", "must divide --heads");
  const int64_t min_vocab = 256 + static_cast<int64_t>(kSpecialTokens.size());
  if (o.vocab < min_vocab || o.vocab > (1 << 20)) {
    return option_error("--vocab", "must be in [" + std::to_string(min_vocab) +
                                       ", 1048576] (256 byte tokens and 4 specials)");
  }
  if (o.intermediate < 0 || o.intermediate > 8 * 65536)
    return option_error("--intermediate", "must be positive");
  if (o.max_position < 16 || o.max_position > (1 << 24))
    return option_error("--max-position", "must be in [16, 2^24]");
  if (o.dtype != DType::kF16 && o.dtype != DType::kBF16 && o.dtype != DType::kF32) {
    return option_error("--dtype", "expected f16, bf16 or f32");
  }
  if (o.arch == Architecture::kGlm4Moe || mla) INFERGATE_RETURN_IF_ERROR(validate_moe(o));
  if (mla) INFERGATE_RETURN_IF_ERROR(validate_mla(o));
  return ok_status();
}

std::string torch_dtype_name(DType t) {
  return t == DType::kF16 ? "float16" : t == DType::kBF16 ? "bfloat16" : "float32";
}

int64_t moe_intermediate(const TestModelOptions& o) {
  return o.moe.intermediate > 0 ? o.moe.intermediate : (o.hidden / 2 + 15) / 16 * 16;
}

OJson config_json(const TestModelOptions& o, int64_t intermediate, int64_t bos, int64_t eos, int64_t im_end) {
  const bool glm = o.arch == Architecture::kGlm || o.arch == Architecture::kGlm4;
  const bool glm_moe = o.arch == Architecture::kGlm4Moe;
  const bool deepseek = o.arch == Architecture::kDeepseekV3;
  OJson c;
  c["architectures"] = OJson::array({std::string(architecture_name(o.arch))});
  c["model_type"] = o.arch == Architecture::kLlama     ? "llama"
                    : o.arch == Architecture::kQwen2   ? "qwen2"
                    : o.arch == Architecture::kGlm     ? "glm"
                    : o.arch == Architecture::kGlm4    ? "glm4"
                    : o.arch == Architecture::kGlm4Moe ? "glm4_moe"
                    : o.mla.kimi                       ? "kimi_k2"
                                                       : "deepseek_v3";
  c["vocab_size"] = o.vocab;
  c["hidden_size"] = o.hidden;
  c["intermediate_size"] = intermediate;
  c["num_hidden_layers"] = o.layers;
  c["num_attention_heads"] = o.heads;
  c["num_key_value_heads"] = deepseek ? o.heads : o.kv_heads;
  c["head_dim"] = deepseek ? o.mla.qk_rope_head_dim : o.hidden / o.heads;  // transformers' DeepseekV3Config
  c["max_position_embeddings"] = o.max_position;
  c["hidden_act"] = "silu";
  c["rms_norm_eps"] = o.arch == Architecture::kQwen2 ? 1e-6 : 1e-5;
  c["rope_theta"] = 10000.0;
  if (glm || glm_moe) {
    c["partial_rotary_factor"] = 0.5;
    c["attention_bias"] = true;
    c["pad_token_id"] = eos;
  } else if (deepseek) {
    const TestMlaOptions& m = o.mla;
    c["attention_bias"] = false;
    c["q_lora_rank"] = m.q_lora_rank > 0 ? OJson(m.q_lora_rank) : OJson(nullptr);
    c["kv_lora_rank"] = m.kv_lora_rank;
    c["qk_nope_head_dim"] = m.qk_nope_head_dim;
    c["qk_rope_head_dim"] = m.qk_rope_head_dim;
    c["v_head_dim"] = m.v_head_dim;
    c["rope_interleave"] = true;
    c["topk_method"] = "noaux_tc";
    c["scoring_func"] = "sigmoid";
    if (m.yarn) {
      c["rope_scaling"] = {{"type", "yarn"},
                           {"factor", 4.0},
                           {"original_max_position_embeddings", o.max_position / 4},
                           {"beta_fast", 32.0},
                           {"beta_slow", 1.0},
                           {"mscale", 1.0},
                           {"mscale_all_dim", 1.0}};
    } else {
      c["rope_scaling"] = nullptr;
    }
  } else if (o.arch == Architecture::kLlama) {
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
    c["rope_scaling"] = nullptr;
  } else {
    c["use_sliding_window"] = false;
    c["sliding_window"] = o.max_position;
    c["max_window_layers"] = o.layers;
  }
  if (glm_moe || deepseek) {
    const TestMoeOptions& m = o.moe;
    if (glm_moe) c["use_qk_norm"] = m.qk_norm;
    c["n_routed_experts"] = m.experts;
    c["n_shared_experts"] = m.shared_experts;
    c["num_experts_per_tok"] = m.experts_per_token;
    c["moe_intermediate_size"] = moe_intermediate(o);
    c["first_k_dense_replace"] = m.dense_layers;
    c["n_group"] = m.groups;
    c["topk_group"] = m.topk_groups;
    c["routed_scaling_factor"] = m.routed_scaling;
    c["norm_topk_prob"] = true;
    c["num_nextn_predict_layers"] = 0;
  }
  c["attention_dropout"] = 0.0;
  c["tie_word_embeddings"] = o.tie_embeddings;
  c["torch_dtype"] = torch_dtype_name(o.dtype);
  c["bos_token_id"] = bos;
  c["eos_token_id"] = OJson::array({eos, im_end});
  c["infergate_test_model"] = {{"generator", "infergate-runtime make-test-model"},
                               {"seed", o.seed},
                               {"outlier_channels", o.outlier_channels},
                               {"outlier_scale", kOutlierScale},
                               {"logit_std", kLogitStd}};
  return c;
}

// The channels (within a head) that carry outliers in `layer`: whole rotary pairs, chosen per layer.
// For multi-head latent attention: channels of the latent, chosen per layer.
std::set<int64_t> outlier_channels(const TestModelOptions& o, const ModelConfig& c, int64_t layer) {
  std::set<int64_t> out;
  if (o.outlier_channels <= 0) return out;
  if (c.mla) {
    const int64_t n = c.mla->kv_lora_rank;
    std::vector<int64_t> idx(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
    Rng rng(seed_for(o.seed, "outliers." + std::to_string(layer)));
    for (int64_t i = 0; i < o.outlier_channels; ++i) {
      const int64_t j = i + static_cast<int64_t>(rng.next() % static_cast<uint64_t>(n - i));
      std::swap(idx[static_cast<size_t>(i)], idx[static_cast<size_t>(j)]);
      out.insert(idx[static_cast<size_t>(i)]);
    }
    return out;
  }
  const int64_t half = c.rotary_dim / 2;
  const int64_t pairs = std::min<int64_t>((o.outlier_channels + 1) / 2, half);
  std::vector<int64_t> idx(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) idx[static_cast<size_t>(i)] = i;
  Rng rng(seed_for(o.seed, "outliers." + std::to_string(layer)));
  for (int64_t i = 0; i < pairs; ++i) {
    int64_t j = i + static_cast<int64_t>(rng.next() % static_cast<uint64_t>(half - i));
    std::swap(idx[static_cast<size_t>(i)], idx[static_cast<size_t>(j)]);
    int64_t p = idx[static_cast<size_t>(i)];
    if (c.rope_layout == RopeLayout::kInterleaved) {
      out.insert(2 * p);
      out.insert(2 * p + 1);
    } else {
      out.insert(p);
      out.insert(p + half);
    }
  }
  return out;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// How one tensor is drawn: value = mean + std * normal, times a per-row factor (per element for
// vectors: biases and norms) and a per-column one.
struct Plan {
  double mean = 0, std = 0;
  std::vector<float> row_scale;  // empty: all 1
  std::vector<float> col_scale;  // empty: all 1
};

Plan plan_for(const ExpectedTensor& t, const TestModelOptions& o, const ModelConfig& c) {
  Plan p;
  const double H = static_cast<double>(c.hidden_size);
  const double two_l = 2.0 * static_cast<double>(c.num_hidden_layers);
  const std::string& n = t.name;
  if (n == "model.embed_tokens.weight") {
    p.std = c.tie_word_embeddings ? kLogitStd / std::sqrt(H) : 1.0;
  } else if (n == "lm_head.weight") {
    p.std = kLogitStd / std::sqrt(H);
  } else if (ends_with(n, "norm.weight")) {
    p.mean = 1.0;
    p.std = 0.05;
  } else if (ends_with(n, ".bias")) {
    p.std = 0.1;
  } else if (ends_with(n, ".e_score_correction_bias")) {
    p.std = kRouterBiasStd;
  } else if (ends_with(n, "o_proj.weight") || ends_with(n, "down_proj.weight")) {
    p.std = 1.0 / std::sqrt(static_cast<double>(t.shape[1])) / std::sqrt(two_l);  // each of its own width
  } else {
    p.std = 1.0 / std::sqrt(static_cast<double>(t.shape[1]));  // q, k, v, gate, up, MLA's projections
  }
  // Outlier key channels: on k_proj's rows, or with per-head q/k norms on k_norm (which would
  // otherwise normalise them away); the query side is divided by the same factor, so q.k is unchanged.
  if (c.mla && o.outlier_channels > 0) {
    // Latent outliers: kv_a_layernorm's weight up on the chosen channels, kv_b_proj's columns down.
    const bool norm = n.find(".self_attn.kv_a_layernorm.") != std::string::npos;
    const bool up = n.find(".self_attn.kv_b_proj.") != std::string::npos;
    if (norm || up) {
      const int64_t layer = std::stoll(n.substr(std::string("model.layers.").size()));
      std::vector<float>& scale = norm ? p.row_scale : p.col_scale;
      scale.assign(static_cast<size_t>(c.mla->kv_lora_rank), 1.0f);
      for (int64_t ch : outlier_channels(o, c, layer))
        scale[static_cast<size_t>(ch)] = norm ? kOutlierScale : 1.0f / kOutlierScale;
    }
    return p;
  }
  const std::string_view q_part = c.qk_norm ? ".self_attn.q_norm." : ".self_attn.q_proj.";
  const std::string_view k_part = c.qk_norm ? ".self_attn.k_norm." : ".self_attn.k_proj.";
  const bool is_q = n.find(q_part) != std::string::npos;
  const bool is_k = n.find(k_part) != std::string::npos;
  if ((is_q || is_k) && o.outlier_channels > 0) {
    int64_t layer = std::stoll(n.substr(std::string("model.layers.").size()));
    std::set<int64_t> ch = outlier_channels(o, c, layer);
    p.row_scale.assign(static_cast<size_t>(t.shape[0]), 1.0f);
    for (size_t r = 0; r < p.row_scale.size(); ++r) {
      if (ch.count(static_cast<int64_t>(r) % c.head_dim))
        p.row_scale[r] = is_k ? kOutlierScale : 1.0f / kOutlierScale;
    }
  }
  return p;
}

void encode_values(const float* v, size_t n, DType dtype, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(out + 4 * i, &v[i], 4);
    } else {
      uint16_t h = dtype == DType::kF16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
  }
}

// Values [start, start + m) of a tensor of `cols` columns, drawn from `rng` in element order.
void draw_values(Rng& rng, const Plan& plan, uint64_t cols, uint64_t start, uint64_t m, float* vals) {
  for (uint64_t i = 0; i < m; ++i) {
    double v = plan.mean + plan.std * rng.normal();
    if (!plan.row_scale.empty()) v *= plan.row_scale[(start + i) / cols];
    if (!plan.col_scale.empty()) v *= plan.col_scale[(start + i) % cols];
    vals[i] = static_cast<float>(v);
  }
}

uint64_t element_count(const ExpectedTensor& t) {
  uint64_t n = 1;
  for (uint64_t d : t.shape) n *= d;
  return n;
}

// A dense tensor, streamed in chunks, stored as `dtype`.
Status write_tensor(SafetensorsWriter& w, const ExpectedTensor& t, const Plan& plan,
                    const TestModelOptions& o, DType dtype) {
  Rng rng(seed_for(o.seed, t.name));
  const uint64_t n = element_count(t);
  const uint64_t cols = t.shape.size() < 2 ? 1 : t.shape.back();  // a vector's rows are its elements
  const size_t esize = dtype_size(dtype);
  constexpr uint64_t kChunk = 1u << 20;
  std::vector<float> vals;
  std::vector<uint8_t> bytes;
  for (uint64_t start = 0; start < n; start += kChunk) {
    uint64_t m = std::min(kChunk, n - start);
    vals.resize(m);
    draw_values(rng, plan, cols, start, m, vals.data());
    bytes.resize(m * esize);
    encode_values(vals.data(), m, dtype, bytes.data());
    INFERGATE_RETURN_IF_ERROR(w.write(t.name, bytes, start * esize));
  }
  return ok_status();
}

// A linear layer in a published format: the same values a dense model of these options holds (drawn
// alike and rounded to --dtype), quantized into the format's tensors.
Status write_published(SafetensorsWriter& w, const ExpectedTensor& t, const Plan& plan,
                       const TestModelOptions& o, const weights::Scheme& scheme) {
  Rng rng(seed_for(o.seed, t.name));
  const uint64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<float> vals(rows * cols);
  draw_values(rng, plan, cols, 0, vals.size(), vals.data());
  std::vector<uint8_t> stored(vals.size() * dtype_size(o.dtype));
  encode_values(vals.data(), vals.size(), o.dtype, stored.data());
  for (size_t i = 0; i < vals.size(); ++i) {
    if (o.dtype == DType::kF16) {
      uint16_t h;
      std::memcpy(&h, stored.data() + 2 * i, 2);
      vals[i] = f16_to_f32(h);
    } else if (o.dtype == DType::kBF16) {
      uint16_t h;
      std::memcpy(&h, stored.data() + 2 * i, 2);
      vals[i] = bf16_to_f32(h);
    }
  }
  INFERGATE_ASSIGN_OR_RETURN(std::vector<QuantizedPart> parts,
                             quantize_published_linear(t.name, vals.data(), rows, cols, scheme));
  for (const QuantizedPart& p : parts) INFERGATE_RETURN_IF_ERROR(w.write(p.spec.name, p.bytes));
  return ok_status();
}

// The published scheme make-test-model writes, from its options (nullopt for a dense model).
Result<std::optional<weights::Scheme>> published_scheme(const TestModelOptions& o) {
  const TestPublishedOptions& p = o.published;
  if (p.format.empty()) {
    if (p.act_order || p.ue8m0 || p.modules != TestPublishedOptions::Modules::kDefault) {
      return option_error("--weight-format",
                          "--act-order, --ue8m0-scales and --quantized-modules need a format");
    }
    return std::optional<weights::Scheme>();
  }
  auto parsed = weights::parse_format_word(p.format);
  if (!parsed.ok()) return option_error("--weight-format", parsed.error().message());
  weights::Scheme s = *parsed;
  using weights::Family;
  if (!weights::is_quantized(s.family) || s.family == Family::kInfergateInt8 ||
      s.family == Family::kInfergateInt4) {
    return option_error("--weight-format",
                        "'" + p.format +
                            "' is not a published format (fp8-block, fp8-channel, int4-ct-..., "
                            "awq-..., gptq-...); our int8/int4 come from `infergate-runtime quantize`");
  }
  if (p.act_order && s.family != Family::kCtInt4 && s.family != Family::kGptqInt4)
    return option_error("--act-order", "only int4-ct and gptq have an activation order");
  if (p.act_order && s.group_size == 0) return option_error("--act-order", "needs groups (not -ch)");
  if (p.ue8m0 && s.family != Family::kFp8Block)
    return option_error("--ue8m0-scales", "only fp8-block has ue8m0 scales");
  s.act_order = p.act_order;
  s.scale_ue8m0 = p.ue8m0;
  s.dense_dtype = o.dtype;
  switch (s.family) {
    case Family::kFp8Block: s.scale_dtype = weights::Dtype::kF32; break;  // DeepSeek-V3's weight_scale_inv
    case Family::kAwqInt4:
    case Family::kGptqInt4: s.scale_dtype = weights::Dtype::kF16; break;  // AutoAWQ / AutoGPTQ: fp16
    default: s.scale_dtype = s.dense_dtype; break;                        // compressed-tensors: the weights'
  }
  return std::optional<weights::Scheme>(s);
}

bool routed_experts_only(const TestModelOptions& o, const weights::Scheme& s) {
  using M = TestPublishedOptions::Modules;
  if (o.published.modules != M::kDefault) return o.published.modules == M::kRoutedExperts;
  const bool moe = o.arch == Architecture::kGlm4Moe || o.arch == Architecture::kDeepseekV3;
  return moe && s.family == weights::Family::kCtInt4;
}

// Whether make-test-model writes `t` quantized in the published scheme.
bool writes_quantized(const ExpectedTensor& t, bool experts_only) {
  const auto [module, suffix] = weights::split_tensor_name(t.name);
  if (suffix != "weight" || t.shape.size() != 2 || module == "lm_head") return false;
  if (weights::is_embedding_module(module) || weights::is_router_module(module)) return false;
  return !experts_only || module.find(".mlp.experts.") != std::string_view::npos;
}

// The config's exclusions: Kimi-K2-Thinking's ignore list when only routed experts are quantized;
// lm_head for compressed-tensors otherwise; nothing for fp8 / AWQ / GPTQ (whose loaders leave lm_head).
std::vector<std::string> published_exclusions(const weights::Scheme& s, bool experts_only) {
  if (experts_only) {
    return {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
            R"(re:.*mlp\.(gate|up|gate_up|down)_proj.*)"};
  }
  if (s.family == weights::Family::kCtInt4 || s.family == weights::Family::kFp8Channel) return {"lm_head"};
  return {};
}

std::string dump(const OJson& j) { return j.dump(2) + "\n"; }

// One tensor of the architecture as stored: dense (in `dtype`) or as a published format's parts.
struct StoredTensor {
  const ExpectedTensor* tensor = nullptr;
  bool quantized = false;
  DType dtype = DType::kF16;
  std::vector<TensorSpec> specs;
  uint64_t bytes() const {
    uint64_t b = 0;
    for (const TensorSpec& s : specs) {
      uint64_t n = dtype_size(s.dtype);
      for (uint64_t d : s.shape) n *= d;
      b += n;
    }
    return b;
  }
};

Result<std::vector<StoredTensor>> stored_tensors(const std::vector<ExpectedTensor>& tensors,
                                                 const TestModelOptions& o,
                                                 const std::optional<weights::Scheme>& scheme,
                                                 bool experts_only) {
  std::vector<StoredTensor> out;
  for (const ExpectedTensor& t : tensors) {
    StoredTensor st;
    st.tensor = &t;
    st.quantized = scheme && writes_quantized(t, experts_only);
    if (st.quantized) {
      INFERGATE_ASSIGN_OR_RETURN(st.specs, published_part_specs(t.name, t.shape[0], t.shape[1], *scheme)
                                               .context("--weight-format " + o.published.format));
    } else {
      // Published releases keep the router's score-correction bias in F32 (DeepSeek-V3, Kimi-K2, GLM-4.5).
      st.dtype = scheme && t.name.ends_with(".e_score_correction_bias") ? DType::kF32 : o.dtype;
      st.specs.push_back({t.name, st.dtype, t.shape});
    }
    out.push_back(std::move(st));
  }
  return out;
}

// The tensors of one shard, drawn in parallel: each comes from its own generator (seeded by its name)
// and goes to its own byte range (pwrite), so the file is the same for any thread count. A
// ~1B-parameter model (the CUDA decode benchmark's) takes minutes on one core.
Status write_shard(SafetensorsWriter& w, const std::vector<const StoredTensor*>& members,
                   const TestModelOptions& o, const ModelConfig& parsed,
                   const std::optional<weights::Scheme>& scheme) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::optional<Error> first_error;
  auto worker = [&] {
    for (size_t j = next++; j < members.size(); j = next++) {
      const StoredTensor& st = *members[j];
      const Plan plan = plan_for(*st.tensor, o, parsed);
      Status s = st.quantized ? write_published(w, *st.tensor, plan, o, *scheme)
                              : write_tensor(w, *st.tensor, plan, o, st.dtype);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first_error) first_error = s.error();
        next = members.size();
      }
    }
  };
  const size_t nthreads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < std::min(nthreads, members.size()); ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (first_error) return *first_error;
  return w.finish();
}

// Weights, in the architecture's order (a quantized linear's parts together), split into shards when
// asked, plus the index of a sharded checkpoint.
Status write_weights(const fs::path& dir, const std::vector<ExpectedTensor>& tensors,
                     const TestModelOptions& o, const ModelConfig& parsed,
                     const std::optional<weights::Scheme>& scheme, bool experts_only) {
  INFERGATE_ASSIGN_OR_RETURN(std::vector<StoredTensor> stored,
                             stored_tensors(tensors, o, scheme, experts_only));
  std::vector<std::vector<const StoredTensor*>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (const StoredTensor& st : stored) {
    const uint64_t b = st.bytes();
    if (o.max_shard_bytes > 0 && !shards.back().empty() && shard_bytes + b > o.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&st);
    shard_bytes += b;
    total += b;
  }
  const bool sharded = shards.size() > 1;
  std::vector<std::pair<std::string, std::string>> map_entries;
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    const std::string file = sharded ? std::string(name) : std::string("model.safetensors");
    std::vector<TensorSpec> specs;
    for (const StoredTensor* st : shards[s]) {
      for (const TensorSpec& spec : st->specs) {
        specs.push_back(spec);
        map_entries.emplace_back(spec.name, file);
      }
    }
    INFERGATE_ASSIGN_OR_RETURN(SafetensorsWriter w,
                               SafetensorsWriter::create(dir / file, specs, {{"format", "pt"}}));
    INFERGATE_RETURN_IF_ERROR(write_shard(w, shards[s], o, parsed, scheme));
  }
  if (sharded) {
    std::sort(map_entries.begin(), map_entries.end());
    OJson weight_map = OJson::object();
    for (const auto& [t, f] : map_entries) weight_map[t] = f;
    OJson index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    INFERGATE_RETURN_IF_ERROR(write_file_atomic(dir / "model.safetensors.index.json", dump(index)));
  }
  return ok_status();
}

// A published release made here must read back, through the one description, as the format asked for.
Status check_published(const fs::path& dir, const weights::Scheme& scheme) {
  INFERGATE_ASSIGN_OR_RETURN(ModelDirectory md, ModelDirectory::open(dir));
  INFERGATE_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(md));
  weights::ReleaseMetadata meta;
  INFERGATE_ASSIGN_OR_RETURN(weights::WeightDescription d, describe_checkpoint(md, ckpt, &meta));
  INFERGATE_ASSIGN_OR_RETURN(std::string want, weights::format_word(scheme));
  if (d.word != want) {
    return Error(ErrorCode::kInternal,
                 "make-test-model wrote a release that describes as " + d.word + ", not " + want);
  }
  return ok_status();
}

}  // namespace

std::string_view test_model_training_text() { return kTrainingText; }

Status make_test_model(const TestModelOptions& o) {
  INFERGATE_RETURN_IF_ERROR(validate(o));
  INFERGATE_ASSIGN_OR_RETURN(std::optional<weights::Scheme> scheme, published_scheme(o));
  const bool experts_only = scheme && routed_experts_only(o, *scheme);
  if (experts_only && o.arch != Architecture::kGlm4Moe && o.arch != Architecture::kDeepseekV3) {
    return option_error("--quantized-modules",
                        "routed experts need a MoE architecture (glm4_moe, deepseek_v3, kimi_k2)");
  }
  const int64_t intermediate = o.intermediate > 0 ? o.intermediate : (8 * o.hidden / 3 + 31) / 32 * 32;

  // Tokenizer: byte-level BPE on the built-in text; specials after the merges; reserved specials fill up.
  const SplitPattern pattern = o.arch == Architecture::kQwen2 ? SplitPattern::kQwen2 : SplitPattern::kLlama3;
  TrainedBpe bpe =
      train_byte_level_bpe(kTrainingText, static_cast<size_t>(o.vocab) - kSpecialTokens.size(), pattern);
  TokenizerJsonOptions tj;
  tj.pattern = pattern;
  tj.nfc = o.arch == Architecture::kQwen2;
  tj.ignore_merges = o.arch == Architecture::kLlama;
  tj.special_tokens = kSpecialTokens;
  for (size_t i = 0; bpe.vocab.size() + tj.special_tokens.size() < static_cast<size_t>(o.vocab); ++i) {
    tj.special_tokens.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  }
  if (o.arch != Architecture::kQwen2) tj.bos_token = kSpecialTokens[0];
  const int64_t base = static_cast<int64_t>(bpe.vocab.size());
  const int64_t bos = base, eos = base + 1, im_end = base + 3;

  OJson config = config_json(o, intermediate, bos, eos, im_end);
  INFERGATE_ASSIGN_OR_RETURN(ModelConfig parsed, parse_model_config(config.dump(), "config.json"));
  if (scheme) {
    INFERGATE_ASSIGN_OR_RETURN(
        Json qc, weights::quantization_config_json(*scheme, published_exclusions(*scheme, experts_only)));
    config["quantization_config"] = OJson::parse(qc.dump());
  }

  OJson tok_config = {{"bos_token", kSpecialTokens[0]},
                      {"eos_token", kSpecialTokens[1]},
                      {"pad_token", kSpecialTokens[1]},
                      {"add_bos_token", o.arch != Architecture::kQwen2},
                      {"add_eos_token", false},
                      {"model_max_length", o.max_position},
                      {"tokenizer_class", "PreTrainedTokenizerFast"},
                      {"chat_template", std::string(kChatTemplate)}};
  OJson gen_config = {
      {"bos_token_id", bos}, {"eos_token_id", OJson::array({eos, im_end})}, {"do_sample", false}};

  INFERGATE_ASSIGN_OR_RETURN(StagedDirectory staged, StagedDirectory::create(o.out, o.force));
  const fs::path dir = staged.path();
  INFERGATE_RETURN_IF_ERROR(write_file_atomic(dir / "config.json", dump(config)));
  INFERGATE_RETURN_IF_ERROR(write_file_atomic(dir / "tokenizer.json", make_tokenizer_json(bpe, tj)));
  INFERGATE_RETURN_IF_ERROR(write_file_atomic(dir / "tokenizer_config.json", dump(tok_config)));
  INFERGATE_RETURN_IF_ERROR(write_file_atomic(dir / "generation_config.json", dump(gen_config)));

  const std::vector<ExpectedTensor> tensors = expected_tensors(parsed);
  INFERGATE_RETURN_IF_ERROR(write_weights(dir, tensors, o, parsed, scheme, experts_only));
  if (scheme) INFERGATE_RETURN_IF_ERROR(check_published(dir, *scheme));
  return staged.commit();
}

}  // namespace infergate::runtime::model
