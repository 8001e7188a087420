#!/usr/bin/python3
"""The Helm chart renders, lints and holds to the project's rules.

helm lint and helm template run over the default values and several variants; the rendered objects are
then checked as parsed YAML: the kinds present, security contexts fit for the "restricted" Pod Security
Standard, RBAC with every verb listed and nothing broader than the operator needs, image references that
agree with the operator's built-in defaults, and a values schema that refuses bad values.
"""
import os
import re
import tempfile
import unittest

import yaml

import chartlib
from chartlib import CHART, NAMESPACE, SOURCE_DIR, by_kind, one, render

HELM = chartlib.require_tool("helm", "INFERGATE_HELM", "run scripts/install-deps.sh")

DIGEST = "sha256:" + "0123456789abcdef" * 4

# Values files CI renders besides the defaults; each must lint and pass every rule below.
VARIANTS = {
    "default": {},
    "ha": {"replicaCount": 3},
    "no-leader": {"leaderElection": {"enabled": False}},
    "one-namespace": {"watchNamespaces": ["models"]},
    "namespaces": {"watchNamespaces": ["models", "team-b"], "rbac": {"trustSecretNames": ["model-signing-key"]}},
    "monitoring": {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
                   "podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "custom-images": {
        "image": {"repository": "registry.example.com:5000/infergate/operator", "tag": "1.2.3"},
        "images": {"agent": {"repository": "registry.example.com/ig/agent", "digest": DIGEST},
                   "runtime": {"repository": "registry.example.com/ig/runtime", "tag": "1.2.3"},
                   "runtimeCuda": {"repository": "registry.example.com/ig/runtime-cuda", "tag": "1.2.3-cuda"}},
        "imagePullSecrets": [{"name": "regcred"}]},
    "pdb-min-available": {"replicaCount": 2,
                          "podDisruptionBudget": {"minAvailable": 1, "maxUnavailable": None}},
    "trust-namespaces": {"rbac": {"trustSecretNamespaces": ["models", "team-b"],
                                  "trustSecretNames": ["model-signing-key"]}},
    "no-pdb-no-metrics-service": {"podDisruptionBudget": {"enabled": False},
                                  "metrics": {"service": {"enabled": False}}},
    "metrics-cert-and-readers": {
        "metrics": {"certSecret": "operator-metrics-tls",
                    "readers": [{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}]},
        "serviceMonitor": {"enabled": True}},
    "plain-metrics": {"metrics": {"secure": False, "port": 8080, "service": {"port": 8080}},
                      "serviceMonitor": {"enabled": True}},
}

# The ClusterRole that says who may scrape /metrics; bound to readers, never to the operator.
METRICS_READER_SUFFIX = "-metrics-reader"

# The "restricted" Pod Security Standard allows only these volume types.
RESTRICTED_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                           "persistentVolumeClaim", "projected", "secret"}

# What the operator does beyond docs/operator.md's table, which describes the steady state only:
# the staged rollout (issue 8) creates and deletes the quality gate's eval Jobs, and ownerReferences
# with blockOwnerDeletion need update on the owner's finalizers where that admission plugin runs.
ROLLOUT_PERMISSIONS = {("batch", "jobs", "create"), ("batch", "jobs", "delete"),
                       ("serving.infergate.dev", "inferencemodels/finalizers", "update")}


_RENDERED = {}


def rendered(name):
    """The variant's rendered objects, rendered once per run (a fresh copy each call)."""
    if name not in _RENDERED:
        _RENDERED[name] = yaml.safe_dump_all(render(HELM, VARIANTS[name]))
    return [d for d in yaml.safe_load_all(_RENDERED[name]) if d]


def args_of(deployment):
    return deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def flag(args, name):
    """The value of --name=value in args, True for a bare --name, None when absent."""
    for a in args:
        if a == name:
            return True
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


