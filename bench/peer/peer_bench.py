#!/usr/bin/env python3
"""Our CPU engine against llama.cpp, side by side, in one run (see bench/peer/peer-bench.sh, which sets up
the chroot and the build first, and docs/engine.md for the table it prints).

1. A Llama-layout model is generated with make-test-model inside the chroot's work folder, quantized to
   our int8 and int4 formats, and written as GGUF with the same weights (to_gguf.py), then quantized by
   llama-quantize to Q8_0 and Q4_0 (lm_head and embeddings kept in F16, as ours are).
2. Same function first: from the same token ids, both engines' greedy tokens on the F16 model must agree
   (llama-server's /completion takes token ids; no tokenizer is involved on either side).
3. Rounds: every cell runs once per engine per round, the two engines alternating which goes first, on
   the same threads; medians and ranges over the rounds, and the ratio of medians.
4. Start-up: process start to first token, ours with the model hashed while it loads
   (--verified-manifest) against llama.cpp's unverified load, page cache warm.

Prints a Markdown table; --json FILE writes every sample.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

SHAPES = {
    # name: make-test-model flags
    "small": dict(layers=4, hidden=512, heads=8, kv_heads=2, intermediate=1408, vocab=4096),
    "1b": dict(layers=22, hidden=2048, heads=32, kv_heads=4, intermediate=5632, vocab=32000),
    # A 7B-class Llama (Llama-2-7B's widths) with fewer layers, to bound the run.
    "7b": dict(layers=8, hidden=4096, heads=32, kv_heads=32, intermediate=11008, vocab=32000),
}


def log(msg):
    print(f"peer-bench: {msg}", file=sys.stderr, flush=True)


def run(argv, **kw):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"peer-bench: {' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return r.stdout


class Peer:
    """llama.cpp inside the chroot. Paths given to it are inside the chroot."""

    def __init__(self, root, threads):
        self.root = root
        self.threads = threads

    def inside(self, host_path):
        rel = os.path.relpath(host_path, self.root)
        if rel.startswith(".."):
            sys.exit(f"peer-bench: {host_path} is not inside the chroot {self.root}")
        return "/" + rel

    def cmd(self, *argv):
        return ["chroot", self.root, *argv]

    def bench(self, gguf, pp=0, tg=0, depth=0, kv=None):
        argv = ["llama-bench", "-m", self.inside(gguf), "-t", str(self.threads), "-p", str(pp),
                "-n", str(tg), "-r", "1", "-o", "json"]
        if depth:
            argv += ["-d", str(depth)]
        if kv:
            argv += ["-ctk", kv, "-ctv", kv, "-fa", "1"]
        else:
            argv += ["-fa", "0"]
        rows = json.loads(run(self.cmd(*argv)))
        return rows[0]["avg_ts"]

    def greedy(self, gguf, ids, n):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen(
            self.cmd("llama-server", "-m", self.inside(gguf), "-t", str(self.threads), "--host", "127.0.0.1",
                     "--port", str(port), "-c", str(len(ids) + n + 16), "-np", "1"),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(600):
                try:
                    with urllib.request.urlopen(url + "/health", timeout=1) as r:
                        if r.status == 200:
                            break
                except OSError:
                    if proc.poll() is not None:
                        sys.exit(f"peer-bench: llama-server exited: {proc.stderr.read()[-3000:]}")
                    time.sleep(0.2)
            body = json.dumps({"prompt": ids, "n_predict": n, "temperature": 0, "top_k": 1,
                               "samplers": ["top_k"], "return_tokens": True, "cache_prompt": False,
                               "n_probs": 1}).encode()
            req = urllib.request.Request(url + "/completion", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=600) as r:
                out = json.load(r)
            tokens = out.get("tokens")
            if tokens is None:
                sys.exit(f"peer-bench: llama-server returned no tokens: {json.dumps(out)[:500]}")
            return tokens
        finally:
            proc.terminate()
            proc.wait()

    def first_token_seconds(self, gguf):
        argv = self.cmd("llama-completion", "-m", self.inside(gguf), "-t", str(self.threads), "-n", "1",
                        "-p", "hello", "-no-cnv", "--no-warmup")
        t0 = time.monotonic()
        run(argv)
        return time.monotonic() - t0


class Ours:
    def __init__(self, bin_dir, threads):
        self.runtime = os.path.join(bin_dir, "infergate-runtime")
        self.probe = os.path.join(bin_dir, "peer_probe")
        self.agent = os.path.join(bin_dir, "infergate-agent")
        self.threads = threads

    def bench(self, model, fmt, kv="fp16", pp=0, tg=0, depth=0):
        out = json.loads(run([self.probe, "speed", "--model", model, "--weight-format", fmt,
                              "--kv-cache-dtype", kv, "--threads", str(self.threads), "--pp", str(pp),
                              "--tg", str(tg), "--depth", str(depth), "--reps", "1"]))
        return (out["pp_tokens_per_s"] or out["tg_tokens_per_s"])[0]

    def greedy(self, model, ids, n):
        out = json.loads(run([self.probe, "greedy", "--model", model, "--ids", ",".join(map(str, ids)),
                              "--n", str(n), "--threads", str(self.threads)]))
        return out["tokens"]

    def first_token_seconds(self, model, fmt):
        argv = [self.runtime, "generate", "--model", model, "--weight-format", fmt, "--kv-cache-dtype", "fp16", "--prompt", "hello",
                "--max-tokens", "1", "--threads", str(self.threads),
                "--verified-manifest", os.path.join(model, "SHA256SUMS")]
        t0 = time.monotonic()
        run(argv)
        return time.monotonic() - t0


def prepare(args, ours, peer, work):
    shape = SHAPES[args.shape]
    fp16 = os.path.join(work, "fp16")
    models = {"fp16": fp16, "int8": os.path.join(work, "int8"), "int4": os.path.join(work, "int4")}
    ggufs = {k: os.path.join(work, f"model-{k}.gguf") for k in ("F16", "Q8_0", "Q4_0")}
    stamp = os.path.join(work, "ready.json")
    want = dict(shape, max_position=args.depth + 1024)
    if os.path.exists(stamp):
        with open(stamp) as f:
            if json.load(f) == want:
                log(f"reusing the models in {work}")
                return models, ggufs
    os.makedirs(work, exist_ok=True)
    log(f"generating the {args.shape} model ({shape})")
    flags = []
    for k, v in want.items():
        flags += [f"--{k.replace('_', '-')}", str(v)]
    run([ours.runtime, "make-test-model", "--out", fp16, "--arch", "llama", "--seed", "7", "--force", *flags])
    for fmt in ("int8", "int4"):
        run([ours.runtime, "quantize", "--model", fp16, "--out", models[fmt], "--weight-format", fmt, "--force"])
    for m in models.values():
        run([ours.agent, "manifest", m])
    log("writing GGUF and quantizing with llama-quantize")
    run(peer.cmd("/usr/bin/python3", peer.inside(os.path.join(work, "to_gguf.py")), peer.inside(fp16),
                 peer.inside(ggufs["F16"])))
    for q in ("Q8_0", "Q4_0"):
        run(peer.cmd("llama-quantize", "--output-tensor-type", "f16", "--token-embedding-type", "f16",
                     peer.inside(ggufs["F16"]), peer.inside(ggufs[q]), q))
    with open(stamp, "w") as f:
        json.dump(want, f)
    return models, ggufs


def same_function(ours, peer, models, ggufs, n):
    ids = [(i * 37 + 11) % 250 for i in range(24)]
    a = ours.greedy(models["fp16"], ids, n)
    b = peer.greedy(ggufs["F16"], ids, n)
    agree = 0
    while agree < min(len(a), len(b)) and a[agree] == b[agree]:
        agree += 1
    log(f"greedy tokens from the same {len(ids)} ids: ours {a}, llama.cpp {b}")
    return {"ids": ids, "ours": a, "llama.cpp": b, "agree": agree}


def cells(args):
    d = args.depth
    out = []
    for ours_fmt, peer_q in (("fp16", "F16"), ("int8", "Q8_0"), ("int4", "Q4_0")):
        out.append((f"decode, batch 1, {ours_fmt} / {peer_q}", dict(fmt=ours_fmt, tg=args.tg), dict(q=peer_q, tg=args.tg)))
    for ours_fmt, peer_q in (("fp16", "F16"), ("int8", "Q8_0"), ("int4", "Q4_0")):
        out.append((f"prefill {args.pp} tokens, {ours_fmt} / {peer_q}", dict(fmt=ours_fmt, pp=args.pp),
                    dict(q=peer_q, pp=args.pp)))
    for ours_kv, peer_kv, label in (("fp16", None, "fp16 KV / F16 KV (flash attention off)"),
                                    ("int8", "q8_0", "int8 KV / q8_0 KV (flash attention on)"),
                                    ("int4", "q4_0", "int4 KV / q4_0 KV (flash attention on)")):
        out.append((f"decode at {d} context, int8 weights, {label}", dict(fmt="int8", kv=ours_kv, tg=args.tg, depth=d),
                    dict(q="Q8_0", kv=peer_kv, tg=args.tg, depth=d)))
    return out


def measure_cell(ours, peer, models, ggufs, o, p, ours_first):
    def a():
        return ours.bench(models[o["fmt"]], o["fmt"], o.get("kv", "fp16"), o.get("pp", 0), o.get("tg", 0),
                          o.get("depth", 0))

    def b():
        return peer.bench(ggufs[p["q"]], p.get("pp", 0), p.get("tg", 0), p.get("depth", 0), p.get("kv"))

    if ours_first:
        x = a()
        return x, b()
    y = b()
    return a(), y


def summary(xs):
    return statistics.median(xs), min(xs), max(xs)


def fmt_cell(xs, unit_fmt="{:.1f}"):
    m, lo, hi = summary(xs)
    return f"{unit_fmt.format(m)} ({unit_fmt.format(lo)}-{unit_fmt.format(hi)})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chroot", required=True)
    ap.add_argument("--bin", required=True, help="our build's bin/ (infergate-runtime, peer_probe)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=64)
    ap.add_argument("--depth", type=int, default=4096)
    ap.add_argument("--only", action="append", default=[],
                    help="run only the cells whose label contains this text (repeatable; 'start-up' is one)")
    ap.add_argument("--json", help="write every sample here")
    args = ap.parse_args()
    if args.rounds < 3:
        sys.exit("peer-bench: --rounds must be at least 3 (medians and ranges)")

    ours = Ours(args.bin, args.threads)
    peer = Peer(os.path.realpath(args.chroot), args.threads)
    work = os.path.join(peer.root, "work", f"peer-{args.shape}")
    os.makedirs(work, exist_ok=True)
    # The converter must be visible from inside the chroot.
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "to_gguf.py")) as src:
        text = src.read()
    with open(os.path.join(work, "to_gguf.py"), "w") as dst:
        dst.write(text)
    models, ggufs = prepare(args, ours, peer, work)

    check = same_function(ours, peer, models, ggufs, 16)
    if check["agree"] < 16:
        sys.exit(f"peer-bench: the engines' greedy tokens differ from token {check['agree']}: {check}; "
                 "the comparison would not be of speed alone")

    def wanted(label):
        return not args.only or any(o in label for o in args.only)

    todo = [c for c in cells(args) if wanted(c[0])]
    samples = {label: ([], []) for label, _, _ in todo}
    for r in range(args.rounds):
        for i, (label, o, p) in enumerate(todo):
            x, y = measure_cell(ours, peer, models, ggufs, o, p, (r + i) % 2 == 0)
            samples[label][0].append(x)
            samples[label][1].append(y)
            log(f"round {r + 1}/{args.rounds} {label}: ours {x:.1f} tok/s, llama.cpp {y:.1f} tok/s")

    startup = {"ours": [], "llama.cpp": []}
    if wanted("start-up"):
        ours.first_token_seconds(models["int8"], "int8")  # page cache warm for both
        peer.first_token_seconds(ggufs["Q8_0"])
        for r in range(args.rounds):
            startup["ours"].append(ours.first_token_seconds(models["int8"], "int8"))
            startup["llama.cpp"].append(peer.first_token_seconds(ggufs["Q8_0"]))

    shape = SHAPES[args.shape]
    print(f"\nModel: generated Llama, {shape['layers']} layers, hidden {shape['hidden']}, {shape['heads']} heads / "
          f"{shape['kv_heads']} KV heads, intermediate {shape['intermediate']}, vocab {shape['vocab']}; "
          f"{args.threads} threads each, {args.rounds} interleaved rounds.")
    print(f"Same function: greedy tokens from the same token ids agree for all {check['agree']} tokens.\n")
    print("| tok/s, median (range) | ours | llama.cpp | ours / llama.cpp |")
    print("|---|---|---|---|")
    for label, (xs, ys) in samples.items():
        print(f"| {label} | {fmt_cell(xs)} | {fmt_cell(ys)} | {summary(xs)[0] / summary(ys)[0]:.2f}x |")
    if startup["ours"]:
        xs, ys = startup["ours"], startup["llama.cpp"]
        print(f"| start-up to first token, s: ours int8 verified while loading / llama.cpp Q8_0 unverified | "
              f"{fmt_cell(xs, '{:.2f}')} | {fmt_cell(ys, '{:.2f}')} | {summary(xs)[0] / summary(ys)[0]:.2f}x "
              f"(time: lower is better) |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "check": check, "samples": samples, "startup": startup}, f, indent=1)


if __name__ == "__main__":
    main()
