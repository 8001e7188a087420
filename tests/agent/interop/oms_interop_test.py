"""OMS interop with an independent implementation: sigstore-js (@sigstore/verify, @sigstore/sign,
@sigstore/mock) driven by oms.js, against the real infergate-agent binary.

- bundles the agent signs (sign --format oms) verify in @sigstore/verify, and their statement is exactly
  what oms.js's own OMS serializer computes for the same directory;
- bundles sigstore-js makes (key-signed by @sigstore/sign; keyless against a test Sigstore whose
  certificates come from @sigstore/mock's Fulcio CA and CT log, checked by @sigstore/verify first)
  verify in the agent;
- the same bundles, tampered in one way each, are refused with the reason that names the tampering.

Needs node and sigstore-js under .tools/sigstore-js (scripts/install-deps.sh installs both). Without
them the test exits 77 (CTest: skipped) with the reason, except under CI=true, where it fails.
"""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SKIP = 77
SOURCE_DIR = os.environ.get("INFERGATE_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", ".."))
AGENT = os.environ.get("INFERGATE_AGENT_BIN") or os.path.join(SOURCE_DIR, "build", "bin", "infergate-agent")
NODE_MODULES = os.environ.get("INFERGATE_SIGSTORE_JS") or os.path.join(SOURCE_DIR, ".tools", "sigstore-js",
                                                                       "node_modules")
OMS_JS = os.path.join(SOURCE_DIR, "tests", "agent", "interop", "oms.js")
IDENTITY = "publisher@example.com"
ISSUER = "https://accounts.example.com"

EXIT = {"Verified": 0, "SignatureInvalid": 12, "UntrustedKey": 13, "StatementInvalid": 14,
        "CertificateInvalid": 27, "IdentityMismatch": 28, "TransparencyLogInvalid": 29,
        "UnlistedFile": 31, "DigestMismatch": 33}


def require_tools():
    node = shutil.which("node")
    missing = []
    if node is None:
        missing.append("node")
    if not os.path.isdir(os.path.join(NODE_MODULES, "@sigstore", "verify")):
        missing.append(f"sigstore-js in {NODE_MODULES}")
    if not os.access(AGENT, os.X_OK):
        missing.append(AGENT)
    if missing:
        msg = f"needs {', '.join(missing)} (scripts/install-deps.sh installs them)"
        if os.environ.get("CI") == "true":
            sys.stderr.write(f"FAILED: {msg}; CI installs them, so this test must run there\n")
            sys.exit(1)
        sys.stderr.write(f"SKIPPED: {msg}\n")
        sys.exit(SKIP)
    return node


NODE = require_tools()


def js(*args):
    r = subprocess.run([NODE, OMS_JS, *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "NODE_PATH": NODE_MODULES})
    return r


def agent(*args):
    r = subprocess.run([AGENT, *args], capture_output=True, text=True, timeout=120)
    report = None
    if r.stdout.strip():
        try:
            report = json.loads(r.stdout.strip().splitlines()[-1])
        except ValueError:
            pass
    return r.returncode, report, r.stderr


def make_model(root):
    os.makedirs(os.path.join(root, "sub"))
    with open(os.path.join(root, "config.json"), "w") as f:
        f.write('{"torch_dtype": "bfloat16"}\n')
    with open(os.path.join(root, "weights.bin"), "wb") as f:
        f.write(bytes(range(256)) * 41)  # 10496 bytes: shards of 4096 end mid-file
    with open(os.path.join(root, "sub", "tokenizer.json"), "w") as f:
        f.write('{"model": {}}\n')


def edit_bundle(path, edit):
    with open(path) as f:
        b = json.load(f)
    edit(b)
    with open(path, "w") as f:
        json.dump(b, f)


def flip_b64(s, at=8):
    raw = bytearray(base64.b64decode(s))
    raw[at % len(raw)] ^= 1
    return base64.b64encode(bytes(raw)).decode()


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="oms-interop-")
        self.model = os.path.join(self.tmp, "model")
        make_model(self.model)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def key(self, kind):
        self.keys = getattr(self, "keys", 0) + 1
        prefix = os.path.join(self.tmp, f"{kind}-{self.keys}")
        code, _, err = agent("keygen", "--out", prefix, "--type", kind)
        self.assertEqual(code, 0, err)
        return prefix + ".key", prefix + ".pub.pem"

    def assertRefused(self, result, reason):
        code, report, err = result
        self.assertEqual((code, report and report.get("reason")), (EXIT[reason], reason), err)