def permission_table_from_docs():
    """(group, resource, verb) triples from docs/operator.md's "Permissions the operator needs" table."""
    with open(os.path.join(SOURCE_DIR, "docs", "operator.md")) as f:
        text = f.read()
    section = text.split("## Permissions the operator needs", 1)[1].split("\n## ", 1)[0]
    triples = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or "`" not in cells[0]:
            continue
        verbs = [v.strip() for v in cells[1].split(",")]
        for res in re.findall(r"`([^`]+)`", cells[0]):
            if res.startswith("inferencemodels/"):
                group, resource = "serving.infergate.dev", res
            elif "." in res.split("/")[0]:
                resource, group = res.split(".", 1)
            else:
                group, resource = "", res
            for v in verbs:
                triples.add((group, resource, v))
    if not triples:
        raise AssertionError("docs/operator.md has no permission table to check the chart against")
    return triples


def granted(objs, kinds=("ClusterRole", "Role")):
    """(group, resource, verb, namespace-or-None, kind) for every rule of the given kinds."""
    out = set()
    for o in objs:
        if o["kind"] not in kinds:
            continue
        ns = o["metadata"].get("namespace")
        for rule in o.get("rules", []):
            for g in rule.get("apiGroups", []):
                for r in rule.get("resources", []):
                    for v in rule.get("verbs", []):
                        out.add((g, r, v, ns, o["kind"]))
    return out


