#!/usr/bin/python3
"""The Dockerfiles follow the image rules, and the images they build are the ones the chart deploys.

No Docker engine runs here, so the Dockerfiles are parsed, not built: multi-stage, a pinned base for every
stage, a slim final stage with no RUN, a numeric non-root USER equal to the uid the pods run as, no ADD of
URLs, an exec-form ENTRYPOINT naming the binary the build stage installs, and tags that agree with the
chart and the operator's defaults. scripts/image-rootfs.sh, which lays out the final stage, is run for real.
"""
import os
import re
import subprocess
import tempfile
import unittest

import yaml

import chartlib
from chartlib import CHART, SOURCE_DIR

# Dockerfile -> (binary, image repository the chart and the operator use)
IMAGES = {
    "operator/Dockerfile": ("infergate-operator", "infergate/operator"),
    "agent/Dockerfile": ("infergate-agent", "infergate/agent"),
    "runtime/Dockerfile": ("infergate-runtime", "infergate/runtime"),
    "runtime/Dockerfile.cuda": ("infergate-runtime", "infergate/runtime-cuda"),
}
ROOTFS = os.path.join(SOURCE_DIR, "scripts", "image-rootfs.sh")


def parse(path):
    """[(INSTRUCTION, argument text)] with continuation lines joined and comments dropped."""
    with open(os.path.join(SOURCE_DIR, path)) as f:
        text = f.read()
    out, buf = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not buf and (not s or s.startswith("#")):
            continue
        if s.startswith("#"):
            continue
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        buf += s
        instr, _, arg = buf.partition(" ")
        out.append((instr.upper(), arg.strip()))
        buf = ""
    return out


def stages(instrs):
    """[(from-argument, [instructions])] per stage, with global ARG defaults substituted in FROM."""
    args, result = {}, []
    for instr, arg in instrs:
        if instr == "ARG" and not result:
            k, _, v = arg.partition("=")
            args[k] = v
        elif instr == "FROM":
            image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), arg)
            result.append((image, []))
        elif result:
            result[-1][1].append((instr, arg))
    return result


class Dockerfiles(unittest.TestCase):
    def test_every_image_is_multi_stage_and_copies_only_the_build_output(self):
        for path in IMAGES:
            with self.subTest(dockerfile=path):
                st = stages(parse(path))
                self.assertGreaterEqual(len(st), 2, "multi-stage: build, then a slim final stage")
                final = st[-1][1]
                copies = [a for i, a in final if i == "COPY"]
                self.assertEqual(copies, ["--from=build /rootfs/ /"])
                self.assertFalse([a for i, a in final if i == "RUN"], "the final stage runs nothing (no shell)")

    def test_every_base_image_is_pinned_to_a_tag_or_digest(self):
        for path in IMAGES:
            for image, _ in stages(parse(path)):
                name = image.split(" AS ")[0].split(" as ")[0].strip()
                with self.subTest(dockerfile=path, image=name):
                    self.assertNotIn("${", name, "every base comes from an ARG with a default")
                    self.assertTrue("@sha256:" in name or re.search(r":[\w][\w.-]*$", name.split("/")[-1]),
                                    f"{name} has no tag")
                    self.assertFalse(name.endswith(":latest"))

    def test_build_stages_start_from_debian_12_and_the_project_dependency_script(self):
        for path in IMAGES:
            with self.subTest(dockerfile=path):
                st = stages(parse(path))
                build = [s for s in st if s[0].endswith(" AS build")]
                self.assertEqual(len(build), 1)
                self.assertTrue(build[0][0].startswith("debian:12 "))
                runs = " ".join(a for i, a in build[0][1] if i == "RUN")
                self.assertIn("./scripts/install-deps.sh", runs)
                self.assertIn("scripts/image-rootfs.sh", runs)

    def test_final_stages_run_on_slim_bases_and_the_cuda_image_on_nvidias_runtime(self):
        for path in IMAGES:
            base = stages(parse(path))[-1][0]
            with self.subTest(dockerfile=path, base=base):
                if path.endswith(".cuda"):
                    self.assertRegex(base, r"^nvidia/cuda:[0-9.]+-runtime-")
                else:
                    self.assertRegex(base, r"^gcr\.io/distroless/cc-debian12:nonroot$")

    def test_every_image_runs_as_the_numeric_non_root_user_the_pods_use(self):
        with open(os.path.join(SOURCE_DIR, "operator", "platform", "src", "kubernetes.cc")) as f:
            pod_uid = int(re.search(r"kNonRootUid\s*=\s*(\d+)", f.read()).group(1))
        with open(os.path.join(CHART, "values.yaml")) as f:
            chart_uid = yaml.safe_load(f)["securityContext"]["runAsUser"]
        self.assertEqual(pod_uid, chart_uid)
        for path in IMAGES:
            with self.subTest(dockerfile=path):
                users = [a for i, a in stages(parse(path))[-1][1] if i == "USER"]
                self.assertTrue(users, "no USER in the final stage: it would run as root")
                m = re.fullmatch(r"(\d+)(?::(\d+))?", users[-1])
                self.assertIsNotNone(m, f"USER {users[-1]} is not numeric (runAsNonRoot needs a number)")
                self.assertNotEqual(int(m.group(1)), 0)
                self.assertEqual(int(m.group(1)), pod_uid)

    def test_nothing_is_added_from_a_url(self):
        for path in IMAGES:
            for instr, arg in parse(path):
                with self.subTest(dockerfile=path, instruction=f"{instr} {arg}"):
                    self.assertNotEqual(instr, "ADD", "use COPY; ADD fetches URLs and unpacks archives")
                    self.assertNotRegex(arg, r"(curl|wget)[^|]*\|\s*(ba)?sh", "no piping downloads into a shell")

    def test_entrypoint_is_the_binary_the_build_stage_installs(self):
        for path, (binary, _) in IMAGES.items():
            with self.subTest(dockerfile=path):
                st = stages(parse(path))
                entry = [a for i, a in st[-1][1] if i == "ENTRYPOINT"]
                self.assertEqual(entry, [f'["/usr/local/bin/{binary}"]'])
                runs = " ".join(a for i, a in st[-2][1] if i == "RUN")
                self.assertIn(f"--target {binary}", runs)
                self.assertIn(f"/build/bin/{binary}", runs)
                env = " ".join(a for i, a in st[-1][1] if i == "ENV")
                self.assertIn("LD_LIBRARY_PATH=/usr/local/lib/infergate", env)

    def test_the_documented_build_command_tags_the_image_the_chart_deploys(self):
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            version = yaml.safe_load(f)["appVersion"]
        with open(os.path.join(CHART, "values.yaml")) as f:
            values = yaml.safe_load(f)
        chart_repos = {values["image"]["repository"]} | {v["repository"] for v in values["images"].values()}
        for path, (_, repo) in IMAGES.items():
            with self.subTest(dockerfile=path):
                self.assertIn(repo, chart_repos)
                with open(os.path.join(SOURCE_DIR, path)) as f:
                    text = f.read()
                self.assertIn(f"docker build -f {path} -t {repo}:{version} .", text)

    def test_the_build_context_leaves_out_build_trees_tools_and_git(self):
        with open(os.path.join(SOURCE_DIR, ".dockerignore")) as f:
            entries = {l.strip() for l in f if l.strip() and not l.startswith("#")}
        for needed in (".git", "build", "build-*", ".tools"):
            self.assertIn(needed, entries)
        for kept in ("scripts", "operator", "agent", "runtime", "common", "kernels", "CMakeLists.txt", "cmake"):
            self.assertNotIn(kept, entries, f"the build needs {kept}")


