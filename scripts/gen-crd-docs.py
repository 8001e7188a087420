#!/usr/bin/python3
"""Writes docs/crd-reference.md from the CRD schemas in crds/, so the reference cannot drift from them.

Every field of every served version: its path, type, whether it is required, its default, its
constraints (enums, ranges, lengths, patterns, list semantics) and its description; the CEL rules that
span fields; printer columns; scope, names and subresources.

Usage: /usr/bin/python3 scripts/gen-crd-docs.py [--check] [--out FILE] [CRD.yaml ...]
  default CRDs: crds/*.yaml; default output: docs/crd-reference.md
  --check: write nothing; exit 1 (with a diff) when FILE is not what this script would write.
Exit codes: 0 written or up to date, 1 stale (--check), 2 usage or unreadable/invalid CRD.
"""
import argparse
import difflib
import glob
import os
import sys

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


class CrdError(Exception):
    pass


def cell(text):
    """Text safe inside a Markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def code(text):
    s = str(text)
    fence = "``" if "`" in s else "`"
    pad = " " if "`" in s else ""
    return f"{fence}{pad}{s}{pad}{fence}".replace("|", "\\|")


def scalar(v):
    """A YAML-ish rendering of a default or enum value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return yaml.safe_dump(v, default_flow_style=True, width=1000).strip()
    return str(v)


def type_of(s):
    if s.get("x-kubernetes-int-or-string"):
        return "int or string"
    t = s.get("type")
    if t is None and "anyOf" in s:
        return " or ".join(sorted({x.get("type", "?") for x in s["anyOf"]}))
    if t == "array":
        return f"[]{type_of(s.get('items', {}))}"
    if t == "object" and "additionalProperties" in s and "properties" not in s:
        ap = s["additionalProperties"]
        return f"map[string]{type_of(ap) if isinstance(ap, dict) else 'any'}"
    if t in ("integer", "number", "string") and s.get("format"):
        return f"{t} ({s['format']})"
    if t == "object" and s.get("x-kubernetes-preserve-unknown-fields"):
        return "object (free-form)"
    return t or "any"


def constraints(s):
    out = []
    if "enum" in s:
        out.append("one of " + ", ".join(code(scalar(e)) for e in s["enum"]))
    lo, hi = s.get("minimum"), s.get("maximum")
    if lo is not None and hi is not None:
        out.append(f"{lo}..{hi}")
    elif lo is not None:
        out.append(f">= {lo}")
    elif hi is not None:
        out.append(f"<= {hi}")
    if "minLength" in s and "maxLength" in s:
        out.append(f"length {s['minLength']}..{s['maxLength']}")
    elif "maxLength" in s:
        out.append(f"length <= {s['maxLength']}")
    elif "minLength" in s:
        out.append(f"length >= {s['minLength']}")
    if "pattern" in s:
        out.append("matches " + code(s["pattern"]))
    if "minItems" in s and "maxItems" in s:
        out.append(f"{s['minItems']}..{s['maxItems']} items")
    elif "maxItems" in s:
        out.append(f"at most {s['maxItems']} items")
    elif "minItems" in s:
        out.append(f"at least {s['minItems']} items")
    lt = s.get("x-kubernetes-list-type")
    if lt == "set":
        out.append("a set (no duplicates)")
    elif lt == "map":
        out.append("a map keyed by " + ", ".join(code(k) for k in s.get("x-kubernetes-list-map-keys", [])))
    items = s.get("items")
    if isinstance(items, dict) and s.get("type") == "array" and "properties" not in items:
        inner = constraints(items)
        if inner:
            out.append("each item: " + "; ".join(inner))
    ap = s.get("additionalProperties")
    if isinstance(ap, dict) and "properties" not in ap:
        inner = constraints(ap)
        if inner:
            out.append("each value: " + "; ".join(inner))
    return out


def walk(s, path, required, rows, rules):
    """Depth-first over a structural schema: one row per field, CEL rules collected with their path."""
    for r in s.get("x-kubernetes-validations", []):
        if "rule" not in r:
            raise CrdError(f"{path or '(root)'}: a validation without a rule")
        rules.append((path or "(root)", r["rule"], r.get("message", ""), r.get("fieldPath", "")))
    if path:
        rows.append({
            "path": path,
            "type": type_of(s),
            "required": required,
            "default": scalar(s["default"]) if "default" in s else "",
            "constraints": "; ".join(constraints(s)),
            "description": s.get("description", ""),
        })
    props = s.get("properties", {})
    req = set(s.get("required", []))
    for name in props:
        walk(props[name], f"{path}.{name}" if path else name, name in req, rows, rules)
    items = s.get("items")
    if isinstance(items, dict) and ("properties" in items or "x-kubernetes-validations" in items):
        walk_children(items, f"{path}[]", rows, rules)
    ap = s.get("additionalProperties")
    if isinstance(ap, dict) and "properties" in ap:
        walk_children(ap, f"{path}{{}}", rows, rules)


def walk_children(s, path, rows, rules):
    for r in s.get("x-kubernetes-validations", []):
        rules.append((path, r["rule"], r.get("message", ""), r.get("fieldPath", "")))
    req = set(s.get("required", []))
    for name, sub in s.get("properties", {}).items():
        walk(sub, f"{path}.{name}", name in req, rows, rules)