class OurBundlesVerifyInSigstoreJs(Case):
    def test_key_signed_bundles_of_every_key_type_sigstore_js_reads_verify_there_and_match_its_serialization(self):
        # sigstore-js verifies ECDSA DSSE signatures with SHA-256 whatever the curve, so P-384 (which
        # the model signing format signs with SHA-384) is checked against the agent's verifier instead.
        for kind in ("ecdsa-p256", "ed25519"):
            for shards in ((), ("--shard-size", "4096")):
                with self.subTest(kind=kind, shards=bool(shards)):
                    priv, pub = self.key(kind)
                    code, _, err = agent("sign", self.model, "--key", priv, "--format", "oms", *shards)
                    self.assertEqual(code, 0, err)
                    r = js("verify-key", os.path.join(self.model, "model.sig"), pub, self.model)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertIn("verified", r.stdout)

    def test_sigstore_js_refuses_our_bundle_when_a_file_changed_after_signing(self):
        priv, pub = self.key("ecdsa-p256")
        self.assertEqual(agent("sign", self.model, "--key", priv, "--format", "oms")[0], 0)
        with open(os.path.join(self.model, "config.json"), "a") as f:
            f.write(" ")
        r = js("verify-key", os.path.join(self.model, "model.sig"), pub, self.model)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("subject", r.stderr)  # the subject digest over the resources differs first


