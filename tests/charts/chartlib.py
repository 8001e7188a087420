"""Helpers for the chart tests: find helm, render the chart, parse what it renders.

The tests run under /usr/bin/python3 (Debian's, with python3-yaml). helm comes from .tools/bin (fetched
by scripts/install-deps.sh); a test that needs it and cannot find it exits 77, which CTest reports as
skipped, with the reason on stderr.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

SKIP = 77
SOURCE_DIR = os.environ.get("INFERGATE_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
CHART = os.path.join(SOURCE_DIR, "charts", "infergate")
NAMESPACE = "infergate-system"


def find_tool(name, env_var):
    """The tool's path: $env_var, then <source>/.tools/bin/<name>, then PATH; None when absent."""
    candidates = [os.environ.get(env_var), os.path.join(SOURCE_DIR, ".tools", "bin", name),
                  shutil.which(name)]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def require_tool(name, env_var, hint):
    path = find_tool(name, env_var)
    if path is None:
        sys.stderr.write(f"SKIPPED: {name} not found (${env_var}, .tools/bin, PATH): {hint}\n")
        sys.exit(SKIP)
    return path


class RenderError(Exception):
    def __init__(self, stderr):
        super().__init__(stderr)
        self.stderr = stderr


def helm(helm_bin, *args, check=True):
    r = subprocess.run([helm_bin, *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HELM_CACHE_HOME": tempfile.gettempdir() + "/helm-cache",
                            "HELM_CONFIG_HOME": tempfile.gettempdir() + "/helm-config",
                            "HELM_DATA_HOME": tempfile.gettempdir() + "/helm-data"})
    if check and r.returncode != 0:
        raise RenderError(r.stderr)
    return r


def render(helm_bin, values=None, set_args=(), include_crds=False, namespace=NAMESPACE):
    """helm template over the chart with the given values; returns the list of parsed objects."""
    args = ["template", "t", CHART, "--namespace", namespace]
    args.append("--include-crds" if include_crds else "--skip-crds")
    with tempfile.TemporaryDirectory() as tmp:
        if values is not None:
            vf = os.path.join(tmp, "values.yaml")
            with open(vf, "w") as f:
                yaml.safe_dump(values, f)
            args += ["--values", vf]
        for s in set_args:
            args += ["--set", s]
        r = helm(helm_bin, *args)
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def by_kind(objs, kind):
    return [o for o in objs if o.get("kind") == kind]


def one(objs, kind):
    found = by_kind(objs, kind)
    if len(found) != 1:
        raise AssertionError(f"expected one {kind}, found {len(found)}")
    return found[0]


def engine_series():
    """The series the performance gate reads per engine and signal ({"vllm": {"ttft": [...], ...}}), from
    the engine-profile table in operator/api/src/engine_profile.cc: the dashboard and the alerts read
    the same ones."""
    with open(os.path.join(SOURCE_DIR, "operator", "api", "src", "engine_profile.cc")) as f:
        text = f.read()
    out = {}
    for row in re.finditer(r"EngineProfile (\w+)_row\(\) \{(.*?)\n\}", text, re.S):
        signals = {}
        for sig, body in re.findall(r"p\.metrics\.(ttft|tpot|requests|errors) = \{(.*?)\};", row.group(2), re.S):
            signals[sig] = re.findall(r'series\("([^"]+)"', body)
        if signals:
            out[row.group(1)] = signals
    return out


def engine_metric_names(expr):
    """The third-party engines' metric names a PromQL expression reads (vllm:*, sglang:*, http_requests_total)."""
    return set(re.findall(r"\b(?:vllm|sglang):[a-z0-9_]+|\bhttp_requests_total\b", expr))


def main():
    """unittest.main with verbose output; returns CTest's exit codes."""
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)
