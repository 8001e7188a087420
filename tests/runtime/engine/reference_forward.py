#!/usr/bin/python3
"""An independent NumPy forward pass of the dense decoder architectures the engine runs, written from
the published models (huggingface/transformers modeling_llama.py, modeling_mistral.py,
modeling_qwen2.py, modeling_glm.py, modeling_glm4.py), not from infergate's C++. Computes in float64.

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
    elif rtype not in ("default", None):
        raise SystemExit(f"rope_scaling type {rtype} is not implemented in the reference")
    return inv_freq


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


def forward(cfg, W, tokens):
    arch = cfg["architectures"][0]
    if arch not in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "GlmForCausalLM",
                    "Glm4ForCausalLM"):
        raise SystemExit(f"architecture {arch} is not implemented in the reference")
    glm = arch in ("GlmForCausalLM", "Glm4ForCausalLM")
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim") or H // nh
    eps = cfg["rms_norm_eps"]
    prf = cfg.get("partial_rotary_factor", 0.5 if glm else 1.0)
    inv_freq = rope_inv_freq(cfg, int(hd * prf))
    if arch == "Qwen2ForCausalLM":
        qkv_bias, o_bias = True, False
    elif glm:
        qkv_bias, o_bias = cfg.get("attention_bias", True), False
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
        q = linear(h, p + "self_attn.q_proj", qkv_bias).reshape(T, nh, hd)
        k = linear(h, p + "self_attn.k_proj", qkv_bias).reshape(T, nkv, hd)
        v = linear(h, p + "self_attn.v_proj", qkv_bias).reshape(T, nkv, hd)
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
        if glm:
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
}


def make_model(runtime, case, out):
    cmd = [runtime, "make-test-model", "--out", out, "--arch", case["arch"], "--seed", str(case["seed"]),
           "--vocab", str(VOCAB), "--dtype", case.get("dtype", "f16"), "--force"]
    if case.get("tie_embeddings"):
        cmd.append("--tie-embeddings")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.update(case.get("overrides", {}))
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


def golden(name, case, logits):
    return {
        "case": name,
        "make_test_model": {"arch": case["arch"], "seed": case["seed"], "vocab": VOCAB,
                            "dtype": case.get("dtype", "f16"), "tie_embeddings": bool(case.get("tie_embeddings"))},
        "config_overrides": case.get("overrides", {}),
        "prompts": PROMPTS,
        "logits": [[[float("%.6g" % v) for v in row] for row in l] for l in logits],
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
        gold = golden(name, case, logits)
        path = os.path.join(args.out, name + ".json")
        if args.check:
            with open(path) as f:
                old = json.load(f)
            for a_, b_ in zip(old["logits"], gold["logits"]):
                worst = max(worst, float(np.max(np.abs(np.array(a_) - np.array(b_)))))
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
