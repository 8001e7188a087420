#!/usr/bin/python3
"""The example alerts (charts/infergate/files/alerts.yaml) are valid Prometheus rules that fire when they
should: `promtool check rules`, then `promtool test rules` over synthetic series
(alerts_promtool_test.yaml), and every metric they read is one docs/metrics.md documents."""
import os
import re
import subprocess
import tempfile
import unittest

import yaml

import chartlib
from chartlib import CHART, SOURCE_DIR

PROMTOOL = chartlib.require_tool("promtool", "INFERGATE_PROMTOOL",
                                 "install Debian's prometheus package (scripts/install-deps.sh)")
ALERTS = os.path.join(CHART, "files", "alerts.yaml")
TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "alerts_promtool_test.yaml")


def promtool(*args):
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120)


def rules():
    with open(ALERTS) as f:
        return [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]


class Alerts(unittest.TestCase):
    def test_promtool_accepts_the_rules(self):
        r = promtool("check", "rules", ALERTS)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_alerts_fire_on_the_series_that_should_fire_them_and_no_others(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(TESTS) as f:
                text = f.read().replace("[ALERTS_FILE]", f"[{ALERTS}]")
            path = os.path.join(tmp, "tests.yaml")
            with open(path, "w") as f:
                f.write(text)
            r = promtool("test", "rules", path)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_every_alert_has_a_severity_and_a_summary(self):
        for rule in rules():
            with self.subTest(alert=rule["alert"]):
                self.assertIn(rule["labels"]["severity"], ("warning", "critical"))
                self.assertTrue(rule["annotations"]["summary"])

    def test_every_metric_the_alerts_read_is_documented(self):
        with open(os.path.join(SOURCE_DIR, "docs", "metrics.md")) as f:
            doc = f.read()
        for rule in rules():
            for metric in set(re.findall(r"\binfergate_[a-z0-9_]+", rule["expr"])):
                base = re.sub(r"_(bucket|sum|count)$", "", metric)
                with self.subTest(alert=rule["alert"], metric=base):
                    self.assertIn(f"`{base}`", doc)


if __name__ == "__main__":
    chartlib.main()
