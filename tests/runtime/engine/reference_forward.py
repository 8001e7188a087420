#!/usr/bin/python3
"""An independent NumPy forward pass of the decoder architectures the engine runs, written from the
published models (huggingface/transformers modeling_llama.py, modeling_mistral.py, modeling_qwen2.py,
modeling_glm.py, modeling_glm4.py, modeling_glm4_moe.py and modeling_deepseek_v3.py with its
DeepseekV3TopkRouter and YaRN from modeling_rope_utils.py), not from infergate's C++. Latent attention
is computed as transformers does (per-head keys and values expanded from the latent), not in the
engine's absorbed form. Computes in float64.

Routing (GLM-4.5's MoE layers): s = sigmoid(router logits), chosen by s + e_score_correction_bias
within the topk_group best of n_group groups (a group scores as the sum of its two best), weights
s[chosen], renormalised when norm_topk_prob, times routed_scaling_factor. The groups left out are
excluded outright, as DeepSeek-V3's own inference code does (transformers fills them with 0, which
differs only when fewer than top_k kept experts score above 0).

  reference_forward.py logits --model DIR --tokens 1,2,3 [--tokens ...]      print logits as JSON
  reference_forward.py regenerate --runtime BIN --out DIR                    rewrite the golden files

The golden files (golden/<case>.json) hold how the test model was made (make-test-model options and
config.json overrides), the prompts (token ids) and the logits at every position. The C++ test
(reference_test.cc) rebuilds the same model, runs the engine and compares; when /usr/bin/python3 has
numpy it also reruns this script and checks it still reproduces the goldens.
Needs Debian's python3-numpy; call it as /usr/bin/python3.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

# ---- safetensors (huggingface/safetensors: 8-byte LE header length, JSON header, data) ----

def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[base + b: base + e]
        shape = info["shape"]
        dt = info["dtype"]
        if dt == "F32":
            arr = np.frombuffer(raw, dtype="<f4")
        elif dt == "F16":
            arr = np.frombuffer(raw, dtype="<f2")
        elif dt == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            raise SystemExit(f"{path}: tensor {name} has dtype {dt}; the reference reads F32/F16/BF16 only")
        out[name] = arr.astype(np.float64).reshape(shape)
    return out


def load_weights(model_dir):
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        out.update(read_safetensors(os.path.join(model_dir, shard)))
    return out

# ---- the architecture ----

def rms_norm(x, w, eps):
    var = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(var + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope_inv_freq(cfg, dim):
    base = cfg.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float64) / dim))
    rs = cfg.get("rope_scaling") or {}
    rtype = rs.get("rope_type", rs.get("type", "default"))
    if rtype == "llama3":
        # transformers modeling_rope_utils._compute_llama3_parameters
        factor = rs["factor"]
        low = rs["low_freq_factor"]
        high = rs["high_freq_factor"]
        old_ctx = rs["original_max_position_embeddings"]
        low_wavelen = old_ctx / low
        high_wavelen = old_ctx / high
        wavelen = 2 * np.pi / inv_freq
        inv_l = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
        is_medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv_freq = np.where(is_medium, smoothed, inv_l)
    elif rtype == "yarn":
        # transformers modeling_rope_utils._compute_yarn_parameters (truncate = True)
        factor = rs["factor"]
        old_ctx = rs.get("original_max_position_embeddings", cfg["max_position_embeddings"])
        beta_fast = rs.get("beta_fast") or 32
        beta_slow = rs.get("beta_slow") or 1

        def correction_dim(rot):
            return (dim * np.log(old_ctx / (rot * 2 * np.pi))) / (2 * np.log(base))

        low = max(np.floor(correction_dim(beta_fast)), 0)
        high = min(np.ceil(correction_dim(beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
        extrapolation = 1 - ramp
        pos_freqs = base ** (np.arange(0, dim, 2) / dim)
        inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    elif rtype not in ("default", None):
        raise SystemExit(f"rope_scaling type {rtype} is not implemented in the reference")
    return inv_freq


def yarn_mscale(scale, mscale):
    return 1.0 if scale <= 1 else 0.1 * mscale * np.log(scale) + 1.0


def mla_attention(cfg, W, p, h, pos, inv_freq, mask):
    """transformers' DeepseekV3Attention, not absorbed: per-head keys and values from the latent."""
    T = h.shape[0]
    nh = cfg["num_attention_heads"]
    nope, rope, vd = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    kvl = cfg["kv_lora_rank"]
    eps = cfg["rms_norm_eps"]
    if cfg.get("q_lora_rank"):
        qa = rms_norm(h @ W[p + "self_attn.q_a_proj.weight"].T, W[p + "self_attn.q_a_layernorm.weight"], eps)
        q = qa @ W[p + "self_attn.q_b_proj.weight"].T
    else:
        q = h @ W[p + "self_attn.q_proj.weight"].T
    q = q.reshape(T, nh, nope + rope)
    ckv = h @ W[p + "self_attn.kv_a_proj_with_mqa.weight"].T
    c = rms_norm(ckv[:, :kvl], W[p + "self_attn.kv_a_layernorm.weight"], eps)
    k_pe = ckv[:, kvl:].reshape(T, 1, rope)
    kv = (c @ W[p + "self_attn.kv_b_proj.weight"].T).reshape(T, nh, nope + vd)
    k_nope, v = kv[..., :nope], kv[..., nope:]
    interleaved = cfg.get("rope_interleave", True)
    q_pe = apply_rope(q[..., nope:], pos, inv_freq, interleaved)
    k_pe = apply_rope(k_pe, pos, inv_freq, interleaved)
    q = np.concatenate([q[..., :nope], q_pe], axis=-1)
    k = np.concatenate([k_nope, np.repeat(k_pe, nh, axis=1)], axis=-1)
    scale = (nope + rope) ** -0.5
    rs = cfg.get("rope_scaling") or {}
    if rs.get("mscale_all_dim"):
        scale *= yarn_mscale(rs["factor"], rs["mscale_all_dim"]) ** 2
    scores = np.einsum("thd,shd->hts", q, k) * scale + mask
    scores = scores - scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs = probs / probs.sum(axis=-1, keepdims=True)
    attn = np.einsum("hts,shd->thd", probs, v).reshape(T, nh * vd)
    return attn @ W[p + "self_attn.o_proj.weight"].T


