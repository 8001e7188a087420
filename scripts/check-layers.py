#!/usr/bin/python3
"""Checks the build against the layer table in docs/development.md (section "Layers").

Reads the link graph CMake wrote at generate time (<build>/infergate-link-graph.json, from
cmake/InfergateLayers.cmake) and fails, naming the link and the path it was reached by, when
  - a target built outside tests/ and bench/ is in no row of the table, or in two;
  - a target reaches (directly or through others) a target whose layer its own layer may not use,
    where "may use" is the table's "may link" column followed transitively, plus the layer itself;
  - targets link each other in a cycle;
  - with --symbols: a binary named in the table defines a global symbol that a library its layer may
    not use defines (nm), so a source file compiled into the wrong library is caught too (libraries
    under tests/, which may compile production sources again, are left out of this comparison).
Targets under tests/ and bench/ may link anything. Exit status 0 when the build holds the table, 1
when it does not, 2 on bad input (a missing graph file, a table that does not parse).

Usage: check-layers.py --graph BUILD/infergate-link-graph.json [--table docs/development.md] [--symbols]
"""
import argparse
import json
import os
import re
import subprocess
import sys
from collections import deque

BEGIN = "<!-- layers:begin -->"
END = "<!-- layers:end -->"
EXEMPT_DIRS = ("tests", "bench")  # test and benchmark code may link everything


class InputError(Exception):
    pass


