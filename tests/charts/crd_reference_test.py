#!/usr/bin/python3
"""docs/crd-reference.md is what scripts/gen-crd-docs.py writes from crds/, and says what the CRD says."""
import glob
import os
import subprocess
import sys
import tempfile
import unittest

import yaml

import chartlib
from chartlib import SOURCE_DIR

GEN = os.path.join(SOURCE_DIR, "scripts", "gen-crd-docs.py")
DOC = os.path.join(SOURCE_DIR, "docs", "crd-reference.md")
CRD = sorted(glob.glob(os.path.join(SOURCE_DIR, "crds", "*.yaml")))


def gen(*args):
    return subprocess.run([sys.executable, GEN, *args], capture_output=True, text=True, timeout=60)


def leaves(schema, path=""):
    """Every field path of a structural schema, in the generator's notation."""
    for name, sub in schema.get("properties", {}).items():
        p = f"{path}.{name}" if path else name
        yield p
        yield from leaves(sub, p)
        items = sub.get("items", {})
        if "properties" in items:
            yield from leaves(items, p + "[]")


class CrdReference(unittest.TestCase):
    def test_the_checked_in_reference_is_what_the_generator_writes_now(self):
        r = gen("--check")
        self.assertEqual(r.returncode, 0, r.stderr + "\nrun /usr/bin/python3 scripts/gen-crd-docs.py")

    def test_every_field_enum_value_and_rule_of_the_crd_is_in_the_reference(self):
        with open(DOC) as f:
            doc = f.read()
        for path in CRD:
            with open(path) as f:
                crd = yaml.safe_load(f)
            for v in crd["spec"]["versions"]:
                schema = v["schema"]["openAPIV3Schema"]
                for field in leaves(schema):
                    if field in ("apiVersion", "kind", "metadata"):
                        continue
                    with self.subTest(field=field):
                        if "." not in field and "[" not in field:
                            self.assertIn(f"### {field}\n", doc)  # spec and status are sections
                        else:
                            self.assertIn(f"| `{field}` |", doc)
                weight = schema["properties"]["spec"]["properties"]["serving"]["properties"]["weightFormat"]
                for e in weight["enum"]:
                    self.assertIn(f"`{e}`", doc)
                for rule in schema["properties"]["spec"].get("x-kubernetes-validations", []):
                    self.assertIn(rule["message"], doc)

    def test_a_changed_crd_makes_the_check_fail_with_a_diff(self):
        with open(CRD[0]) as f:
            crd = yaml.safe_load(f)
        props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        props["serving"]["properties"]["newKnob"] = {"type": "integer", "minimum": 1, "description": "A new knob."}
        with tempfile.TemporaryDirectory() as tmp:
            changed = os.path.join(tmp, os.path.basename(CRD[0]))
            with open(changed, "w") as f:
                yaml.safe_dump(crd, f, sort_keys=False)
            r = gen("--check", "--out", DOC, changed)
            self.assertEqual(r.returncode, 1)
            self.assertIn("spec.serving.newKnob", r.stderr)
            out = os.path.join(tmp, "ref.md")
            self.assertEqual(gen("--out", out, changed).returncode, 0)
            with open(out) as f:
                self.assertIn("| `spec.serving.newKnob` | integer |  |  | >= 1 | A new knob. |", f.read())

    def test_a_file_that_is_not_a_crd_is_refused_by_name(self):
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "deployment.yaml")
            with open(bad, "w") as f:
                f.write("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n")
            r = gen("--out", os.path.join(tmp, "o.md"), bad)
            self.assertEqual(r.returncode, 2)
            self.assertIn("deployment.yaml", r.stderr)
            self.assertIn("not a CustomResourceDefinition", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(tmp, "o.md")))


if __name__ == "__main__":
    chartlib.main()