class ChartLints(unittest.TestCase):
    def test_helm_lint_strict_passes_with_default_and_every_variant(self):
        for name, values in VARIANTS.items():
            with self.subTest(variant=name), tempfile.TemporaryDirectory() as tmp:
                vf = os.path.join(tmp, "v.yaml")
                with open(vf, "w") as f:
                    yaml.safe_dump(values, f)
                r = chartlib.helm(HELM, "lint", "--strict", CHART, "--values", vf, check=False)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class ChartRenders(unittest.TestCase):
    def test_default_values_render_the_operator_its_identity_rbac_metrics_and_pdb(self):
        kinds = sorted({o["kind"] for o in rendered("default")})
        self.assertEqual(kinds, ["ClusterRole", "ClusterRoleBinding", "Deployment", "NetworkPolicy",
                                 "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"])

    def test_the_crd_is_installed_from_the_chart(self):
        crds = by_kind(render(HELM, {}, include_crds=True), "CustomResourceDefinition")
        self.assertEqual([c["metadata"]["name"] for c in crds], ["inferencemodels.serving.infergate.dev"])

    def test_every_object_is_labelled_for_the_release(self):
        for name in VARIANTS:
            for o in rendered(name):
                labels = o["metadata"].get("labels", {})
                with self.subTest(variant=name, kind=o["kind"], name=o["metadata"]["name"]):
                    self.assertEqual(labels.get("app.kubernetes.io/instance"), "t")
                    self.assertEqual(labels.get("app.kubernetes.io/part-of"), "infergate")

    def test_monitoring_objects_appear_only_when_asked_for(self):
        self.assertFalse(by_kind(rendered("default"), "ServiceMonitor"))
        self.assertFalse(by_kind(rendered("default"), "PrometheusRule"))
        objs = rendered("monitoring")
        sm = one(objs, "ServiceMonitor")
        svc = one(objs, "Service")
        self.assertEqual(sm["metadata"]["labels"]["release"], "kube-prometheus-stack")
        for k, v in sm["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(svc["metadata"]["labels"].get(k), v, f"ServiceMonitor selects {k}={v}")
        self.assertEqual(sm["spec"]["namespaceSelector"]["matchNames"], [NAMESPACE])
        self.assertEqual(sm["spec"]["endpoints"][0]["port"], svc["spec"]["ports"][0]["name"])

    def test_pod_monitor_scrapes_serving_pods_with_model_and_track_labels(self):
        self.assertFalse(by_kind(rendered("default"), "PodMonitor"))
        pm = one(rendered("monitoring"), "PodMonitor")
        self.assertEqual(pm["spec"]["namespaceSelector"], {"any": True})
        keys = {e["key"]: e for e in pm["spec"]["selector"]["matchExpressions"]}
        self.assertEqual(keys["serving.infergate.dev/track"]["values"], ["stable", "canary"])
        ep = pm["spec"]["podMetricsEndpoints"][0]
        self.assertEqual((ep["port"], ep["path"]), ("http", "/metrics"))
        self.assertEqual({r["targetLabel"] for r in ep["relabelings"]}, {"model", "track"})
        scoped = one(render(HELM, {"watchNamespaces": ["models"], "podMonitor": {"enabled": True}}), "PodMonitor")
        self.assertEqual(scoped["spec"]["namespaceSelector"], {"matchNames": ["models"]})

    def test_prometheus_rule_carries_the_alerts_file_verbatim(self):
        rule = one(rendered("monitoring"), "PrometheusRule")
        with open(os.path.join(CHART, "files", "alerts.yaml")) as f:
            expected = yaml.safe_load(f)["groups"]
        self.assertEqual(rule["spec"]["groups"], expected)
        exprs = [r["annotations"]["summary"] for g in expected for r in g["rules"]]
        self.assertTrue(any("{{ $labels." in e for e in exprs), "alert templates must survive Helm untouched")

    def test_metrics_service_reaches_the_metrics_port_of_the_operator_pods(self):
        objs = rendered("default")
        svc, dep = one(objs, "Service"), one(objs, "Deployment")
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        for k, v in svc["spec"]["selector"].items():
            self.assertEqual(pod_labels.get(k), v)
        container = dep["spec"]["template"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        self.assertIn(svc["spec"]["ports"][0]["targetPort"], ports)
        self.assertEqual(flag(container["args"], "--metrics-bind-address"), f":{ports['metrics']}")

    def test_probes_use_the_health_port_the_operator_binds(self):
        dep = one(rendered("default"), "Deployment")
        c = dep["spec"]["template"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.assertEqual(flag(c["args"], "--health-probe-bind-address"), f":{ports['health']}")
        self.assertEqual(c["livenessProbe"]["httpGet"], {"path": "/healthz", "port": "health"})
        self.assertEqual(c["readinessProbe"]["httpGet"], {"path": "/readyz", "port": "health"})

    def test_pdb_selects_the_operator_pods_with_one_budget(self):
        for name in ("default", "pdb-min-available"):
            objs = rendered(name)
            pdb, dep = one(objs, "PodDisruptionBudget"), one(objs, "Deployment")
            with self.subTest(variant=name):
                self.assertEqual(pdb["spec"]["selector"]["matchLabels"], dep["spec"]["selector"]["matchLabels"])
                self.assertEqual(len({"minAvailable", "maxUnavailable"} & set(pdb["spec"])), 1)
        self.assertEqual(one(rendered("pdb-min-available"), "PodDisruptionBudget")["spec"]["minAvailable"], 1)
        self.assertFalse(by_kind(rendered("no-pdb-no-metrics-service"), "PodDisruptionBudget"))
        self.assertFalse(by_kind(rendered("no-pdb-no-metrics-service"), "Service"))

    def test_service_monitor_without_the_metrics_service_is_refused(self):
        with self.assertRaises(chartlib.RenderError) as ctx:
            render(HELM, {"serviceMonitor": {"enabled": True}, "metrics": {"service": {"enabled": False}}})
        self.assertIn("metrics.service.enabled", ctx.exception.stderr)


class SecureMetrics(unittest.TestCase):
    def cluster_role(self, objs, suffix):
        found = [o for o in by_kind(objs, "ClusterRole") if o["metadata"]["name"].endswith(suffix)]
        return found[0] if found else None

    def test_by_default_metrics_are_https_for_tokens_a_subject_access_review_allows(self):
        objs = rendered("default")
        args = args_of(one(objs, "Deployment"))
        self.assertEqual(flag(args, "--metrics-secure"), "true")
        self.assertIsNone(flag(args, "--metrics-cert-dir"), "no certSecret: a self-signed certificate")
        auth = self.cluster_role(objs, "-metrics-auth")
        self.assertEqual(auth["rules"], [
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}])
        sa = one(objs, "ServiceAccount")["metadata"]["name"]
        bound = [b for b in by_kind(objs, "ClusterRoleBinding") if b["roleRef"]["name"] == auth["metadata"]["name"]]
        self.assertEqual(len(bound), 1)
        self.assertEqual(bound[0]["subjects"], [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}])
        reader = self.cluster_role(objs, METRICS_READER_SUFFIX)
        self.assertEqual(reader["rules"], [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
        self.assertFalse([b for b in by_kind(objs, "ClusterRoleBinding")
                          if b["roleRef"]["name"] == reader["metadata"]["name"]],
                         "nobody reads metrics until a scraper is bound")

    def test_the_service_monitor_presents_a_token_over_https(self):
        ep = one(rendered("monitoring"), "ServiceMonitor")["spec"]["endpoints"][0]
        self.assertEqual(ep["scheme"], "https")
        self.assertEqual(ep["bearerTokenFile"], "/var/run/secrets/kubernetes.io/serviceaccount/token")
        self.assertEqual(ep["tlsConfig"], {"insecureSkipVerify": True}, "self-signed: nothing to verify it with")
        custom = one(render(HELM, {"serviceMonitor": {"enabled": True, "tlsConfig": {"serverName": "x"}}}),
                     "ServiceMonitor")
        self.assertEqual(custom["spec"]["endpoints"][0]["tlsConfig"], {"serverName": "x"})

    def test_a_cert_secret_is_mounted_served_and_verified_by_the_service_monitor(self):
        objs = rendered("metrics-cert-and-readers")
        dep = one(objs, "Deployment")
        pod = dep["spec"]["template"]["spec"]
        self.assertEqual(flag(args_of(dep), "--metrics-cert-dir"), "/etc/infergate/metrics-cert")
        vol = [v for v in pod["volumes"] if v["name"] == "metrics-cert"][0]
        self.assertEqual(vol["secret"]["secretName"], "operator-metrics-tls")
        self.assertEqual({i["key"] for i in vol["secret"]["items"]}, {"tls.crt", "tls.key"})
        mount = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "metrics-cert"][0]
        self.assertEqual((mount["mountPath"], mount["readOnly"]), ("/etc/infergate/metrics-cert", True))
        svc = one(objs, "Service")
        tls = one(objs, "ServiceMonitor")["spec"]["endpoints"][0]["tlsConfig"]
        self.assertEqual(tls["serverName"], f"{svc['metadata']['name']}.{NAMESPACE}.svc")
        self.assertEqual(tls["ca"], {"secret": {"name": "operator-metrics-tls", "key": "ca.crt"}})

    def test_readers_are_bound_to_the_metrics_reader_role_and_to_nothing_else(self):
        objs = rendered("metrics-cert-and-readers")
        reader = self.cluster_role(objs, METRICS_READER_SUFFIX)["metadata"]["name"]
        readers = [{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}]
        for b in by_kind(objs, "ClusterRoleBinding") + by_kind(objs, "RoleBinding"):
            with self.subTest(binding=b["metadata"]["name"]):
                if b["subjects"] == readers:
                    self.assertEqual(b["roleRef"], {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                    "name": reader})
                else:
                    self.assertNotEqual(b["roleRef"]["name"], reader)

    def test_plain_metrics_for_local_use_drop_tls_and_the_review_permissions(self):
        objs = rendered("plain-metrics")
        self.assertEqual(flag(args_of(one(objs, "Deployment")), "--metrics-secure"), "false")
        self.assertIsNone(self.cluster_role(objs, "-metrics-auth"))
        self.assertIsNone(self.cluster_role(objs, METRICS_READER_SUFFIX))
        self.assertFalse([g for g in granted(objs) if g[1] in ("tokenreviews", "subjectaccessreviews")])
        ep = one(objs, "ServiceMonitor")["spec"]["endpoints"][0]
        self.assertNotIn("scheme", ep)
        self.assertNotIn("bearerTokenFile", ep)


class LeaderElection(unittest.TestCase):
    def test_leader_election_is_on_by_default_so_the_operator_rolls_without_two_acting(self):
        objs = rendered("default")
        dep = one(objs, "Deployment")
        args = args_of(dep)
        self.assertIs(flag(args, "--leader-elect"), True)
        self.assertEqual(dep["spec"]["strategy"]["type"], "RollingUpdate")
        self.assertEqual(dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0)
        self.assertEqual(flag(args, "--leader-elect-lease-duration"), "15s")

    def test_without_leader_election_one_replica_is_recreated_never_two_at_once(self):
        objs = rendered("no-leader")
        dep = one(objs, "Deployment")
        self.assertIsNone(flag(args_of(dep), "--leader-elect"))
        self.assertEqual(dep["spec"]["strategy"]["type"], "Recreate")
        self.assertFalse([g for g in granted(objs) if g[1] == "leases"])

    def test_replicas_above_one_turn_leader_election_on_with_the_lease_in_the_release_namespace(self):
        objs = render(HELM, {"replicaCount": 3, "leaderElection": {"enabled": False}})
        dep = one(objs, "Deployment")
        args = args_of(dep)
        self.assertEqual(dep["spec"]["replicas"], 3)
        self.assertIs(flag(args, "--leader-elect"), True)
        self.assertEqual(flag(args, "--leader-elect-namespace"), NAMESPACE)
        self.assertEqual(flag(args, "--leader-elect-id"), "infergate-operator-leader")
        self.assertEqual(flag(args, "--identity"), "$(POD_NAME)")
        self.assertEqual(dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0)
        leases = {(g[2], g[3], g[4]) for g in granted(objs) if g[1] == "leases"}
        self.assertEqual(leases, {(v, NAMESPACE, "Role") for v in ("get", "create", "update")})

    def test_lease_timings_the_operator_would_refuse_fail_helm_template(self):
        for values, needle in (({"renewDeadline": "15s"}, "leaseDuration (15s) must be longer"),
                               ({"retryPeriod": "10s"}, "renewDeadline (10s) must be longer"),
                               ({"retryPeriod": "2h"}, "leaderElection.retryPeriod")):
            with self.subTest(values=values):
                with self.assertRaises(chartlib.RenderError) as ctx:
                    render(HELM, {"leaderElection": values})
                self.assertIn(needle, ctx.exception.stderr)
        render(HELM, {"leaderElection": {"leaseDuration": "1m", "renewDeadline": "40s", "retryPeriod": "500ms"}})


class NetworkPolicy(unittest.TestCase):
    def test_metrics_are_reachable_only_from_the_peers_given_and_probes_from_anywhere(self):
        objs = rendered("default")
        policy, dep = one(objs, "NetworkPolicy"), one(objs, "Deployment")
        self.assertEqual(policy["spec"]["podSelector"]["matchLabels"], dep["spec"]["selector"]["matchLabels"])
        self.assertEqual(policy["spec"]["policyTypes"], ["Ingress"])
        rules = {tuple(p["port"] for p in r["ports"]): r.get("from") for r in policy["spec"]["ingress"]}
        self.assertEqual(set(rules), {("health",), ("metrics",)})
        self.assertIsNone(rules[("health",)])
        self.assertEqual(rules[("metrics",)][0]["podSelector"]["matchLabels"],
                         {"app.kubernetes.io/name": "prometheus"})
        ports = {p["name"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}
        self.assertEqual(ports, {"health", "metrics"})
        self.assertFalse(by_kind(render(HELM, {"networkPolicy": {"enabled": False}}), "NetworkPolicy"))


class PodSecurity(unittest.TestCase):
    def check_pod(self, spec, where):
        sc = spec.get("securityContext", {})
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            self.assertFalse(spec.get(key, False), f"{where}: {key}")
        for v in spec.get("volumes", []):
            kinds = set(v) - {"name"}
            self.assertLessEqual(kinds, RESTRICTED_VOLUME_TYPES, f"{where}: volume {v['name']}")
        containers = spec.get("initContainers", []) + spec["containers"]
        self.assertTrue(containers)
        for c in containers:
            csc = c.get("securityContext", {})
            here = f"{where} container {c['name']}"
            run_as_non_root = csc.get("runAsNonRoot", sc.get("runAsNonRoot"))
            self.assertIs(run_as_non_root, True, f"{here}: runAsNonRoot")
            self.assertNotEqual(csc.get("runAsUser", sc.get("runAsUser")), 0, f"{here}: runAsUser 0")
            self.assertIs(csc.get("allowPrivilegeEscalation"), False, f"{here}: allowPrivilegeEscalation")
            self.assertFalse(csc.get("privileged", False), f"{here}: privileged")
            self.assertEqual(csc.get("capabilities", {}).get("drop"), ["ALL"], f"{here}: drop ALL")
            self.assertFalse(csc.get("capabilities", {}).get("add"), f"{here}: capabilities added")
            seccomp = csc.get("seccompProfile", sc.get("seccompProfile", {})).get("type")
            self.assertEqual(seccomp, "RuntimeDefault", f"{here}: seccomp")
            self.assertIs(csc.get("readOnlyRootFilesystem"), True, f"{here}: readOnlyRootFilesystem")
            for p in c.get("ports", []):
                self.assertNotIn("hostPort", p, f"{here}: hostPort")

    def test_every_pod_fits_the_restricted_pod_security_standard_in_every_variant(self):
        for name in VARIANTS:
            for dep in by_kind(rendered(name), "Deployment"):
                with self.subTest(variant=name):
                    self.check_pod(dep["spec"]["template"]["spec"], f"{name}: {dep['metadata']['name']}")

    def test_only_the_operator_pod_mounts_a_service_account_token(self):
        objs = rendered("default")
        self.assertIs(one(objs, "ServiceAccount")["automountServiceAccountToken"], False)
        self.assertIs(one(objs, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"], True)


class Rbac(unittest.TestCase):
    def test_every_verb_resource_and_group_is_listed_never_a_wildcard(self):
        for name in VARIANTS:
            for g, r, v, ns, kind in granted(rendered(name)):
                with self.subTest(variant=name, rule=(g, r, v, kind)):
                    self.assertNotIn("*", (g, r, v))
            for o in rendered(name):
                for rule in o.get("rules", []):
                    if o["metadata"]["name"].endswith(METRICS_READER_SUFFIX):
                        self.assertEqual(rule, {"nonResourceURLs": ["/metrics"], "verbs": ["get"]})
                    else:
                        self.assertNotIn("nonResourceURLs", rule)

    def test_no_exec_attach_port_forward_escalate_bind_or_impersonate(self):
        forbidden_resources = {"pods/exec", "pods/attach", "pods/portforward", "pods/proxy", "services/proxy",
                               "nodes/proxy", "serviceaccounts/token"}
        forbidden_verbs = {"escalate", "bind", "impersonate"}
        for name in VARIANTS:
            for g, r, v, ns, kind in granted(rendered(name)):
                with self.subTest(variant=name, rule=(g, r, v)):
                    self.assertNotIn(r, forbidden_resources)
                    self.assertNotIn(v, forbidden_verbs)
                    self.assertFalse(g == "rbac.authorization.k8s.io", "no RBAC over RBAC")

    def test_secrets_are_never_readable_cluster_wide_and_only_with_get(self):
        for name in VARIANTS:
            objs = rendered(name)
            secrets = [x for x in granted(objs) if x[1] == "secrets"]
            with self.subTest(variant=name):
                self.assertTrue(secrets, "the operator must be able to check the trust Secret")
                for g, r, v, ns, kind in secrets:
                    self.assertEqual((kind, v), ("Role", "get"))
                    self.assertIsNotNone(ns)

    def test_trust_secret_roles_follow_the_namespaces_and_names_given(self):
        objs = rendered("trust-namespaces")
        roles = [o for o in by_kind(objs, "Role") if any("secrets" in r["resources"] for r in o["rules"])]
        self.assertEqual(sorted(r["metadata"]["namespace"] for r in roles), ["models", "team-b"])
        for role in roles:
            self.assertEqual(role["rules"][0]["resourceNames"], ["model-signing-key"])
        bindings = {b["metadata"]["namespace"]: b for b in by_kind(objs, "RoleBinding")}
        for ns in ("models", "team-b"):
            self.assertEqual(bindings[ns]["subjects"][0]["namespace"], NAMESPACE)
        # Default: the release namespace, or the watched namespace when there is one.
        ns_of = lambda objs: sorted(o["metadata"]["namespace"] for o in by_kind(objs, "Role")
                                    if any("secrets" in r["resources"] for r in o["rules"]))
        self.assertEqual(ns_of(rendered("default")), [NAMESPACE])
        self.assertEqual(ns_of(rendered("one-namespace")), ["models"])
        self.assertEqual(ns_of(rendered("namespaces")), ["models", "team-b"])

    def test_watching_namespaces_grants_a_role_in_each_and_cluster_wide_only_the_crd_read(self):
        for name, namespaces in (("one-namespace", ["models"]), ("namespaces", ["models", "team-b"])):
            objs = rendered(name)
            with self.subTest(variant=name):
                self.assertEqual(flag(args_of(one(objs, "Deployment")), "--namespace"), ",".join(namespaces))
                cluster = {(g, r, v) for g, r, v, ns, kind in granted(objs, kinds=("ClusterRole",))}
                self.assertEqual(cluster, {("apiextensions.k8s.io", "customresourcedefinitions", "get"),
                                           ("authentication.k8s.io", "tokenreviews", "create"),
                                           ("authorization.k8s.io", "subjectaccessreviews", "create")})
                for ns in namespaces:
                    mine = {(g, r, v) for g, r, v, n, kind in granted(objs) if n == ns}
                    self.assertIn(("serving.infergate.dev", "inferencemodels", "watch"), mine)
                    self.assertIn(("apps", "deployments", "patch"), mine)
                    self.assertIn(("", "secrets", "get"), mine)

    def test_the_crd_is_readable_by_name_only(self):
        for name in VARIANTS:
            reader = [o for o in by_kind(rendered(name), "ClusterRole") if o["metadata"]["name"].endswith("-crd-reader")]
            with self.subTest(variant=name):
                self.assertEqual(len(reader), 1)
                self.assertEqual(reader[0]["rules"], [{"apiGroups": ["apiextensions.k8s.io"],
                                                       "resources": ["customresourcedefinitions"],
                                                       "resourceNames": ["inferencemodels.serving.infergate.dev"],
                                                       "verbs": ["get"]}])

    def test_bindings_name_the_operators_service_account_and_an_existing_role(self):
        for name in VARIANTS:
            objs = rendered(name)
            sa = one(objs, "ServiceAccount")["metadata"]["name"]
            roles = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
                     for o in by_kind(objs, "Role") + by_kind(objs, "ClusterRole")}
            for b in by_kind(objs, "RoleBinding") + by_kind(objs, "ClusterRoleBinding"):
                if b["metadata"]["name"].endswith(METRICS_READER_SUFFIX):
                    continue  # binds the scrapers metrics.readers names (SecureMetrics checks it)
                with self.subTest(variant=name, binding=b["metadata"]["name"]):
                    self.assertEqual(b["subjects"], [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}])
                    ref = b["roleRef"]
                    ns = b["metadata"].get("namespace") if ref["kind"] == "Role" else None
                    self.assertIn((ref["kind"], ref["name"], ns), roles)

    def test_permissions_are_exactly_what_the_operator_and_its_rollouts_use(self):
        needed = permission_table_from_docs() | ROLLOUT_PERMISSIONS
        # The lease and the Secret are namespaced Roles, checked above; compare the rest here.
        objs = rendered("ha")
        have = {(g, r, v) for g, r, v, ns, kind in granted(objs)}
        missing = needed - have
        extra = have - needed
        self.assertFalse(missing, f"the chart lacks permissions the operator uses: {sorted(missing)}")
        self.assertFalse(extra, f"the chart grants permissions nobody documented: {sorted(extra)}")


class Images(unittest.TestCase):
    def operator_defaults(self):
        """The image defaults compiled into the operator (operator/api/.../names.h, api::Images)."""
        path = os.path.join(SOURCE_DIR, "operator", "api", "include", "infergate", "operator", "api", "names.h")
        with open(path) as f:
            text = f.read()
        found = dict(re.findall(r'std::string\s+(agent|runtime|runtime_cuda)\s*=\s*"([^"]+)"', text))
        self.assertEqual(set(found), {"agent", "runtime", "runtime_cuda"}, f"image defaults not found in {path}")
        return found

    def test_default_images_are_the_operators_built_in_defaults(self):
        defaults = self.operator_defaults()
        args = args_of(one(rendered("default"), "Deployment"))
        self.assertEqual(flag(args, "--agent-image"), defaults["agent"])
        self.assertEqual(flag(args, "--runtime-image"), defaults["runtime"])
        self.assertEqual(flag(args, "--runtime-cuda-image"), defaults["runtime_cuda"])

    def test_every_default_image_carries_the_charts_app_version(self):
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            app_version = yaml.safe_load(f)["appVersion"]
        dep = one(rendered("default"), "Deployment")
        self.assertEqual(dep["spec"]["template"]["spec"]["containers"][0]["image"],
                         f"infergate/operator:{app_version}")
        for image in self.operator_defaults().values():
            self.assertTrue(image.endswith(":" + app_version), f"{image} is not tagged {app_version}")

    def test_custom_images_tags_digests_and_pull_secrets_reach_the_deployment(self):
        dep = one(rendered("custom-images"), "Deployment")
        pod = dep["spec"]["template"]["spec"]
        args = args_of(dep)
        self.assertEqual(pod["containers"][0]["image"], "registry.example.com:5000/infergate/operator:1.2.3")
        self.assertEqual(flag(args, "--agent-image"), f"registry.example.com/ig/agent@{DIGEST}")
        self.assertEqual(flag(args, "--runtime-image"), "registry.example.com/ig/runtime:1.2.3")
        self.assertEqual(flag(args, "--runtime-cuda-image"), "registry.example.com/ig/runtime-cuda:1.2.3-cuda")
        self.assertEqual(pod["imagePullSecrets"], [{"name": "regcred"}])


class ValuesSchema(unittest.TestCase):
    # (--set argument, text the error must contain): each must make helm template fail.
    BAD = [
        ("replicaCount=-1", "replicaCount"),
        ("replicaCount=two", "replicaCount"),
        ("workers=0", "workers"),
        ("workers=1000", "workers"),
        ("logLevel=verbose", "logLevel"),
        ("logFormat=xml", "logFormat"),
        ("image.repository=Infergate/Operator", "image.repository"),
        ("image.digest=sha256:1234", "image.digest"),
        ("images.agent.tag=bad tag", "images.agent.tag"),
        ("image.pullPolicy=Sometimes", "image.pullPolicy"),
        ("securityContext.runAsUser=0", "securityContext.runAsUser"),
        ("securityContext.privileged=true", "privileged"),
        ("leaderElection.leaseDuration=fifteen", "leaderElection.leaseDuration"),
        ("resyncPeriod=-5m", "resyncPeriod"),
        ("watchNamespaces[0]=Models_1", "watchNamespaces"),
        ("leaderElection.renewDeadline=20s", "must be longer than leaderElection.renewDeadline"),
        ("rbac.trustSecretNamespaces[0]=UPPER", "rbac.trustSecretNamespaces"),
        ("metrics.port=70000", "metrics.port"),
        ("metrics.secure=maybe", "metrics.secure"),
        ("metrics.readers[0].kind=Robot", "metrics.readers"),
        ("serviceMonitor.interval=often", "serviceMonitor.interval"),
        ("extraArgs[0]=--namespace=a;rm", None),  # accepted: a flag; the operator validates values
        ("unknownKey=1", "unknownKey"),
        ("podDisruptionBudget.minAvailable=1", "minAvailable and maxUnavailable"),
        ("serviceAccount.create=false", "serviceAccount.name is required"),
    ]

    def test_bad_values_fail_helm_template_naming_the_value(self):
        for set_arg, needle in self.BAD:
            with self.subTest(value=set_arg):
                r = chartlib.helm(HELM, "template", "t", CHART, "--set", set_arg, check=False)
                if needle is None:
                    self.assertEqual(r.returncode, 0, r.stderr)
                    continue
                self.assertNotEqual(r.returncode, 0, f"{set_arg} was accepted")
                self.assertIn(needle, r.stderr)

    def test_every_key_of_values_yaml_is_described_by_the_schema(self):
        import json
        with open(os.path.join(CHART, "values.yaml")) as f:
            values = yaml.safe_load(f)
        with open(os.path.join(CHART, "values.schema.json")) as f:
            schema = json.load(f)
        defs = schema.get("definitions", {})

        def resolve(s):
            while "$ref" in s:
                s = defs[s["$ref"].split("/")[-1]]
            return s

        def walk(v, s, path):
            s = resolve(s)
            if isinstance(v, dict) and "properties" in s:
                for k, sub in v.items():
                    self.assertIn(k, s["properties"], f"{path}{k} is not in values.schema.json")
                    walk(sub, s["properties"][k], f"{path}{k}.")

        walk(values, schema, "")


if __name__ == "__main__":
    chartlib.main()