def parse_table(text):
    """The table between the markers: {layer: {"targets": [...], "may_link": [...]}}, in order."""
    if BEGIN not in text or END not in text:
        raise InputError(f"the layer table is not marked with {BEGIN} ... {END}")
    body = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    layers = {}
    rows = [line for line in body.splitlines() if line.strip().startswith("|")]
    if len(rows) < 3:
        raise InputError("the layer table has no rows")
    header = [c.strip().lower() for c in rows[0].strip().strip("|").split("|")]
    try:
        col_layer, col_targets, col_may = header.index("layer"), header.index("targets"), header.index("may link")
    except ValueError:
        raise InputError(f"the layer table's header must have columns layer, targets, may link; it has {header}")
    for line in rows[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != len(header):
            raise InputError(f"layer table row has {len(cells)} cells, the header {len(header)}: {line}")
        names = re.findall(r"`([^`]+)`", cells[col_layer])
        if len(names) != 1:
            raise InputError(f"layer table row names no single layer in `backticks`: {line}")
        layer = names[0]
        if layer in layers:
            raise InputError(f"layer {layer} has two rows in the table")
        layers[layer] = {
            "targets": re.findall(r"`([^`]+)`", cells[col_targets]),
            "may_link": re.findall(r"`([^`]+)`", cells[col_may]),
        }
    for layer, row in layers.items():
        for other in row["may_link"]:
            if other not in layers:
                raise InputError(f"layer {layer} may link {other}, which is no layer of the table")
    return layers


def allowed_layers(layers):
    """{layer: the layers it may use}: itself and its "may link" column, followed transitively."""
    out = {}
    for layer in layers:
        seen, todo = {layer}, deque([layer])
        while todo:
            for other in layers[todo.popleft()]["may_link"]:
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        out[layer] = seen
    return out


def is_exempt(target):
    d = target["dir"]
    return any(d == e or d.startswith(e + "/") for e in EXEMPT_DIRS)


def layer_of_targets(layers, graph):
    """{target: layer} for every target in a table row; errors for targets in no row or in two."""
    errors, owner = [], {}
    for layer, row in layers.items():
        for name in row["targets"]:
            if name in owner:
                errors.append(f"{name} is in two layers of the table: {owner[name]} and {layer}")
            owner[name] = layer
    for name, t in sorted(graph.items()):
        if name not in owner and not is_exempt(t):
            errors.append(f"{name} ({t['dir']}/) is in no layer of the table in docs/development.md: "
                          "add it to the row of the layer it belongs to")
    return owner, errors


def edges(target):
    return list(target.get("public", [])) + list(target.get("private", []))


def path_to(graph, start, goal):
    """A shortest link path start -> ... -> goal, for the error message."""
    prev, todo = {start: None}, deque([start])
    while todo:
        cur = todo.popleft()
        if cur == goal:
            break
        for nxt in edges(graph.get(cur, {})):
            if nxt not in prev:
                prev[nxt] = cur
                todo.append(nxt)
    out, cur = [], goal
    while cur is not None:
        out.append(cur)
        cur = prev.get(cur)
    return " -> ".join(reversed(out))


def reachable(graph, start):
    seen, todo = set(), deque(edges(graph[start]))
    while todo:
        cur = todo.popleft()
        if cur in seen or cur not in graph:
            continue
        seen.add(cur)
        todo.extend(edges(graph[cur]))
    return seen


def check_links(layers, graph):
    owner, errors = layer_of_targets(layers, graph)
    allowed = allowed_layers(layers)
    for name, t in sorted(graph.items()):
        if is_exempt(t) or name not in owner:
            continue
        mine = owner[name]
        for other in sorted(reachable(graph, name)):
            if other == name:
                continue  # a cycle: check_cycles reports it
            theirs = owner.get(other, "tests" if is_exempt(graph[other]) else None)
            if theirs is None:
                continue  # already reported as in no layer
            if theirs not in allowed[mine]:
                kind = "links" if other in edges(t) else "reaches"
                errors.append(f"{name} (layer {mine}) {kind} {other} (layer {theirs}), which layer {mine} may not "
                              f"use: {path_to(graph, name, other)}")
    errors.extend(check_cycles(graph))
    return errors


def check_cycles(graph):
    """Cycles among the targets built here (CMake allows them between static libraries)."""
    errors, state = [], {}

    def visit(node, stack):
        state[node] = "active"
        stack.append(node)
        for nxt in edges(graph[node]):
            if nxt not in graph:
                continue
            if state.get(nxt) == "active":
                cycle = stack[stack.index(nxt):] + [nxt]
                errors.append("a link cycle: " + " -> ".join(cycle))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    return errors


def defined_globals(path):
    """The strong global symbols (text, data, bss, read-only) an object, archive or binary defines."""
    r = subprocess.run(["nm", "--defined-only", "-g", path], capture_output=True, text=True)
    if r.returncode != 0:
        raise InputError(f"nm {path}: {r.stderr.strip()}")
    out = set()
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[-2] in ("T", "D", "B", "R"):
            out.add(parts[-1])
    return out


def demangle(names):
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return r.stdout.splitlines() if r.returncode == 0 else list(names)


def check_symbols(layers, graph):
    """Each binary in the table defines no global symbol of a library its layer may not use."""
    owner, _ = layer_of_targets(layers, graph)
    allowed = allowed_layers(layers)
    errors = []
    libraries = {n: t for n, t in graph.items() if t["type"] in ("STATIC_LIBRARY", "SHARED_LIBRARY") and t["file"]}
    symbols = {}
    for name, t in sorted(graph.items()):
        if t["type"] != "EXECUTABLE" or name not in owner:
            continue
        if not os.path.exists(t["file"]):
            raise InputError(f"{name} is not built ({t['file']}): build it before the symbol check")
        in_binary = defined_globals(t["file"])
        for lib, lt in sorted(libraries.items()):
            # Test libraries may compile production sources again (fuzz builds, CUDA emulation): their
            # symbols say nothing about a binary; linking them at all is check_links' business.
            theirs = owner.get(lib)
            if is_exempt(lt) or theirs is None or theirs in allowed[owner[name]]:
                continue
            if not os.path.exists(lt["file"]):
                raise InputError(f"{lib} is not built ({lt['file']}): build it before the symbol check")
            if lib not in symbols:
                symbols[lib] = defined_globals(lt["file"])
            shared = sorted(in_binary & symbols[lib])
            if shared:
                shown = ", ".join(demangle(shared[:3])) + (f" and {len(shared) - 3} more" if len(shared) > 3 else "")
                errors.append(f"{name} (layer {owner[name]}) contains code of {lib} (layer {theirs}), which layer "
                              f"{owner[name]} may not use: it defines {shown}")
    return errors


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", required=True, help="the build's infergate-link-graph.json")
    ap.add_argument("--table", help="the page holding the layer table (default: docs/development.md of the source)")
    ap.add_argument("--symbols", action="store_true", help="also compare the binaries' symbols with nm")
    args = ap.parse_args(argv)
    try:
        try:
            with open(args.graph) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            raise InputError(f"cannot read the link graph {args.graph}: {e}")
        table = args.table or os.path.join(data["source_dir"], "docs", "development.md")
        try:
            with open(table) as f:
                layers = parse_table(f.read())
        except OSError as e:
            raise InputError(f"cannot read the layer table: {e}")
        graph = data["targets"]
        errors = check_links(layers, graph)
        if args.symbols and not errors:
            errors = check_symbols(layers, graph)
    except InputError as e:
        print(f"check-layers: {e}", file=sys.stderr)
        return 2
    for e in errors:
        print(f"check-layers: {e}", file=sys.stderr)
    if errors:
        print(f"check-layers: {len(errors)} break(s) of the layer table in {table}", file=sys.stderr)
        return 1
    checked = sum(1 for t in graph.values() if not is_exempt(t))
    print(f"check-layers: {checked} targets hold the layer table ({len(layers)} layers)"
          + (", binaries' symbols checked" if args.symbols else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