def field_table(rows, prefix):
    lines = ["| field | type | required | default | constraints | description |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if not (r["path"] == prefix or r["path"].startswith(prefix + ".") or r["path"].startswith(prefix + "[")):
            continue
        if r["path"] == prefix:
            continue
        lines.append("| {} | {} | {} | {} | {} | {} |".format(
            code(r["path"]), cell(r["type"]), "yes" if r["required"] else "",
            code(r["default"]) if r["default"] != "" else "", cell(r["constraints"]), cell(r["description"])))
    return lines


def render_crd(path):
    rel = os.path.relpath(path, ROOT)
    try:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
    except (OSError, yaml.YAMLError) as e:
        raise CrdError(f"{rel}: cannot read: {e}")
    out = []
    for crd in docs:
        if crd.get("kind") != "CustomResourceDefinition":
            raise CrdError(f"{rel}: not a CustomResourceDefinition (kind {crd.get('kind')!r})")
        spec = crd.get("spec", {})
        names = spec.get("names", {})
        for v in spec.get("versions", []):
            if not v.get("served", False):
                continue
            schema = v.get("schema", {}).get("openAPIV3Schema")
            if not schema:
                raise CrdError(f"{rel}: version {v.get('name')} has no openAPIV3Schema")
            kind, group = names.get("kind", "?"), spec.get("group", "?")
            out.append(f"## {kind} (`{group}/{v['name']}`)")
            out.append("")
            if schema.get("description"):
                out.append(schema["description"])
                out.append("")
            subs = sorted(v.get("subresources", {}) or {})
            out += [
                "| | |",
                "|---|---|",
                f"| CRD | {code(crd['metadata']['name'])} (from {code(rel)}) |",
                f"| scope | {spec.get('scope', '?')} |",
                f"| plural / singular | {code(names.get('plural', ''))} / {code(names.get('singular', ''))} |",
                f"| short names | {', '.join(code(n) for n in names.get('shortNames', [])) or 'none'} |",
                f"| categories | {', '.join(code(n) for n in names.get('categories', [])) or 'none'} |",
                f"| subresources | {', '.join(code(s) for s in subs) or 'none'} |",
            ]
            scale = (v.get("subresources") or {}).get("scale")
            if scale:
                out.append(f"| scale | replicas {code(scale.get('specReplicasPath', ''))}, status replicas "
                           f"{code(scale.get('statusReplicasPath', ''))}, selector "
                           f"{code(scale.get('labelSelectorPath', '')) if scale.get('labelSelectorPath') else 'none'} |")
            out += [
                f"| storage version | {'yes' if v.get('storage') else 'no'} |",
                "",
            ]
            cols = v.get("additionalPrinterColumns", [])
            if cols:
                out += [f"### `kubectl get {names.get('shortNames', [names.get('plural')])[0]}` columns", "",
                        "| column | type | from | description |", "|---|---|---|---|"]
                for c in cols:
                    out.append(f"| {cell(c['name'])} | {cell(c['type'])} | {code(c['jsonPath'])} | "
                               f"{cell(c.get('description', ''))} |")
                out.append("")
            rows, rules = [], []
            walk(schema, "", False, rows, rules)
            if rules:
                out += ["### Rules that span fields (CEL `x-kubernetes-validations`)", "",
                        "The API server refuses an object that breaks one of these, with the message shown, "
                        "naming the field the rule is on (or the one it reports, when it names one).", "",
                        "| on | reports | rule | message |", "|---|---|---|---|"]
                for where, rule, msg, field in rules:
                    reported = code(where + field) if field else ""
                    out.append(f"| {code(where)} | {reported} | {code(rule)} | {cell(msg)} |")
                out.append("")
            for top in ("spec", "status"):
                if top not in schema.get("properties", {}):
                    continue
                sub = schema["properties"][top]
                out += [f"### {top}", ""]
                if sub.get("description"):
                    out += [sub["description"], ""]
                out += field_table(rows, top)
                out.append("")
    return out


def generate(crd_paths):
    lines = [
        "# CRD reference",
        "",
        "<!-- Generated by scripts/gen-crd-docs.py from the CRDs in crds/. Do not edit by hand: change the",
        "     CRD, then run `/usr/bin/python3 scripts/gen-crd-docs.py`. tests/charts/crd_reference_test.py",
        "     fails when this page and the CRDs disagree. -->",
        "",
        "Every field of the custom resources infergate defines, as the API server validates them.",
        "Paths use `.` for object fields, `[]` for the items of a list and `{}` for the values of a map.",
        "What the fields mean for a rollout is explained in [concepts.md](concepts.md) and",
        "[crd.md](crd.md); the Helm chart installs these CRDs from `charts/infergate/crds/`.",
        "",
    ]
    for p in crd_paths:
        lines += render_crd(p)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 when stale")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "crd-reference.md"))
    ap.add_argument("crds", nargs="*")
    a = ap.parse_args()
    paths = a.crds or sorted(glob.glob(os.path.join(ROOT, "crds", "*.yaml")))
    if not paths:
        print("gen-crd-docs: no CRD given and none in crds/", file=sys.stderr)
        return 2
    try:
        text = generate(paths)
    except CrdError as e:
        print(f"gen-crd-docs: {e}", file=sys.stderr)
        return 2
    if a.check:
        try:
            with open(a.out) as f:
                current = f.read()
        except OSError as e:
            print(f"gen-crd-docs: {a.out}: {e.strerror}", file=sys.stderr)
            return 1
        if current != text:
            diff = difflib.unified_diff(current.splitlines(), text.splitlines(), a.out, "regenerated", lineterm="")
            sys.stderr.write("\n".join(list(diff)[:60]) + "\n")
            print(f"gen-crd-docs: {os.path.relpath(a.out, ROOT)} is stale: run scripts/gen-crd-docs.py",
                  file=sys.stderr)
            return 1
        return 0
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