def apply_rope(x, positions, inv_freq, interleaved):
    """x [T, heads, head_dim]; rotates the first len(inv_freq)*2 dims."""
    rot = 2 * len(inv_freq)
    freqs = np.outer(positions.astype(np.float64), inv_freq)  # [T, rot/2]
    if interleaved:
        # GLM: cos[..., :d/2].repeat_interleave(2); rotate_half: stack((-x[1::2], x[0::2])).flatten
        cos = np.repeat(np.cos(freqs), 2, axis=-1)[:, None, :]
        sin = np.repeat(np.sin(freqs), 2, axis=-1)[:, None, :]
        xr = x[..., :rot]
        x1 = xr[..., 0::2]
        x2 = xr[..., 1::2]
        rotated = np.stack((-x2, x1), axis=-1).reshape(xr.shape)
    else:
        # Llama: emb = cat(freqs, freqs); rotate_half(x) = cat(-x2, x1)
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos = np.cos(emb)[:, None, :]
        sin = np.sin(emb)[:, None, :]
        xr = x[..., :rot]
        half = rot // 2
        rotated = np.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
    out = x.copy()
    out[..., :rot] = xr * cos + rotated * sin
    return out


def swiglu(W, prefix, h, bias=False):
    def lin(x, name):
        y = x @ W[name + ".weight"].T
        return y + W[name + ".bias"] if bias else y
    return lin(silu(lin(h, prefix + ".gate_proj")) * lin(h, prefix + ".up_proj"), prefix + ".down_proj")


def is_moe_layer(cfg, i):
    return ("n_routed_experts" in cfg and i >= cfg.get("first_k_dense_replace", 0)
            and i % cfg.get("moe_layer_freq", 1) == 0)


