#!/usr/bin/python3
"""The chart installs exactly the CRDs in crds/ (scripts/sync-chart-crds.sh keeps them in step)."""
import filecmp
import glob
import os
import shutil
import subprocess
import tempfile
import unittest

import chartlib
from chartlib import CHART, SOURCE_DIR

SCRIPT = os.path.join(SOURCE_DIR, "scripts", "sync-chart-crds.sh")


def crd_names(d):
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, "*.yaml")))


class CrdSync(unittest.TestCase):
    def test_chart_crds_are_byte_for_byte_the_top_level_crds(self):
        top, chart = os.path.join(SOURCE_DIR, "crds"), os.path.join(CHART, "crds")
        self.assertTrue(crd_names(top), "crds/ holds no CRD")
        self.assertEqual(crd_names(chart), crd_names(top),
                         "charts/infergate/crds and crds/ hold different files: run scripts/sync-chart-crds.sh")
        for name in crd_names(top):
            with self.subTest(crd=name):
                self.assertTrue(filecmp.cmp(os.path.join(top, name), os.path.join(chart, name), shallow=False),
                                f"charts/infergate/crds/{name} differs from crds/{name}: "
                                "run scripts/sync-chart-crds.sh")

    def test_the_sync_script_reports_then_repairs_drift(self):
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "scripts"))
            shutil.copy(SCRIPT, os.path.join(tmp, "scripts"))
            shutil.copytree(os.path.join(SOURCE_DIR, "crds"), os.path.join(tmp, "crds"),
                            ignore=shutil.ignore_patterns("examples"))
            chart_crds = os.path.join(tmp, "charts", "infergate", "crds")
            shutil.copytree(os.path.join(CHART, "crds"), chart_crds)
            script = os.path.join(tmp, "scripts", "sync-chart-crds.sh")
            run = lambda *a: subprocess.run(["bash", script, *a], capture_output=True, text=True, timeout=30)

            self.assertEqual(run("--check").returncode, 0)
            name = crd_names(chart_crds)[0]
            with open(os.path.join(tmp, "crds", name), "a") as f:
                f.write("# a field added upstream\n")
            with open(os.path.join(chart_crds, "stale.yaml"), "w") as f:
                f.write("kind: CustomResourceDefinition\n")
            r = run("--check")
            self.assertEqual(r.returncode, 1)
            self.assertIn(name, r.stderr)
            self.assertIn("stale.yaml", r.stderr)

            self.assertEqual(run().returncode, 0)
            self.assertEqual(run("--check").returncode, 0)
            self.assertEqual(crd_names(chart_crds), crd_names(os.path.join(tmp, "crds")))

    def test_the_sync_script_refuses_an_unknown_argument(self):
        r = subprocess.run(["bash", SCRIPT, "--force"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--force", r.stderr)


if __name__ == "__main__":
    chartlib.main()