class SigstoreJsBundlesVerifyInOurs(Case):
    def sign_js(self, priv, *extra):
        r = js("sign-key", self.model, priv, os.path.join(self.model, "model.sig"), *extra)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_key_signed_bundles_from_sigstore_sign_verify_for_every_curve_and_both_serializations(self):
        for kind in ("ecdsa-p256", "ecdsa-p384", "ed25519"):
            for shards in ((), ("--shard-size", "4096")):
                with self.subTest(kind=kind, shards=bool(shards)):
                    priv, pub = self.key(kind)
                    self.sign_js(priv, *shards)
                    code, report, err = agent("verify", self.model, "--format", "oms", "--public-key", pub,
                                              "--expect-weight-format", "bf16")
                    self.assertEqual(code, 0, err)
                    self.assertEqual(report["format"], "oms")
                    self.assertEqual(report["files"], 3)

    def test_a_key_bundle_is_refused_when_a_file_changed_was_added_or_another_key_is_trusted(self):
        priv, pub = self.key("ecdsa-p256")
        _, other = self.key("ed25519")
        self.sign_js(priv)
        self.assertRefused(agent("verify", self.model, "--format", "oms", "--public-key", other), "UntrustedKey")
        with open(os.path.join(self.model, "extra.bin"), "w") as f:
            f.write("injected")
        self.assertRefused(agent("verify", self.model, "--format", "oms", "--public-key", pub), "UnlistedFile")
        os.unlink(os.path.join(self.model, "extra.bin"))
        with open(os.path.join(self.model, "weights.bin"), "r+b") as f:
            f.seek(5000)
            f.write(b"\x00")
        self.assertRefused(agent("verify", self.model, "--format", "oms", "--public-key", pub), "DigestMismatch")

    def test_a_key_bundle_whose_signature_or_payload_was_altered_is_refused(self):
        priv, pub = self.key("ecdsa-p256")
        self.sign_js(priv)
        sig = os.path.join(self.model, "model.sig")
        original = open(sig).read()
        edit_bundle(sig, lambda b: b["dsseEnvelope"]["signatures"][0].update(
            sig=flip_b64(b["dsseEnvelope"]["signatures"][0]["sig"], 20)))
        self.assertRefused(agent("verify", self.model, "--format", "oms", "--public-key", pub), "SignatureInvalid")
        open(sig, "w").write(original)

        def other_payload(b):
            st = json.loads(base64.b64decode(b["dsseEnvelope"]["payload"]))
            st["predicate"]["resources"].pop()
            b["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(st).encode()).decode()
        edit_bundle(sig, other_payload)
        self.assertRefused(agent("verify", self.model, "--format", "oms", "--public-key", pub), "SignatureInvalid")


class SigstoreJsKeylessBundlesVerifyInOurs(Case):
    def keyless(self, *extra):
        out = os.path.join(self.tmp, "keyless")
        r = js("keyless", self.model, out, "--identity", IDENTITY, "--issuer", ISSUER, *extra)
        self.assertEqual(r.returncode, 0, r.stderr)  # @sigstore/verify accepted it first
        shutil.copy(os.path.join(out, "model.sig"), self.model)
        return os.path.join(out, "trusted_root.json")

    def verify(self, root, identity=IDENTITY, issuer=ISSUER):
        return agent("verify", self.model, "--format", "oms", "--trusted-root", root, "--identity", identity,
                     "--issuer", issuer)

    def test_keyless_bundles_verify_offline_with_dsse_entries_in_trees_of_many_sizes(self):
        for leaves, index in ((1, 0), (7, 3), (33, 32)):
            with self.subTest(leaves=leaves, index=index):
                root = self.keyless("--leaves", str(leaves), "--index", str(index))
                code, report, err = self.verify(root)
                self.assertEqual(code, 0, err)
                self.assertEqual(report["signer"], f"keyless {IDENTITY} ({ISSUER})")
                self.assertIn("createdAt", report)

    def test_keyless_bundles_made_entirely_by_sigstore_sign_with_intoto_entries_verify(self):
        for shards in ((), ("--shard-size", "4096")):
            with self.subTest(shards=bool(shards)):
                root = self.keyless("--entry", "intoto", *shards)
                code, _, err = self.verify(root)
                self.assertEqual(code, 0, err)

    def test_a_keyless_bundle_is_refused_for_another_identity_or_issuer(self):
        root = self.keyless()
        self.assertRefused(self.verify(root, identity="mallory@example.com"), "IdentityMismatch")
        self.assertRefused(self.verify(root, issuer="https://other.example.com"), "IdentityMismatch")

    def test_a_keyless_bundle_is_refused_under_another_sigstores_trusted_root(self):
        root = self.keyless()
        other = os.path.join(self.tmp, "other")
        self.assertEqual(js("keyless", self.model, other, "--identity", IDENTITY, "--issuer", ISSUER).returncode, 0)
        shutil.copy(os.path.join(self.tmp, "keyless", "model.sig"), self.model)  # the first bundle again
        self.assertRefused(self.verify(os.path.join(other, "trusted_root.json")), "TransparencyLogInvalid")
        # Another CA, the same log: the certificate no longer chains.
        with open(root) as f:
            mine = json.load(f)
        with open(os.path.join(other, "trusted_root.json")) as f:
            mine["certificateAuthorities"] = json.load(f)["certificateAuthorities"]
        mixed = os.path.join(self.tmp, "mixed.json")
        with open(mixed, "w") as f:
            json.dump(mine, f)
        self.assertRefused(self.verify(mixed), "CertificateInvalid")

    def test_a_keyless_bundle_with_any_log_proof_altered_is_refused(self):
        root = self.keyless("--leaves", "9", "--index", "4")
        sig = os.path.join(self.model, "model.sig")
        original = open(sig).read()

        def entry(b):
            return b["verificationMaterial"]["tlogEntries"][0]
        edits = {
            "set": lambda b: entry(b)["inclusionPromise"].update(
                signedEntryTimestamp=flip_b64(entry(b)["inclusionPromise"]["signedEntryTimestamp"], 12)),
            "time": lambda b: entry(b).update(integratedTime=str(int(entry(b)["integratedTime"]) + 1)),
            "proof": lambda b: entry(b)["inclusionProof"]["hashes"].__setitem__(
                0, flip_b64(entry(b)["inclusionProof"]["hashes"][0])),
            "root": lambda b: entry(b)["inclusionProof"].update(
                rootHash=flip_b64(entry(b)["inclusionProof"]["rootHash"])),
            "checkpoint": lambda b: entry(b)["inclusionProof"]["checkpoint"].update(
                envelope=entry(b)["inclusionProof"]["checkpoint"]["envelope"].replace("\n9\n", "\n10\n")),
            "no entry": lambda b: b["verificationMaterial"].update(tlogEntries=[]),
        }
        for name, edit in edits.items():
            with self.subTest(edit=name):
                open(sig, "w").write(original)
                edit_bundle(sig, edit)
                self.assertRefused(self.verify(root), "TransparencyLogInvalid")
        open(sig, "w").write(original)
        edit_bundle(sig, lambda b: b["dsseEnvelope"]["signatures"][0].update(
            sig=flip_b64(b["dsseEnvelope"]["signatures"][0]["sig"], 20)))
        self.assertRefused(self.verify(root), "SignatureInvalid")


if __name__ == "__main__":
    unittest.main(verbosity=2)
