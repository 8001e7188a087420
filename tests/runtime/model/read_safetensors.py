#!/usr/bin/python3
"""An independent safetensors reader in a few lines of the standard library (no numpy, no safetensors
package), written from the format description, not from our C++. It validates a file and prints one
JSON object: {"metadata": {...}, "tensors": {name: {"dtype", "shape", "sha256"}}}. Exit 1 on an
invalid file, with the reason on stderr."""
import hashlib
import json
import struct
import sys

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
         "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8}


def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        fail("duplicate key")
    return dict(pairs)


def main(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail("too small")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        fail("header length beyond the file")
    header = json.loads(blob[8:8 + n].decode("utf-8"), object_pairs_hook=no_duplicates)
    if not isinstance(header, dict):
        fail("header is not an object")
    data = blob[8 + n:]
    metadata = header.pop("__metadata__", {})
    spans = []
    out = {}
    for name, entry in header.items():
        count = 1
        for d in entry["shape"]:
            count *= d
        begin, end = entry["data_offsets"]
        if end - begin != count * SIZES[entry["dtype"]]:
            fail(f"{name}: size mismatch")
        spans.append((begin, end))
        out[name] = {"dtype": entry["dtype"], "shape": entry["shape"],
                     "sha256": hashlib.sha256(data[begin:end]).hexdigest()}
    spans.sort()
    pos = 0
    for begin, end in spans:
        if begin != pos:
            fail("gap or overlap")
        pos = end
    if pos != len(data):
        fail("data not covered exactly")
    print(json.dumps({"metadata": metadata, "tensors": out}, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