class ImageRootfs(unittest.TestCase):
    def run_rootfs(self, *args):
        return subprocess.run(["bash", ROOTFS, *args], capture_output=True, text=True, timeout=60)

    def test_it_copies_the_binary_and_its_libraries_but_not_the_bases_own(self):
        binary = "/usr/bin/openssl"  # links libssl and libcrypto besides glibc
        with tempfile.TemporaryDirectory() as out:
            r = self.run_rootfs(out, binary)
            self.assertEqual(r.returncode, 0, r.stderr)
            libs = set(os.listdir(os.path.join(out, "usr/local/lib/infergate")))
            self.assertIn("libssl.so.3", libs)
            self.assertIn("libcrypto.so.3", libs)
            self.assertFalse({l for l in libs if re.match(r"(libc|libm|ld-linux|libstdc\+\+)\b", l)}, libs)
            copied = os.path.join(out, "usr/local/bin/openssl")
            run = subprocess.run([copied, "version"], capture_output=True, text=True, timeout=30,
                                 env={"LD_LIBRARY_PATH": os.path.join(out, "usr/local/lib/infergate")})
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertTrue(run.stdout.startswith("OpenSSL"))

    def test_extra_exclusions_leave_libraries_to_the_base(self):
        with tempfile.TemporaryDirectory() as out:
            r = self.run_rootfs("--exclude", "^libssl\\.so", out, "/usr/bin/openssl")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("libssl.so.3", os.listdir(os.path.join(out, "usr/local/lib/infergate")))

    def test_a_missing_binary_or_an_unknown_option_is_refused_by_name(self):
        with tempfile.TemporaryDirectory() as out:
            r = self.run_rootfs(out, "/nonexistent/infergate-operator")
            self.assertEqual(r.returncode, 1)
            self.assertIn("/nonexistent/infergate-operator", r.stderr)
            r = self.run_rootfs("--strip-all", out, "/usr/bin/openssl")
            self.assertEqual(r.returncode, 2)
            self.assertIn("--strip-all", r.stderr)


if __name__ == "__main__":
    chartlib.main()
