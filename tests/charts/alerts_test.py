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
            names = set(re.findall(r"\binfergate_[a-z0-9_]+", rule["expr"])) | chartlib.engine_metric_names(rule["expr"])
            for metric in names:
                base = re.sub(r"_(bucket|sum|count)$", "", metric)
                with self.subTest(alert=rule["alert"], metric=base):
                    self.assertIn(f"`{base}`", doc)

    def test_the_performance_alerts_read_every_engines_series_as_the_gate_does(self):
        by_name = {r["alert"]: r["expr"] for r in rules()}
        wanted = {"InfergateHighTimeToFirstToken": ("ttft", "_bucket"),
                  "InfergateHighTimePerOutputToken": ("tpot", "_bucket"),
                  "InfergateHighErrorRate": ("errors", ""), }
        series = chartlib.engine_series()
        self.assertIn("vllm", series)
        self.assertIn("sglang", series)
        for alert, (signal, suffix) in wanted.items():
            for engine, signals in series.items():
                names = signals.get(signal, []) + (signals.get("requests", []) if signal == "errors" else [])
                for name in names:
                    with self.subTest(alert=alert, engine=engine, series=name):
                        self.assertIn(name + suffix, by_name[alert])


if __name__ == "__main__":
    chartlib.main()