def route(cfg, W, p, h):
    """Per token: (expert ids, weights), as the module docstring says."""
    E = cfg["n_routed_experts"]
    K = cfg["num_experts_per_tok"]
    G = cfg.get("n_group", 1)
    TG = cfg.get("topk_group", 1)
    s = 1.0 / (1.0 + np.exp(-(h @ W[p + "mlp.gate.weight"].T)))
    c = s + W.get(p + "mlp.gate.e_score_correction_bias", np.zeros(E))
    out = []
    for t in range(h.shape[0]):
        ct = c[t].copy()
        if G > 1:
            groups = ct.reshape(G, E // G)
            gscore = np.sort(groups, axis=1)[:, -2:].sum(axis=1)
            keep = np.argsort(-gscore, kind="stable")[:TG]
            dropped = np.ones(G, dtype=bool)
            dropped[keep] = False
            groups[dropped] = -np.inf
            ct = groups.reshape(E)
        idx = np.argsort(-ct, kind="stable")[:K]
        w = s[t, idx]
        if cfg.get("norm_topk_prob", True):
            w = w / (w.sum() + 1e-20)
        out.append((idx, w * cfg.get("routed_scaling_factor", 1.0)))
    return out


def moe_mlp(cfg, W, p, h):
    y = np.zeros_like(h)
    for t, (idx, w) in enumerate(route(cfg, W, p, h)):
        for e, we in zip(idx, w):
            y[t] += we * swiglu(W, p + f"mlp.experts.{e}", h[t:t + 1])[0]
    if cfg.get("n_shared_experts", 0) > 0:
        y = y + swiglu(W, p + "mlp.shared_experts", h)
    return y


def forward(cfg, W, tokens):
    arch = cfg["architectures"][0]
    if arch not in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "GlmForCausalLM",
                    "Glm4ForCausalLM", "Glm4MoeForCausalLM", "DeepseekV3ForCausalLM"):
        raise SystemExit(f"architecture {arch} is not implemented in the reference")
    glm = arch in ("GlmForCausalLM", "Glm4ForCausalLM")  # interleaved rotary pairs, fused gate_up
    glm_moe = arch == "Glm4MoeForCausalLM"  # rotate-half partial rotary, q/k norms, routed experts
    deepseek = arch == "DeepseekV3ForCausalLM"  # latent attention, interleaved rope, routed experts
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim") or H // nh
    eps = cfg["rms_norm_eps"]
    prf = cfg.get("partial_rotary_factor", 0.5 if (glm or glm_moe) else 1.0)
    inv_freq = rope_inv_freq(cfg, cfg["qk_rope_head_dim"] if deepseek else int(hd * prf))
    if arch == "Qwen2ForCausalLM":
        qkv_bias, o_bias = True, False
    elif glm:
        qkv_bias, o_bias = cfg.get("attention_bias", True), False
    elif glm_moe:
        qkv_bias, o_bias = cfg.get("attention_bias", False), False
    else:
        qkv_bias = o_bias = cfg.get("attention_bias", False)

    def linear(x, name, bias):
        y = x @ W[name + ".weight"].T
        if bias:
            y = y + W[name + ".bias"]
        return y

    T = len(tokens)
    pos = np.arange(T)
    x = W["model.embed_tokens.weight"][np.array(tokens)]
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        if deepseek:
            x = x + mla_attention(cfg, W, p, h, pos, inv_freq, mask)
            h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
            x = x + (moe_mlp(cfg, W, p, h) if is_moe_layer(cfg, i) else swiglu(W, p + "mlp", h))
            continue
        q = linear(h, p + "self_attn.q_proj", qkv_bias).reshape(T, nh, hd)
        k = linear(h, p + "self_attn.k_proj", qkv_bias).reshape(T, nkv, hd)
        v = linear(h, p + "self_attn.v_proj", qkv_bias).reshape(T, nkv, hd)
        if glm_moe and cfg.get("use_qk_norm", False):  # per head, before RoPE
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        q = apply_rope(q, pos, inv_freq, glm)
        k = apply_rope(k, pos, inv_freq, glm)
        rep = nh // nkv  # repeat_kv: query head j reads KV head j // rep
        k = np.repeat(k, rep, axis=1)
        v = np.repeat(v, rep, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs = probs / probs.sum(axis=-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", probs, v).reshape(T, nh * hd)
        o = linear(attn, p + "self_attn.o_proj", o_bias)
        if arch == "Glm4ForCausalLM":
            o = rms_norm(o, W[p + "post_self_attn_layernorm.weight"], eps)
        x = x + o
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        if glm_moe and is_moe_layer(cfg, i):
            m = moe_mlp(cfg, W, p, h)
        elif glm:
            gu = linear(h, p + "mlp.gate_up_proj", False)
            gate, up = np.split(gu, 2, axis=-1)
            m = linear(up * silu(gate), p + "mlp.down_proj", False)
        else:
            mb = cfg.get("mlp_bias", False)
            m = linear(silu(linear(h, p + "mlp.gate_proj", mb)) * linear(h, p + "mlp.up_proj", mb),
                       p + "mlp.down_proj", mb)
        if arch == "Glm4ForCausalLM":
            m = rms_norm(m, W[p + "post_mlp_layernorm.weight"], eps)
        x = x + m
    x = rms_norm(x, W["model.norm.weight"], eps)
    lm = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else W["lm_head.weight"]
    return x @ lm.T


def greedy(cfg, W, prompt, n):
    """n greedy tokens after the prompt (the full sequence recomputed each step: slow and plain)."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(np.argmax(forward(cfg, W, seq)[-1])))
    return seq[len(prompt):]


def model_logits(model_dir, prompts):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    W = load_weights(model_dir)
    return [forward(cfg, W, p) for p in prompts]

# ---- the golden cases ----

VOCAB = 320
PROMPTS = [
    [7, 300, 45, 12, 99, 250, 3],
    # 19 tokens: crosses a 16-token block boundary
    [200, 17, 17, 64, 128, 5, 311, 42, 42, 42, 90, 1, 0, 255, 256, 257, 100, 60, 33],
]
# MoE cases: make-test-model's --arch glm4_moe options (TestMoeOptions) under "moe".
CASES = {
    "llama": {"arch": "llama", "seed": 11,
              "overrides": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                             "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}},
    "mistral": {"arch": "llama", "seed": 12, "tie_embeddings": True,
                "overrides": {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                              "sliding_window": None, "rope_theta": 1000000.0}},
    "qwen2": {"arch": "qwen2", "seed": 13},
    "glm": {"arch": "glm", "seed": 14},
    "glm4": {"arch": "glm4", "seed": 15, "dtype": "bf16"},
    # GLM-4.5: q/k norms, 8 experts in 2 groups (one kept), top 2, a shared expert, one dense layer.
    "glm4_moe": {"arch": "glm4_moe", "seed": 16, "layers": 3,
                 "moe": {"experts": 8, "experts_per_token": 2, "groups": 2, "topk_groups": 1,
                         "shared_experts": 1, "dense_layers": 1, "qk_norm": True}},
    # GLM-4.5-Air-like: no q/k norms, every layer routed, 4 groups (two kept), top 3, two shared
    # experts, unnormalised weights with a different scale.
    "glm4_moe_air": {"arch": "glm4_moe", "seed": 17, "layers": 2, "dtype": "bf16",
                     "moe": {"experts": 12, "experts_per_token": 3, "groups": 4, "topk_groups": 2,
                             "shared_experts": 2, "dense_layers": 0, "qk_norm": False},
                     "overrides": {"norm_topk_prob": False, "routed_scaling_factor": 1.5}},
    # A wider shape: 16 experts in 4 groups (two kept), top 4, 8 heads over 2 KV heads, head size 16.
    "glm4_moe_wide": {"arch": "glm4_moe", "seed": 18, "layers": 3, "hidden": 128, "heads": 8, "kv_heads": 2,
                      "moe": {"experts": 16, "experts_per_token": 4, "groups": 4, "topk_groups": 2,
                              "shared_experts": 1, "dense_layers": 1, "qk_norm": True}},
    # DeepSeek-V3: low-rank query, YaRN, a dense first layer then routed experts in groups.
    "deepseek_v3": {"arch": "deepseek_v3", "seed": 19, "layers": 3,
                    "moe": {"experts": 8, "experts_per_token": 2, "groups": 2, "topk_groups": 1,
                            "shared_experts": 1, "dense_layers": 1},
                    "mla": {"q_lora_rank": 32, "kv_lora_rank": 64, "qk_nope_head_dim": 16,
                            "qk_rope_head_dim": 16, "v_head_dim": 16, "yarn": True}},
    # Kimi K2's model_type with a plain q_proj (as DeepSeek-V2-Lite), no YaRN, different head widths,
    # 6 heads, every layer routed.
    "kimi_k2": {"arch": "kimi_k2", "seed": 20, "layers": 2, "heads": 6,
                "moe": {"experts": 12, "experts_per_token": 3, "groups": 3, "topk_groups": 2,
                        "shared_experts": 1, "dense_layers": 0},
                "mla": {"q_lora_rank": 0, "kv_lora_rank": 48, "qk_nope_head_dim": 24,
                        "qk_rope_head_dim": 8, "v_head_dim": 20, "yarn": False}},
}

MLA_FLAGS = {"q_lora_rank": "--q-lora-rank", "kv_lora_rank": "--kv-lora-rank",
             "qk_nope_head_dim": "--qk-nope-head-dim", "qk_rope_head_dim": "--qk-rope-head-dim",
             "v_head_dim": "--v-head-dim"}

MOE_FLAGS = {"experts": "--experts", "experts_per_token": "--experts-per-token", "groups": "--expert-groups",
             "topk_groups": "--topk-groups", "shared_experts": "--shared-experts",
             "dense_layers": "--dense-layers"}


def make_model(runtime, case, out):
    cmd = [runtime, "make-test-model", "--out", out, "--arch", case["arch"], "--seed", str(case["seed"]),
           "--vocab", str(VOCAB), "--dtype", case.get("dtype", "f16"), "--force"]
    if case.get("tie_embeddings"):
        cmd.append("--tie-embeddings")
    for key in ("layers", "hidden", "heads", "kv_heads"):
        if key in case:
            cmd += ["--" + key.replace("_", "-"), str(case[key])]
    for key, flag in MOE_FLAGS.items():
        if key in case.get("moe", {}):
            cmd += [flag, str(case["moe"][key])]
    if case.get("moe", {}).get("qk_norm") is False:
        cmd.append("--no-qk-norm")
    for key, flag in MLA_FLAGS.items():
        if key in case.get("mla", {}):
            cmd += [flag, str(case["mla"][key])]
    if case.get("mla", {}).get("yarn") is False:
        cmd.append("--no-yarn")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.update(case.get("overrides", {}))
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


GREEDY_TOKENS = 12


def golden(name, case, logits, greedy_tokens):
    return {
        "case": name,
        "make_test_model": dict({"arch": case["arch"], "seed": case["seed"], "vocab": VOCAB,
                                 "dtype": case.get("dtype", "f16"),
                                 "tie_embeddings": bool(case.get("tie_embeddings"))},
                                **{k: case[k] for k in ("layers", "hidden", "heads", "kv_heads") if k in case},
                                **({"moe": case["moe"]} if "moe" in case else {}),
                                **({"mla": case["mla"]} if "mla" in case else {})),
        "config_overrides": case.get("overrides", {}),
        "prompts": PROMPTS,
        "logits": [[[float("%.8g" % v) for v in row] for row in l] for l in logits],
        "greedy": greedy_tokens,  # GREEDY_TOKENS after each prompt
    }


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("logits")
    a.add_argument("--model", required=True)
    a.add_argument("--tokens", action="append", required=True)
    g = sub.add_parser("regenerate")
    g.add_argument("--runtime", required=True, help="path of infergate-runtime (for make-test-model)")
    g.add_argument("--out", required=True, help="directory of the golden files")
    g.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    args = ap.parse_args()
    if args.cmd == "logits":
        prompts = [[int(t) for t in s.split(",")] for s in args.tokens]
        print(json.dumps([l.tolist() for l in model_logits(args.model, prompts)]))
        return 0
    worst = 0.0
    for name, case in CASES.items():
        with tempfile.TemporaryDirectory() as d:
            mdir = os.path.join(d, "m")
            make_model(args.runtime, case, mdir)
            logits = model_logits(mdir, PROMPTS)
            with open(os.path.join(mdir, "config.json")) as f:
                cfg = json.load(f)
            W = load_weights(mdir)
            tokens = [greedy(cfg, W, p, GREEDY_TOKENS) for p in PROMPTS]
        gold = golden(name, case, logits, tokens)
        path = os.path.join(args.out, name + ".json")
        if args.check:
            with open(path) as f:
                old = json.load(f)
            for a_, b_ in zip(old["logits"], gold["logits"]):
                worst = max(worst, float(np.max(np.abs(np.array(a_) - np.array(b_)))))
            if old.get("greedy") != gold["greedy"]:
                print(f"{name}: greedy tokens {old.get('greedy')} != {gold['greedy']}")
                worst = float("inf")
        else:
            with open(path, "w") as f:
                json.dump(gold, f, separators=(",", ":"))
                f.write("\n")
    if args.check:
        print(json.dumps({"max_abs_diff": worst}))
        return 0 if worst <= 1e-4 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
