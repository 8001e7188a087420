#!/usr/bin/python3
"""An independent byte-level BPE reference for the tokenizer tests, written from the published algorithm
(GPT-2's encoder: regex split, byte-to-unicode map, merge the lowest-ranked pair until none is left),
using Python's `regex` module to run the split patterns exactly as tokenizer.json spells them.

  bpe_oracle.py split REGEX_FILE INPUT_FILE      one line per input: the pieces, hex, comma-separated
  bpe_oracle.py encode TOKENIZER_JSON INPUT_FILE  one line per input: the token ids, space-separated

Inputs are one hex-encoded UTF-8 string per line."""
import json
import sys
import unicodedata

import regex

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_CHARS = bytes_to_unicode()


def inputs(path):
    with open(path) as f:
        return [bytes.fromhex(line.strip()).decode("utf-8") for line in f]


def split_all(text, patterns):
    pieces = [text]
    for p in patterns:
        pieces = [m for piece in pieces for m in regex.findall(p, piece)]
    return pieces


def bpe(word, ranks):
    parts = list(word)
    while len(parts) > 1:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get((parts[i], parts[i + 1]))
            if r is not None and (best is None or r < best[0]):
                best = (r, parts[i], parts[i + 1])
        if best is None:
            break
        _, a, b = best
        merged = []
        i = 0
        while i < len(parts):
            if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                merged.append(a + b)
                i += 2
            else:
                merged.append(parts[i])
                i += 1
        parts = merged
    return parts


class Tokenizer:
    def __init__(self, path):
        with open(path) as f:
            tj = json.load(f)
        model = tj["model"]
        self.vocab = model["vocab"]
        self.ignore_merges = model.get("ignore_merges", False)
        self.ranks = {}
        for i, m in enumerate(model["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            self.ranks.setdefault((a, b), i)
        self.added = sorted(tj.get("added_tokens") or [], key=lambda t: -len(t["content"]))
        self.nfc = (tj.get("normalizer") or {}).get("type") == "NFC"
        self.patterns = []
        pre = tj["pre_tokenizer"]
        for p in (pre["pretokenizers"] if pre["type"] == "Sequence" else [pre]):
            if p["type"] == "Split":
                self.patterns.append(p["pattern"]["Regex"])
            elif p["type"] == "ByteLevel" and p.get("use_regex", True):
                self.patterns.append(GPT2_PATTERN)
        self.prefix = []
        post = tj.get("post_processor") or {}
        if post.get("type") == "TemplateProcessing":
            for item in post["single"]:
                if "Sequence" in item:
                    break
                self.prefix += post["special_tokens"][item["SpecialToken"]["id"]]["ids"]

    def encode_text(self, text):
        if self.nfc:
            text = unicodedata.normalize("NFC", text)
        ids = []
        for piece in split_all(text, self.patterns):
            word = "".join(BYTE_CHARS[b] for b in piece.encode("utf-8"))
            if self.ignore_merges and word in self.vocab:
                ids.append(self.vocab[word])
                continue
            ids += [self.vocab[p] for p in bpe(word, self.ranks)]
        return ids

    def encode(self, text):
        ids = list(self.prefix)
        pos = 0
        while pos < len(text):
            found = None
            for i in range(pos, len(text)):
                for t in self.added:
                    if text.startswith(t["content"], i):
                        found = (i, t)
                        break
                if found:
                    break
            if not found:
                ids += self.encode_text(text[pos:])
                break
            i, t = found
            ids += self.encode_text(text[pos:i])
            ids.append(t["id"])
            pos = i + len(t["content"])
        return ids


def main():
    mode, arg, path = sys.argv[1:4]
    if mode == "split":
        with open(arg) as f:
            pattern = f.read()
        for text in inputs(path):
            print(",".join(p.encode("utf-8").hex() for p in regex.findall(pattern, text)))
    elif mode == "encode":
        tok = Tokenizer(arg)
        for text in inputs(path):
            print(" ".join(str(i) for i in tok.encode(text)))
    else:
        sys.exit("unknown mode " + mode)


if __name__ == "__main__":
    main()
