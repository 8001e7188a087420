#!/usr/bin/python3
"""Counts the pixels of a PNG screenshot that are close to each given colour (a rendering check that
needs no image library: PNG is zlib-compressed scanlines with per-row filters).
usage: png_colours.py FILE.png RRGGBB [RRGGBB ...]   prints {"width":..,"height":..,"RRGGBB":count,...}"""
import json
import struct
import sys
import zlib


def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit("not a PNG")
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or colour not in (2, 6) or interlace != 0:
                raise SystemExit("unsupported PNG (depth %d colour %d interlace %d)" % (depth, colour, interlace))
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, bpp, rows


def main():
    width, height, bpp, rows = read_png(sys.argv[1])
    targets = [(h, int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)) for h in sys.argv[2:]]
    counts = {h: 0 for h, _, _, _ in targets}
    for line in rows:
        for x in range(0, width * bpp, bpp):
            r, g, b = line[x], line[x + 1], line[x + 2]
            for h, tr, tg, tb in targets:
                if abs(r - tr) <= 12 and abs(g - tg) <= 12 and abs(b - tb) <= 12:
                    counts[h] += 1
    out = {"width": width, "height": height}
    out.update(counts)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
