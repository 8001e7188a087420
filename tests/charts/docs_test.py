#!/usr/bin/python3
"""The user documentation this folder's checks cover stays true to the repository: links resolve, the
quickstart builds the images the chart deploys and installs the chart with flags the chart accepts, and
the kind end-to-end script and workflow are well formed (they need Docker, so they only run on forks)."""
import os
import re
import shlex
import subprocess
import unittest

import yaml

import chartlib
from chartlib import CHART, SOURCE_DIR

DOCS = ["quickstart-kind.md", "concepts.md", "security-operations.md", "metrics.md", "crd-reference.md"]
# Pages other engineers write at the same time; links to them are checked once they exist.
WRITTEN_ELSEWHERE = {"docs/rollout.md", "docs/capacity-planning.md"}


def read(rel):
    with open(os.path.join(SOURCE_DIR, rel)) as f:
        return f.read()


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(rel):
    text = re.sub(r"```.*?```", "", read(rel), flags=re.S)
    return {slug(m) for m in re.findall(r"^#+\s+(.*)$", text, flags=re.M)}


def commands(text, program):
    """Shell command lines starting with `program` in the page's code blocks, continuation lines joined."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith(program + " "):
                out.append(line)
    return out


class Links(unittest.TestCase):
    def test_every_relative_link_resolves_to_a_file_and_heading(self):
        for page in DOCS:
            text = re.sub(r"```.*?```", "", read(f"docs/{page}"), flags=re.S)
            # Inline code is not a link, whatever its brackets (a regular expression in crd-reference.md).
            text = re.sub(r"``.*?``|`[^`\n]*`", "", text)
            for target in re.findall(r"\]\(([^)\s]+)\)", text):
                if re.match(r"[a-z]+://", target):
                    continue
                path, _, anchor = target.partition("#")
                rel = os.path.normpath(os.path.join("docs", path)) if path else f"docs/{page}"
                with self.subTest(page=page, link=target):
                    if rel in WRITTEN_ELSEWHERE and not os.path.exists(os.path.join(SOURCE_DIR, rel)):
                        continue
                    self.assertTrue(os.path.exists(os.path.join(SOURCE_DIR, rel)), f"{rel} does not exist")
                    if anchor and rel.endswith(".md"):
                        self.assertIn(anchor, anchors(rel), f"{rel} has no heading #{anchor}")

    def test_security_operations_points_to_the_security_and_agent_pages_instead_of_repeating_them(self):
        text = read("docs/security-operations.md")
        self.assertIn("](security.md)", text)
        self.assertIn("](agent.md)", text)
        for topic in ("## Threat model", "### Rotate", "## A verification failure", "## Hash-while-load"):
            self.assertIn(topic, text)


class Quickstart(unittest.TestCase):
    def test_it_builds_every_cpu_image_the_chart_deploys_with_the_dockerfiles_own_command(self):
        text = read("docs/quickstart-kind.md")
        builds = commands(text, "docker build")
        with open(os.path.join(CHART, "values.yaml")) as f:
            values = yaml.safe_load(f)
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            version = yaml.safe_load(f)["appVersion"]
        wanted = [values["image"]["repository"], values["images"]["agent"]["repository"],
                  values["images"]["runtime"]["repository"]]
        tags = {}
        for b in builds:
            argv = shlex.split(b)
            tags[argv[argv.index("-t") + 1]] = argv[argv.index("-f") + 1]
        for repo in wanted:
            with self.subTest(image=repo):
                self.assertIn(f"{repo}:{version}", tags)
                dockerfile = tags[f"{repo}:{version}"]
                self.assertIn(f"docker build -f {dockerfile} -t {repo}:{version} .", read(dockerfile))
        self.assertIn("runtime/Dockerfile.cuda", text)

    def test_its_helm_install_line_renders_with_the_chart(self):
        helm = chartlib.find_tool("helm", "INFERGATE_HELM")
        if helm is None:
            self.skipTest("helm not found: run scripts/install-deps.sh")
        lines = commands(read("docs/quickstart-kind.md"), "helm install")
        self.assertEqual(len(lines), 1, lines)
        argv = shlex.split(lines[0])
        self.assertEqual(argv[:4], ["helm", "install", "infergate", "charts/infergate"])
        args = [a for a in argv[4:] if a not in ("--create-namespace", "--wait")]
        r = chartlib.helm(helm, "template", "infergate", CHART, *args, check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        objs = [d for d in yaml.safe_load_all(r.stdout) if d]
        names = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in objs}
        # The page then waits for deploy/infergate-operator and relies on a Role in "models".
        self.assertIn(("Deployment", "infergate-operator", "infergate-system"), names)
        self.assertIn(("Role", "infergate-trust-secrets", "models"), names)


class KindEndToEnd(unittest.TestCase):
    def test_the_script_parses_and_uses_the_same_install_as_the_quickstart(self):
        script = os.path.join(SOURCE_DIR, "scripts", "kind-e2e.sh")
        r = subprocess.run(["bash", "-n", script], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        text = read("scripts/kind-e2e.sh")
        self.assertIn("helm install infergate charts/infergate", text)
        self.assertIn("rbac.trustSecretNamespaces", text)
        self.assertIn("DigestMismatch", text)

    def test_the_workflow_runs_the_script_with_a_timeout_and_read_only_permissions(self):
        wf = yaml.safe_load(read(".github/workflows/kind-e2e.yaml"))
        triggers = wf.get("on", wf.get(True))
        self.assertIn("workflow_dispatch", triggers)
        self.assertEqual(wf["permissions"], {"contents": "read"})
        job = wf["jobs"]["kind-e2e"]
        self.assertLessEqual(job["timeout-minutes"], 120)
        runs = [s.get("run", "") for s in job["steps"]]
        self.assertIn("scripts/kind-e2e.sh", runs)
        for s in job["steps"]:
            if "uses" in s:
                self.assertRegex(s["uses"], r"@v\d+$|@[0-9a-f]{40}$", "actions are pinned")


if __name__ == "__main__":
    chartlib.main()
