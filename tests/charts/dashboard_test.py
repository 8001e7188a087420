#!/usr/bin/python3
"""The Grafana dashboard is well formed, has the four metric groups, and every query is valid PromQL
(checked by promtool) reading only metrics that docs/metrics.md documents. Also: docs/metrics.md lists
every metric the C++ sources register, so a new metric cannot go undocumented."""
import glob
import json
import os
import re
import subprocess
import tempfile
import unittest

import yaml

import chartlib
from chartlib import SOURCE_DIR

DASHBOARD = os.path.join(SOURCE_DIR, "docs", "grafana", "infergate-dashboard.json")
METRICS_DOC = os.path.join(SOURCE_DIR, "docs", "metrics.md")
GROUPS = ["Capacity", "Performance", "Quality", "Security"]


def load():
    with open(DASHBOARD) as f:
        return json.load(f)


def queries(dash):
    for p in dash["panels"]:
        for t in p.get("targets", []):
            yield p, t["expr"]


def doc():
    with open(METRICS_DOC) as f:
        return f.read()


def registered_metric_names():
    """Metric names the C++ sources register with prometheus-cpp or write as exposition text."""
    names = {}
    patterns = [r'\.Name\(\s*"(infergate_[a-z0-9_]+)"', r'\{\s*"(infergate_[a-z0-9_]+)",\s*"[A-Z]',
                r'MetricFamily\s*\w*\s*\{\s*"(infergate_[a-z0-9_]+)"', r'# (?:TYPE|HELP) (infergate_[a-z0-9_]+)']
    for comp in ("operator", "runtime", "agent"):
        for path in glob.glob(os.path.join(SOURCE_DIR, comp, "**", "src", "**", "*.cc"), recursive=True) + \
                glob.glob(os.path.join(SOURCE_DIR, comp, "**", "src", "*.cc"), recursive=True):
            with open(path, errors="replace") as f:
                text = f.read()
            for pat in patterns:
                for name in re.findall(pat, text):
                    names.setdefault(name, os.path.relpath(path, SOURCE_DIR))
    return names


class Dashboard(unittest.TestCase):
    def test_it_has_one_row_per_metric_group_in_order(self):
        rows = [p["title"] for p in load()["panels"] if p["type"] == "row"]
        self.assertEqual(rows, GROUPS)

    def test_every_group_has_panels_and_every_panel_queries_through_the_datasource_variable(self):
        dash = load()
        current, counts = None, {}
        for p in dash["panels"]:
            if p["type"] == "row":
                current = p["title"]
                continue
            counts[current] = counts.get(current, 0) + 1
            with self.subTest(panel=p["title"]):
                self.assertEqual(p["datasource"]["uid"], "${datasource}")
                self.assertTrue(p["targets"])
        for g in GROUPS:
            self.assertGreaterEqual(counts.get(g, 0), 2, f"the {g} row needs panels")
        names = [v["name"] for v in dash["templating"]["list"]]
        self.assertEqual(names, ["datasource", "namespace", "model"])

    def test_panel_ids_are_unique_and_panels_do_not_overlap(self):
        panels = load()["panels"]
        ids = [p["id"] for p in panels]
        self.assertEqual(len(ids), len(set(ids)))
        cells = {}
        for p in panels:
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    self.assertNotIn((x, y), cells, f"{p['title']} overlaps {cells.get((x, y))}")
                    cells[(x, y)] = p["title"]

    def test_every_query_is_valid_promql(self):
        promtool = chartlib.find_tool("promtool", "INFERGATE_PROMTOOL")
        if promtool is None:
            self.skipTest("promtool not found (Debian's prometheus package)")
        rules = []
        for i, (p, expr) in enumerate(queries(load())):
            e = expr.replace("$__rate_interval", "5m").replace("$namespace", ".*").replace("$model", ".*")
            rules.append({"record": f"dashboard:query_{i}", "expr": e})
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "rules.yaml")
            with open(path, "w") as f:
                yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
            r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_every_metric_it_reads_is_documented(self):
        text = doc()
        for p, expr in queries(load()):
            for metric in set(re.findall(r"\binfergate_[a-z0-9_]+", expr)):
                base = re.sub(r"_(bucket|sum|count)$", "", metric)
                with self.subTest(panel=p["title"], metric=base):
                    self.assertIn(f"`{base}`", text)


    def test_it_reads_the_series_of_vllm_and_sglang_beside_the_bundled_runtimes(self):
        # What each panel shows, per engine, as the performance gate reads it (engine_profile.cc).
        series = chartlib.engine_series()
        self.assertTrue({"bundled", "vllm", "sglang"} <= set(series), series)
        panels = {p["title"]: " ".join(t["expr"] for t in p.get("targets", [])) for p in load()["panels"]}
        wanted = {"Time to first token": ("ttft", "_bucket"), "Time per output token": ("tpot", "_bucket"),
                  "Requests per second": ("requests", ""), "Error ratio": ("errors", "")}
        for title, (signal, suffix) in wanted.items():
            for engine, signals in series.items():
                for name in signals.get(signal, []):
                    with self.subTest(panel=title, engine=engine, series=name):
                        self.assertIn(name + suffix, panels[title])
        for title, names in {"KV-cache fill": ["vllm:kv_cache_usage_perc", "sglang:token_usage"],
                             "Requests running / waiting": ["vllm:num_requests_running", "sglang:num_queue_reqs"]}.items():
            for name in names:
                self.assertIn(name, panels[title])

    def test_every_engine_series_it_reads_is_documented(self):
        text = doc()
        for p, expr in queries(load()):
            for metric in chartlib.engine_metric_names(expr):
                base = re.sub(r"_(bucket|sum|count)$", "", metric)
                with self.subTest(panel=p["title"], metric=base):
                    self.assertIn(f"`{base}`", text)


class MetricsReference(unittest.TestCase):
    def test_every_metric_registered_in_the_sources_is_documented(self):
        names = registered_metric_names()
        self.assertIn("infergate_operator_reconcile_total", names, "the source scan found nothing")
        text = doc()
        for name, where in sorted(names.items()):
            with self.subTest(metric=name):
                self.assertIn(f"`{name}`", text, f"{name} (registered in {where}) is not in docs/metrics.md")

    def test_every_runtime_metric_of_the_contract_is_documented_with_its_type(self):
        contract = {
            "infergate_time_to_first_token_seconds": "histogram",
            "infergate_time_per_output_token_seconds": "histogram",
            "infergate_e2e_request_latency_seconds": "histogram",
            "infergate_request_queue_time_seconds": "histogram",
            "infergate_requests_total": "counter", "infergate_request_errors_total": "counter",
            "infergate_prompt_tokens_total": "counter", "infergate_generation_tokens_total": "counter",
            "infergate_num_requests_running": "gauge", "infergate_num_requests_waiting": "gauge",
            "infergate_kv_cache_blocks_used": "gauge", "infergate_kv_cache_blocks_capacity": "gauge",
            "infergate_weight_bytes": "gauge", "infergate_preemptions_total": "counter",
            "infergate_model_info": "gauge",
        }
        rows = {}
        for line in doc().splitlines():
            m = re.match(r"\| `(infergate_[a-z0-9_]+)` \| ([a-z]+)", line)
            if m:
                rows[m.group(1)] = m.group(2)
        for name, kind in contract.items():
            with self.subTest(metric=name):
                self.assertEqual(rows.get(name), kind)


if __name__ == "__main__":
    chartlib.main()
