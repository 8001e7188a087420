#!/usr/bin/env python3
"""Writes a Llama-layout model directory of ours (config.json, tokenizer.json, *.safetensors in F16, BF16
or F32) as one F16 GGUF file that llama.cpp runs, with exactly the same weights.

Run inside the peer chroot (bench/peer/setup-llama-cpp.sh), where Debian's python3-gguf and NumPy are.
Only what the comparison needs: the llama architecture (`LlamaForCausalLM`, no biases, no RoPE scaling),
its byte-level BPE tokenizer, F16 matrices and F32 norms.

The one transformation: Hugging Face's Llama checkpoints rotate the two halves of each head
("rotate-half"), while llama.cpp's llama graph rotates adjacent pairs, so the rows of q_proj and k_proj
are reordered per head (row i of half 0 goes to 2i, of half 1 to 2i+1). Queries and keys then hold the
same values in another order; attention scores are unchanged.

Usage: to_gguf.py MODEL_DIR OUT.gguf
"""
import json
import os
import struct
import sys

import numpy as np
import gguf


def fail(msg):
    sys.exit(f"to_gguf: {msg}")


def read_safetensors(path):
    """The tensors of one safetensors file as float32 NumPy arrays, by name."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = memoryview(data)[8 + n :]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        raw = body[lo:hi]
        if t["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif t["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4").copy()
        else:
            fail(f"{path}: tensor {name} has dtype {t['dtype']}; F16, BF16 or F32 expected")
        out[name] = a.reshape(t["shape"])
    return out


def rotate_half_to_pairs(w, heads):
    """Reorders the rows of a q/k projection from rotate-half to adjacent-pair rotary order."""
    rows = w.shape[0]
    d = rows // heads
    if d * heads != rows or d % 2:
        fail(f"a projection of {rows} rows does not split into {heads} heads of even size")
    return w.reshape(heads, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    if len(sys.argv) != 3:
        fail("usage: to_gguf.py MODEL_DIR OUT.gguf")
    src, dst = sys.argv[1], sys.argv[2]
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("architectures") != ["LlamaForCausalLM"]:
        fail(f"only LlamaForCausalLM is converted, not {cfg.get('architectures')}")
    if cfg.get("rope_scaling") or cfg.get("attention_bias") or cfg.get("mlp_bias"):
        fail("RoPE scaling and biases are not converted")
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads, kv_heads = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim", H // heads)

    tensors = {}
    for name in sorted(os.listdir(src)):
        if name.endswith(".safetensors"):
            tensors.update(read_safetensors(os.path.join(src, name)))

    with open(os.path.join(src, "tokenizer.json")) as f:
        tok = json.load(f)
    vocab = tok["model"]["vocab"]
    n_vocab = cfg["vocab_size"]
    tokens = [None] * n_vocab
    types = [gguf.TokenType.NORMAL] * n_vocab
    for piece, i in vocab.items():
        tokens[i] = piece
    for a in tok.get("added_tokens") or []:
        tokens[a["id"]] = a["content"]
        types[a["id"]] = gguf.TokenType.CONTROL if a.get("special") else gguf.TokenType.USER_DEFINED
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i] = f"[PAD{i}]"
            types[i] = gguf.TokenType.UNUSED
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"].get("merges", [])]

    w = gguf.GGUFWriter(dst + ".partial", "llama")
    w.add_name(os.path.basename(os.path.normpath(src)))
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    bos = cfg.get("bos_token_id")
    eos = cfg.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0]
    if bos is not None:
        w.add_bos_token_id(bos)
        w.add_add_bos_token(False)  # the comparison feeds token ids; nothing is added to them
    if eos is not None:
        w.add_eos_token_id(eos)

    def add(name, a, matrix=True):
        w.add_tensor(name, a.astype(np.float16 if matrix else np.float32))

    add("token_embd.weight", tensors.pop("model.embed_tokens.weight"))
    for i in range(L):
        p = f"model.layers.{i}."
        b = f"blk.{i}."
        add(b + "attn_norm.weight", tensors.pop(p + "input_layernorm.weight"), matrix=False)
        add(b + "attn_q.weight", rotate_half_to_pairs(tensors.pop(p + "self_attn.q_proj.weight"), heads))
        add(b + "attn_k.weight", rotate_half_to_pairs(tensors.pop(p + "self_attn.k_proj.weight"), kv_heads))
        add(b + "attn_v.weight", tensors.pop(p + "self_attn.v_proj.weight"))
        add(b + "attn_output.weight", tensors.pop(p + "self_attn.o_proj.weight"))
        add(b + "ffn_norm.weight", tensors.pop(p + "post_attention_layernorm.weight"), matrix=False)
        add(b + "ffn_gate.weight", tensors.pop(p + "mlp.gate_proj.weight"))
        add(b + "ffn_up.weight", tensors.pop(p + "mlp.up_proj.weight"))
        add(b + "ffn_down.weight", tensors.pop(p + "mlp.down_proj.weight"))
    add("output_norm.weight", tensors.pop("model.norm.weight"), matrix=False)
    if "lm_head.weight" in tensors:
        add("output.weight", tensors.pop("lm_head.weight"))
    if tensors:
        fail(f"tensors left unconverted: {sorted(tensors)[:5]}")

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(dst + ".partial", dst)


if __name__ == "__main__":
    main()
