#!/usr/bin/python3
"""The README's commands stay in step with the repository: the two set-up commands that .ci/run takes
from it name scripts that exist, and every variable .ci/run sets is one those scripts read; every
script, binary subcommand, flag and repository path the README names exists; the planner example runs
and the helm line renders. A renamed script or flag fails here, in CI, not on a newcomer's machine."""
import os
import re
import shlex
import subprocess
import unittest

import chartlib
from chartlib import CHART, SOURCE_DIR

BIN_DIR = os.environ.get("INFERGATE_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
BINARIES = ("infergate-runtime", "infergate-agent", "infergate-operator")


def read(rel):
    with open(os.path.join(SOURCE_DIR, rel)) as f:
        return f.read()


README = read("README.md")


def code_commands(text):
    """Every command line in the page: the lines of its fenced blocks (continuations joined, comments
    dropped) and its inline code spans, each as an argv list; `[...]` optional parts are unwrapped."""
    lines = []
    for block in re.findall(r"^\s*```[a-z]*\n(.*?)^\s*```", text, flags=re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        lines += [ln.split(" #")[0].strip() for ln in joined.splitlines()]
    prose = re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.S | re.M)
    lines += re.findall(r"`([^`\n]+)`", prose)
    out = []
    for line in lines:
        line = re.sub(r"\[([^\]]*)\]", r"\1", line)
        try:
            argv = shlex.split(line)
        except ValueError:
            continue
        if argv:
            out.append(argv)
    return out


def binary_commands(program):
    return [argv for argv in code_commands(README) if argv[0] == program]


def subcommand_help(program, words):
    """`program words... --help`: the longest run of leading words that is a subcommand, and its help."""
    path = os.path.join(BIN_DIR, program)
    for n in range(len(words), -1, -1):
        r = subprocess.run([path, *words[:n], "--help"], capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            return words[:n], r.stdout + r.stderr
    raise AssertionError(f"{program} --help failed")


def leading_words(argv):
    words = []
    for a in argv[1:]:
        if a.startswith("-"):
            break
        words.append(a)
    return words


class SetUpCommands(unittest.TestCase):
    def commands(self):
        r = subprocess.run([os.path.join(SOURCE_DIR, "scripts", "readme-commands.sh")],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.splitlines()

    def test_the_two_commands_ci_runs_are_scripts_of_the_repository_that_parse(self):
        cmds = self.commands()
        self.assertEqual(len(cmds), 2, cmds)
        self.assertEqual([shlex.split(c)[0] for c in cmds], ["scripts/demo.sh", "scripts/test.sh"])
        for c in cmds:
            script = os.path.join(SOURCE_DIR, shlex.split(c)[0])
            with self.subTest(command=c):
                self.assertTrue(os.access(script, os.X_OK), f"{script} is not an executable file")
                r = subprocess.run(["bash", "-n", script], capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 0, r.stderr)

    def test_ci_runs_what_the_readme_says_and_every_setting_it_adds_is_read_by_those_scripts(self):
        ci = read(".ci/run")
        self.assertIn("scripts/readme-commands.sh", ci)
        exported = re.findall(r"^export (.*)$", ci, flags=re.M)
        self.assertEqual(len(exported), 1, exported)
        names = [kv.split("=")[0] for kv in exported[0].split()]
        self.assertTrue(names)
        scripts = {f: read(os.path.join("scripts", f)) for f in os.listdir(os.path.join(SOURCE_DIR, "scripts"))
                   if f.endswith(".sh")}
        for name in names:
            with self.subTest(variable=name):
                self.assertTrue(any(re.search(r"\$\{?" + name + r"\b", s) for s in scripts.values()),
                                f".ci/run sets {name}, which none of the scripts it runs reads")

    def test_the_demo_says_its_model_is_synthetic_beside_the_text_it_prints(self):
        demo = read("scripts/demo.sh")
        tail = demo[demo.index('step "8.'):]
        self.assertRegex(tail, r"synthetic")
        self.assertLess(tail.index("synthetic"), tail.index('eval "$CURL"'))


class NamedThings(unittest.TestCase):
    def test_every_script_and_repository_path_the_readme_names_exists(self):
        paths = set(re.findall(r"(?<![\w./-])((?:scripts|bench|docs|charts|crds|tests)/[\w./-]*\w)", README))
        paths |= set(re.findall(r"\]\(([^)#\s]+)", README)) - {p for p in paths if "://" in p}
        paths = {p for p in paths if "://" not in p}
        self.assertIn("scripts/demo.sh", paths)
        for p in sorted(paths):
            with self.subTest(path=p):
                self.assertTrue(os.path.exists(os.path.join(SOURCE_DIR, p)), f"README names {p}, which does not exist")
                if p.endswith(".sh"):
                    self.assertTrue(os.access(os.path.join(SOURCE_DIR, p), os.X_OK), f"{p} is not executable")

    def test_every_binary_subcommand_and_flag_in_the_readme_exists(self):
        seen = 0
        for program in BINARIES:
            if not os.path.exists(os.path.join(BIN_DIR, program)):
                self.fail(f"{program} not built in {BIN_DIR}")
            for argv in binary_commands(program):
                words = leading_words(argv)
                with self.subTest(command=" ".join(argv)):
                    found, text = subcommand_help(program, words)
                    if len(argv) > 1:   # a bare program name in prose names the binary only
                        self.assertEqual(found, words[:len(found)])
                        self.assertTrue(found, f"{program} {' '.join(words)}: no such subcommand")
                    for flag in [a.split("=")[0] for a in argv if a.startswith("--")]:
                        self.assertRegex(text, r"(^|[\s,])" + re.escape(flag) + r"\b",
                                         f"{program} {' '.join(found)} has no flag {flag}")
                    seen += 1
        self.assertGreaterEqual(seen, 5)

    def test_the_planner_example_runs_as_written(self):
        plans = [a for a in binary_commands("infergate-runtime") if a[1:2] == ["plan"]]
        self.assertTrue(plans)
        for argv in plans:
            with self.subTest(command=" ".join(argv)):
                r = subprocess.run([os.path.join(BIN_DIR, argv[0]), *argv[1:]], capture_output=True,
                                   text=True, timeout=60, cwd=SOURCE_DIR)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_the_helm_install_line_renders_with_the_chart(self):
        helm = chartlib.find_tool("helm", "INFERGATE_HELM")
        if helm is None:
            self.skipTest("helm not found: run scripts/install-deps.sh")
        lines = [a for a in code_commands(README) if a[:2] == ["helm", "install"]]
        self.assertEqual(len(lines), 1, lines)
        argv = lines[0]
        self.assertEqual(argv[2:4], ["infergate", "charts/infergate"])
        args = [a for a in argv[4:] if a not in ("--create-namespace", "--wait")]
        r = chartlib.helm(helm, "template", "infergate", CHART, *args, check=False)
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
