#!/usr/bin/python3
"""An independent reference dequantizer for the published weight formats, written with NumPy from the
formats' own descriptions (docs/quant-formats.md, "Published weight formats", and the publishers' code
it cites), not from our C++. It reads a model directory (config.json's quantization_config, possibly
under text_config, quantization.json for ours, every *.safetensors shard), finds each quantized linear
by its tensor names, checks the names, dtypes and shapes the format prescribes, evaluates the config's
ignore / modules_to_not_convert rules with Python's own re.match, dequantizes every linear to float32,
and compares the result with a second safetensors file (the C++ side's output, one F32 tensor
"<module>.weight" per quantized linear) bit for bit.

Usage: published_reference.py MODEL_DIR CPP_DEQUANT.safetensors
Prints one JSON line {"word": ..., "quantized": N, "dense_linears": M} and exits 0 when every tensor
agrees; exits 1 with the first disagreement on stderr."""
import json
import os
import re
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F8_E4M3": np.uint8, "I8": np.int8,
          "U8": np.uint8, "I32": np.int32, "I64": np.int64, "F64": np.float64, "U16": np.uint16, "I16": np.int16,
          "U32": np.uint32, "U64": np.uint64, "BOOL": np.uint8, "F8_E5M2": np.uint8}


def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


def read_safetensors(path):
    """{name: (dtype string, numpy array in the stored dtype)}"""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        arr = np.frombuffer(data[begin:end], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
        out[name] = (e["dtype"], arr)
    return out


def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def to_f32(dtype, arr):
    if dtype == "BF16":
        return bf16_to_f32(arr)
    if dtype in ("F16", "F32"):
        return arr.astype(np.float32)
    fail(f"a scale stored as {dtype}")


def e4m3fn_table():
    """All 256 float8 e4m3fn codes: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0
    is subnormal (m * 2^-9); S.1111.111 is NaN; there is no infinity."""
    t = np.zeros(256, dtype=np.float64)
    for c in range(256):
        sign = -1.0 if c & 0x80 else 1.0
        e, m = (c >> 3) & 0xF, c & 0x7
        if e == 0xF and m == 0x7:
            t[c] = np.nan
        elif e == 0:
            t[c] = sign * m * 2.0 ** -9
        else:
            t[c] = sign * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return t.astype(np.float32)


E4M3 = e4m3fn_table()


def nibbles(words, count):
    """uint32 words [..., W] -> their `count` 4-bit fields along the last axis, field i of word j being
    element 8j + i (bits 4i..4i+3, least significant first)."""
    w = words.astype(np.uint32)
    shifts = (np.arange(8, dtype=np.uint32) * 4)
    fields = (w[..., :, None] >> shifts) & 0xF
    flat = fields.reshape(*w.shape[:-1], w.shape[-1] * 8)
    return flat[..., :count].astype(np.int32)


def quantization_config(config):
    if config.get("quantization_config") is not None:
        return config["quantization_config"], config.get("num_hidden_layers", 0)
    text = config.get("text_config") or {}
    return text.get("quantization_config"), text.get("num_hidden_layers", config.get("num_hidden_layers", 0))


def is_linear(module):
    return not (module.endswith("embed_tokens") or module == "mlp.gate" or module.endswith(".mlp.gate"))


def layer_of(module):
    m = re.search(r"(?:^|\.)layers\.(\d+)(?:\.|$)", module)
    return int(m.group(1)) if m else -1


def ct_rule_matches(entry, module):
    if entry.startswith("re:"):
        return re.match(entry[3:], module) is not None
    if entry == "Linear":
        return is_linear(module)
    return entry == module


# ---- one function per family: (module -> tensors) -> float32 W [N, K] ----

def dequant_fp8_block(t, m, q):
    block_r, block_c = q["weight_block_size"]
    dt, codes = t[m + ".weight"]
    sdt, s = t[m + ".weight_scale_inv"]
    assert dt == "F8_E4M3" and sdt == "F32", (m, dt, sdt)
    n, k = codes.shape
    assert s.shape == (-(-n // block_r), -(-k // block_c)), (m, s.shape)
    full = np.repeat(np.repeat(s.astype(np.float32), block_r, axis=0), block_c, axis=1)[:n, :k]
    return E4M3[codes] * full  # float32 x float32: one IEEE rounding


def dequant_fp8_channel(t, m, q):
    dt, codes = t[m + ".weight"]
    sdt, s = t[m + ".weight_scale"]
    n, k = codes.shape
    assert dt == "F8_E4M3" and s.shape == (n, 1), (m, dt, s.shape)
    return E4M3[codes] * to_f32(sdt, s)


def dequant_ct_int4(t, m, q):
    w = next(iter(q["config_groups"].values()))["weights"]
    g = w["group_size"] if w.get("strategy") == "group" else None
    sdt, packed = t[m + ".weight_packed"]
    assert sdt == "I32"
    n, k = (int(v) for v in t[m + ".weight_shape"][1])
    assert packed.shape == (n, -(-k // 8)), (m, packed.shape, n, k)
    codes = nibbles(packed.view(np.uint32), k)  # u = q + 8
    sc = to_f32(*t[m + ".weight_scale"])
    groups = k // g if g else 1
    assert sc.shape == (n, groups), (m, sc.shape)
    if w.get("symmetric", True):
        assert m + ".weight_zero_point" not in t
        zeros = np.full((n, groups), 8, dtype=np.int32)
    else:
        zdt, zp = t[m + ".weight_zero_point"]
        assert zdt == "I32" and zp.shape == (-(-n // 8), groups), (m, zp.shape)
        # packed along N: zero point of row r in field r % 8 of word (r // 8, group)
        zeros = nibbles(zp.view(np.uint32).T, n).T  # uz = z + 8
    if w.get("actorder") in ("group", "dynamic", True):
        group_of = t[m + ".weight_g_idx"][1].astype(np.int64)
    else:
        group_of = np.arange(k) // g if g else np.zeros(k, dtype=np.int64)
    return sc[:, group_of] * (codes - zeros[:, group_of]).astype(np.float32)


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # AutoAWQ packs column 8j + AWQ_ORDER[i] into field i of word j


def awq_unpack(words):
    rows, wcols = words.shape
    fields = nibbles(words.view(np.uint32), wcols * 8).reshape(rows, wcols, 8)
    out = np.zeros_like(fields)
    for i, col in enumerate(AWQ_ORDER):
        out[:, :, col] = fields[:, :, i]
    return out.reshape(rows, wcols * 8)


def dequant_awq(t, m, q):
    g = q["group_size"]
    _, qw = t[m + ".qweight"]
    k, n = qw.shape[0], qw.shape[1] * 8
    codes = awq_unpack(qw)  # [K, N]
    zeros = awq_unpack(t[m + ".qzeros"][1])  # [K/G, N]
    sc = to_f32(*t[m + ".scales"])  # [K/G, N]
    grp = np.arange(k) // g if g > 0 else np.zeros(k, dtype=np.int64)
    return (sc[grp, :] * (codes - zeros[grp, :]).astype(np.float32)).T


def dequant_gptq(t, m, q):
    g = q["group_size"]
    v2 = q.get("checkpoint_format", "gptq") == "gptq_v2"
    _, qw = t[m + ".qweight"]
    k, n = qw.shape[0] * 8, qw.shape[1]
    codes = nibbles(qw.view(np.uint32).T, k).T  # packed along K: [K, N]
    zeros = nibbles(t[m + ".qzeros"][1].view(np.uint32), n) + (0 if v2 else 1)  # stored z - 1 in gptq
    sc = to_f32(*t[m + ".scales"])
    group_of = t[m + ".g_idx"][1].astype(np.int64) if m + ".g_idx" in t else np.arange(k) // g
    return (sc[group_of, :] * (codes - zeros[group_of, :]).astype(np.float32)).T


def dequant_ours(t, m, q, record):
    n, k = record["quantized"][m + ".weight"]["shape"]
    sc = to_f32(*t[m + ".scales"])
    dt, qw = t[m + ".qweight"]
    if q["weight_format"] == "int8":
        return sc[:, None] * qw.astype(np.float32)
    g = q["group_size"]
    u = np.zeros((n, 2 * qw.shape[1]), dtype=np.int32)
    u[:, 0::2] = qw & 0xF  # even k in the low nibble
    u[:, 1::2] = qw >> 4
    u = u[:, :k]
    z = t[m + ".zeros"][1].astype(np.int32) if m + ".zeros" in t else np.full(sc.shape, 8, dtype=np.int32)
    grp = np.arange(k) // g
    return sc[:, grp] * (u - z[:, grp]).astype(np.float32)


def main(model_dir, cpp_file):
    config = json.load(open(os.path.join(model_dir, "config.json")))
    q, layers = quantization_config(config)
    if q is None:
        fail("config.json has no quantization_config")
    tensors = {}
    for f in sorted(os.listdir(model_dir)):
        if f.endswith(".safetensors"):
            tensors.update(read_safetensors(os.path.join(model_dir, f)))
    method = q["quant_method"]
    record = None
    if method == "fp8":
        data_suffix, fn, word = ".weight_scale_inv", dequant_fp8_block, "fp8-block"
    elif method == "compressed-tensors" and q["format"] == "float-quantized":
        data_suffix, fn, word = ".weight_scale", dequant_fp8_channel, "fp8-channel"
    elif method == "compressed-tensors" and q["format"] == "pack-quantized":
        w = next(iter(q["config_groups"].values()))["weights"]
        grp = f"g{w['group_size']}" if w.get("strategy") == "group" else "ch"
        data_suffix, fn = ".weight_packed", dequant_ct_int4
        word = f"int4-ct-{grp}-{'sym' if w.get('symmetric', True) else 'asym'}"
    elif method == "awq":
        data_suffix, fn, word = ".qweight", dequant_awq, f"awq-g{q['group_size']}"
    elif method == "gptq":
        data_suffix, fn = ".qweight", dequant_gptq
        word = f"gptq-g{q['group_size']}" + ("-v2" if q.get("checkpoint_format") == "gptq_v2" else "")
    elif method == "infergate":
        record = json.load(open(os.path.join(model_dir, "quantization.json")))
        data_suffix, word = ".qweight", q["weight_format"]
        fn = lambda t, m, qq: dequant_ours(t, m, qq, record)  # noqa: E731
    else:
        fail(f"unknown quant_method {method}")
    modules = sorted(n[: -len(data_suffix)] for n in tensors if n.endswith(data_suffix))
    dense_linears = sorted(n[: -len(".weight")] for n, (dt, a) in tensors.items()
                           if n.endswith(".weight") and a.ndim == 2 and dt not in ("F8_E4M3",)
                           and is_linear(n[: -len(".weight")]))

    # The config's rules, evaluated with Python's re.match: every linear the rules quantize is quantized.
    def rules_quantize(module):
        if method == "compressed-tensors":
            targets = [t for g in q["config_groups"].values() for t in g["targets"]]
            ignore = q.get("ignore") or []
            return any(ct_rule_matches(t, module) for t in targets) and \
                not any(ct_rule_matches(i, module) for i in ignore)
        if method == "infergate":
            return module + ".weight" in record["quantized"]
        excluded = q.get("modules_to_not_convert") or []
        return is_linear(module) and module != "lm_head" and not any(s in module for s in excluded)

    for mod in modules + dense_linears:
        if layers and layer_of(mod) >= layers:
            continue
        if rules_quantize(mod) != (mod in modules):
            fail(f"{mod}: the config's rules say quantized={rules_quantize(mod)}, the tensors say {mod in modules}")

    cpp = read_safetensors(cpp_file)
    if sorted(n[: -len(".weight")] for n in cpp) != modules:
        fail(f"the C++ side dequantized {sorted(cpp)} but the quantized modules are {modules}")
    for m in modules:
        ref = np.ascontiguousarray(fn(tensors, m, q), dtype=np.float32)
        dt, mine = cpp[m + ".weight"]
        if dt != "F32" or mine.shape != ref.shape:
            fail(f"{m}: C++ gave {dt} {mine.shape}, the reference float32 {ref.shape}")
        diff = np.nonzero(mine.view(np.uint32) != ref.view(np.uint32))
        if len(diff[0]):
            r, c = diff[0][0], diff[1][0]
            fail(f"{m}: {len(diff[0])} elements differ, first [{r}, {c}]: C++ {mine[r, c]!r}, reference {ref[r, c]!r}")
    print(json.dumps({"word": word, "quantized": len(modules), "dense_linears": len(dense_linears)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
