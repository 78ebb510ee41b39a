"""deploy/k8s: validated by kubeconform in strict mode, offline, against the schemas
converted from the Kubernetes OpenAPI spec of the oldest and the newest supported
release (scripts/k8s_tools.sh installs both), and checked for what a schema cannot say:
probes, the drain bound, non-root, the dispatcher's egress, where secrets come from, and
that the resource requests are the benchmark's arithmetic.

No cluster is needed. A missing validator fails the test (run scripts/k8s_tools.sh); it
never turns into a skip."""

from __future__ import annotations

import inspect
import ipaddress
import json
import math
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, fields
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from hookstream.dispatcher.service import SHUTDOWN_ATTEMPT_GRACE_S, SHUTDOWN_WRITE_WAIT_S

from hookstream.core.settings import (
    ALL_SETTINGS,
    ApiSettings,
    CommonSettings,
    DispatcherSettings,
    FanoutSettings,
    RelaySettings,
    env_names,
    known_env_names,
)
from hookstream.dev.harness import STOP_TIMEOUT_S
from hookstream.io.kafka import CLOSE_WAIT_S, Publisher
from hookstream.io.kafka.config import producer_config
from hookstream.policy import urlsafety

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SERVICES = {"relay": RelaySettings, "fanout": FanoutSettings, "dispatcher": DispatcherSettings}
JOBS = ("migrate", "topics")
Doc = dict[str, Any]


# ---------------------------------------------------------------- loading
def resource_files() -> list[Path]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    return [K8S / name for name in kustomization["resources"]]


def load_docs() -> list[Doc]:
    return [doc for path in resource_files()
            for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


@pytest.fixture(scope="module")
def docs() -> list[Doc]:
    return load_docs()


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: list[Doc], kind: str, name: str) -> Doc:
    (doc,) = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    return doc


def workloads(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    """(Deployment or Job, its pod spec)."""
    for d in docs:
        if d["kind"] in {"Deployment", "Job"}:
            yield d, d["spec"]["template"]["spec"]


def pod_labels(workload: Doc) -> dict[str, str]:
    return dict(workload["spec"]["template"]["metadata"]["labels"])


def container_env(container: Doc) -> dict[str, Doc]:
    return {e["name"]: e for e in container.get("env", [])}


def config_data(docs: list[Doc]) -> dict[str, str]:
    return dict(named(docs, "ConfigMap", "hookstream-config")["data"])


def env_value(docs: list[Doc], container: Doc, name: str) -> str | None:
    """What the container's environment gives ``name``: its own env, else the ConfigMap."""
    own = container_env(container).get(name)
    if own is not None:
        return str(own["value"]) if "value" in own else None
    return config_data(docs).get(name)


def quantity_milli(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(Decimal(cpu) * 1000)


def quantity_mib(memory: str) -> int:
    match = re.fullmatch(r"(\d+)(Mi|Gi)", memory)
    assert match, f"memory quantity {memory!r}: write it in Mi or Gi"
    return int(match[1]) * (1024 if match[2] == "Gi" else 1)


# ---------------------------------------------------------------- the validator
@dataclass(frozen=True)
class Validator:
    kubeconform: Path
    schemas: Path
    versions: tuple[str, ...]

    def run(self, version: str, paths: list[Path]) -> tuple[int, dict[str, Any]]:
        # -strict: the schemas' additionalProperties: false (an unknown field is an error)
        # and duplicate keys refused. Only the local folder: nothing is downloaded.
        proc = subprocess.run(
            [str(self.kubeconform), "-strict", "-summary", "-output", "json",
             "-kubernetes-version", version.removeprefix("v"),
             "-schema-location", str(self.schemas), *map(str, paths)],
            capture_output=True, text=True, timeout=120, check=False)
        try:
            report = json.loads(proc.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"kubeconform printed no report (exit {proc.returncode}):\n"
                        f"{proc.stdout}{proc.stderr}")
        return proc.returncode, report


@pytest.fixture(scope="module")
def validator() -> Validator:
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "k8s_tools.sh"), "--print"],
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        pytest.fail(f"the manifest validator is not installed: {proc.stderr.strip()}")
    values = dict(line.split("=", 1) for line in proc.stdout.splitlines())
    return Validator(Path(values["kubeconform"]), Path(values["schemas"]),
                     tuple(values["versions"].split()))


def test_kubeconform_accepts_every_manifest(validator: Validator, docs: list[Doc]) -> None:
    assert len(validator.versions) >= 1
    for version in validator.versions:
        code, report = validator.run(version, resource_files())
        problems = [f"{r['filename']}: {r['kind']} {r['name']}: {r['msg']}"
                    for r in report["resources"]]
        assert code == 0 and not problems, f"Kubernetes {version}:\n" + "\n".join(problems)
        # Every object validated: none skipped for want of a schema.
        assert report["summary"] == {"valid": len(docs), "invalid": 0, "errors": 0,
                                     "skipped": 0}, version


# Each break is one a reviewer could miss: a field name off by a letter where Kubernetes
# would drop it silently (the probe, the grace period or the security setting would just
# not be there), a wrong type, a key written twice.
BREAKS = {
    "misspelt container field": ("relay.yaml", "          readinessProbe:",
                                 "          readinessProbes:", "readinessProbes"),
    "misspelt pod field": ("dispatcher.yaml", "      terminationGracePeriodSeconds: 60",
                           "      terminationGracePeriodSecond: 60",
                           "terminationGracePeriodSecond"),
    "misspelt securityContext field": ("fanout.yaml", "            readOnlyRootFilesystem: true",
                                       "            readOnlyRootFileSystem: true",
                                       "readOnlyRootFileSystem"),
    "misspelt NetworkPolicy field": ("networkpolicy-dispatcher.yaml", "            except:",
                                     "            excepts:", "excepts"),
    "wrong type": ("relay.yaml", "  replicas: 2", "  replicas: two", "replicas"),
    "duplicate key": ("job-migrate.yaml", "  backoffLimit: 3",
                      "  backoffLimit: 3\n  backoffLimit: 4", "backoffLimit"),
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_kubeconform_refuses_a_broken_manifest(validator: Validator, tmp_path: Path,
                                               case: str) -> None:
    """The validation above means something: the same files with one break fail."""
    file, good, bad, field_name = BREAKS[case]
    text = (K8S / file).read_text()
    assert text.count(good) >= 1, f"{file} no longer has {good!r}: update BREAKS"
    broken = tmp_path / file
    broken.write_text(text.replace(good, bad, 1))
    for version in validator.versions:
        code, report = validator.run(version, [broken])
        assert code != 0, f"{case} accepted by Kubernetes {version}'s schemas"
        assert field_name in json.dumps(report["resources"]), report["resources"]


def test_the_folder_is_the_kustomization() -> None:
    """`kubectl apply -k` and the validator see every manifest of the folder."""
    listed = {p.name for p in resource_files()}
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present
    assert not list(K8S.glob("*.yml"))


# ---------------------------------------------------------------- workloads
def test_one_deployment_per_service_and_a_job_per_setup_step(docs: list[Doc]) -> None:
    deployments = {d["metadata"]["name"]: d for d in of_kind(docs, "Deployment")}
    assert set(deployments) == set(SERVICES)
    assert {d["metadata"]["name"] for d in of_kind(docs, "Job")} == set(JOBS)
    images = set()
    for workload, pod in workloads(docs):
        (container,) = pod["containers"]
        assert container["args"][0] == workload["metadata"]["name"], "the command picks the service"
        assert "command" not in container, "the image's entry point is `hookstream`"
        images.add(container["image"])
    assert len(images) == 1, f"one image for every deployable, not {images}"


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_probes_ask_healthz_on_the_services_own_port(docs: list[Doc], service: str) -> None:
    pod = named(docs, "Deployment", service)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    settings = SERVICES[service]
    field = next(f for f in fields(settings) if f.name == "http_port")
    port = int(container_env(container)[field.metadata["env"]]["value"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == port
    assert env_value(docs, container, "HOOKSTREAM_HTTP_HOST") == "0.0.0.0", \
        "the kubelet probes the pod's address, not its loopback"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/healthz", probe
        # The number, not the port's name: podman's `kube play` (4.3) turns a named port
        # into port 0 in the health check it makes from the probe.
        assert get["port"] == port, probe
    liveness = container["livenessProbe"]
    # /healthz answers 503 while Kafka or PostgreSQL is away, which a restart does not
    # cure: the bad day (BENCHMARKS.md) had Kafka down 45 s and 71.7 s to recover.
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > 45 + 71.7


def drain_bound_s(docs: list[Doc], service: str, container: Doc) -> float:
    """The longest a service can take from SIGTERM to exit, from the waits its code
    makes one after another (each a bound in the code, not a measurement)."""
    def setting(settings: type, name: str) -> float:
        f = next(f for f in fields(settings) if f.name == name)
        raw = env_value(docs, container, f.metadata["env"])
        return float(raw if raw is not None else str(f.default))

    producer_close_s = float(inspect.signature(Publisher.close).parameters["timeout_s"].default)
    if service == "dispatcher":
        # services/dispatcher/service.py: attempts get their deadline plus a grace, the
        # outcomes SHUTDOWN_WRITE_WAIT_S, the consumer's close CLOSE_WAIT_S, then
        # delay.join(5) and self._publisher.close(5).
        return (setting(DispatcherSettings, "request_timeout_s") + SHUTDOWN_ATTEMPT_GRACE_S
                + SHUTDOWN_WRITE_WAIT_S + CLOSE_WAIT_S + 5 + 5)
    if service == "relay":
        # services/relay/service.py: each lane finishes its round (joined with
        # ack_timeout_s + 10), then the producer flushes.
        return setting(RelaySettings, "ack_timeout_s") + 10 + producer_close_s
    # services/fanout/service.py: the last batch's tasks (a publish reports within
    # message.timeout.ms + 5 s), the consumer's close, the producer's flush.
    timeout_ms = producer_config("", "")["message.timeout.ms"]
    assert isinstance(timeout_ms, int)
    return timeout_ms / 1000 + 5 + CLOSE_WAIT_S + producer_close_s


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_grace_period_outlasts_the_drain(docs: list[Doc], service: str) -> None:
    pod = named(docs, "Deployment", service)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    pre_stop_s = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get(
        "seconds", 0)
    bound_s = max(STOP_TIMEOUT_S, drain_bound_s(docs, service, container))
    # The preStop hook's time comes out of the same grace period.
    assert pod["terminationGracePeriodSeconds"] > pre_stop_s + bound_s, (service, bound_s)


def dockerfile_uid() -> int:
    match = re.search(r"useradd\b.*--uid (\d+)", (ROOT / "Dockerfile").read_text())
    assert match, "the Dockerfile's useradd --uid"
    return int(match[1])


def test_every_pod_runs_unprivileged(docs: list[Doc]) -> None:
    uid = dockerfile_uid()
    for workload, pod in workloads(docs):
        name = workload["metadata"]["name"]
        sc = pod["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] == uid, name
        assert sc["seccompProfile"]["type"] == "RuntimeDefault", name
        assert pod["automountServiceAccountToken"] is False, name
        # Service links would inject HOOKSTREAM_*-like names, which every service refuses.
        assert pod["enableServiceLinks"] is False, name
        assert "hostNetwork" not in pod and "hostPID" not in pod, name
        for container in pod["containers"] + pod.get("initContainers", []):
            csc = container["securityContext"]
            assert csc["allowPrivilegeEscalation"] is False, name
            assert csc.get("privileged", False) is False, name
            assert csc["readOnlyRootFilesystem"] is True, name
            assert csc["capabilities"] == {"drop": ["ALL"]}, name
            assert csc.get("runAsUser", uid) == uid, name
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            assert set(mounts) <= {"/tmp"}, f"{name}: only /tmp is writable"
            volumes = {v["name"]: v for v in pod.get("volumes", [])}
            assert all("emptyDir" in volumes[v] for v in mounts.values()), name


def test_namespace_enforces_the_restricted_pod_security_standard(docs: list[Doc]) -> None:
    labels = named(docs, "Namespace", "hookstream")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert all(d["metadata"].get("namespace") == "hookstream"
               for d in docs if d["kind"] != "Namespace")


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_disruption_budget_leaves_one_running(docs: list[Doc], service: str) -> None:
    deployment = named(docs, "Deployment", service)
    budget = named(docs, "PodDisruptionBudget", service)
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels(deployment).items()
    assert deployment["spec"]["selector"] == budget["spec"]["selector"]
    replicas = deployment["spec"]["replicas"]
    assert replicas >= 2
    assert "maxUnavailable" in budget["spec"] and budget["spec"]["maxUnavailable"] < replicas


# ---------------------------------------------------------------- resources
# BENCHMARKS.md, pipeline, "4,000 offered": the three runs that kept commit -> arrival
# p99 under 1 s (on a fast phase of the host, host yardstick 12.0-12.2).
BENCH_RUNS = tuple(ROOT / "benchmarks" / "results" / "2026-12-07-morning" / f"pipeline-{label}.json"
                   for label in ("s2-g4k-6", "s6-g4k-1", "s6-g4k-2"))
# The rate those runs carried, which one pod of each service must carry alone while the
# PodDisruptionBudget lets the other be drained.
DESIGN_DELIVERIES_PER_S = 4000


def measured(service: str) -> tuple[Decimal, int]:
    """(the highest CPU-ms per delivery, the highest peak RSS in MB) over the runs."""
    runs = [json.loads(p.read_text(), parse_float=Decimal)["processes"][service]
            for p in BENCH_RUNS]
    return (max(r["cpu_ms_per_delivery"] for r in runs), max(r["peak_rss_mb"] for r in runs))


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_requests_are_the_benchmarks_arithmetic(docs: list[Doc], service: str) -> None:
    (container,) = named(docs, "Deployment", service)["spec"]["template"]["spec"]["containers"]
    cpu_ms_per_delivery, peak_rss_mb = measured(service)
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    # CPU-ms per delivery x deliveries/s = CPU-ms per s = millicores.
    assert quantity_milli(requests["cpu"]) == math.ceil(cpu_ms_per_delivery
                                                        * DESIGN_DELIVERIES_PER_S)
    # Memory: twice the peak, rounded up to 32 Mi (README.md says why twice).
    assert quantity_mib(requests["memory"]) == math.ceil(2 * peak_rss_mb / 32) * 32
    # No CPU limit: a throttled dispatcher adds whole 100-ms CFS periods to deliveries,
    # and the figures above move with the host by up to 2x.
    assert "cpu" not in limits
    assert quantity_mib(limits["memory"]) >= quantity_mib(requests["memory"])


def test_jobs_have_bounded_resources(docs: list[Doc]) -> None:
    for name in JOBS:
        (container,) = named(docs, "Job", name)["spec"]["template"]["spec"]["containers"]
        assert {"cpu", "memory"} <= set(container["resources"]["requests"])
        assert "memory" in container["resources"]["limits"]


# ---------------------------------------------------------------- settings and secrets
SECRET_SETTINGS = {f.metadata["env"] for cls in ALL_SETTINGS for f in fields(cls)
                   if f.metadata.get("secret")}
# libpq's own variable: the database password never rides in the URL.
SECRET_ENV = SECRET_SETTINGS | {"PGPASSWORD"}
SECRET_WORDS = re.compile(r"pass(word)?|secret|token|credential|private|_key", re.IGNORECASE)


def test_every_hookstream_variable_is_one_the_code_reads(docs: list[Doc]) -> None:
    """A misspelt name would stop every pod at start (the services refuse it); a name
    another service reads is accepted and silently does nothing where it is set."""
    shared = {n for n in config_data(docs) if n.startswith("HOOKSTREAM_")}
    assert shared <= env_names(CommonSettings), shared - env_names(CommonSettings)
    reads = {name: env_names(cls) for name, cls in SERVICES.items()}
    reads["fanout"] |= env_names(ApiSettings)  # the API runs inside the fanout
    for workload, pod in workloads(docs):
        name = workload["metadata"]["name"]
        own = {n for c in pod["containers"] for n in container_env(c)
               if n.startswith("HOOKSTREAM_")}
        assert own <= reads.get(name, env_names(CommonSettings)), (name, own)
    assert shared <= known_env_names()


def test_no_secret_in_a_configmap(docs: list[Doc]) -> None:
    for config in of_kind(docs, "ConfigMap"):
        for key, value in config["data"].items():
            assert key not in SECRET_ENV and not SECRET_WORDS.search(key), key
            assert not SECRET_WORDS.search(value), f"{key}: {value}"
            if "://" in value:
                url = urlsplit(value)
                assert url.password is None, f"{key} carries a password"
                assert not {"password", "sslpassword"} & set(parse_qs(url.query)), key
    # Real secrets are made in the cluster (README.md), never committed.
    assert not of_kind(docs, "Secret")


def test_secrets_come_from_secret_refs(docs: list[Doc]) -> None:
    needs = {"relay": {"PGPASSWORD"}, "fanout": {"PGPASSWORD", "HOOKSTREAM_SECRET_KEYS"},
             "dispatcher": {"PGPASSWORD", "HOOKSTREAM_SECRET_KEYS"},
             "migrate": {"PGPASSWORD"}, "topics": set()}
    for workload, pod in workloads(docs):
        (container,) = pod["containers"]
        env = container_env(container)
        secret = {n for n, e in env.items() if "secretKeyRef" in e.get("valueFrom", {})}
        assert secret == needs[workload["metadata"]["name"]], workload["metadata"]["name"]
        for name in SECRET_ENV & set(env):
            assert "value" not in env[name], name
        assert all("secretRef" not in source or source["secretRef"]["name"] ==
                   "hookstream-secrets" for source in container.get("envFrom", []))


def test_database_url_names_no_password(docs: list[Doc]) -> None:
    url = urlsplit(config_data(docs)["HOOKSTREAM_DATABASE_URL"])
    assert url.scheme == "postgresql" and url.hostname and url.username and url.password is None


# ---------------------------------------------------------------- network
def selects(selector: Doc, labels: dict[str, str]) -> bool:
    if not selector:
        return True
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        present = key in labels
        ok = {"In": present and labels.get(key) in values,
              "NotIn": not present or labels.get(key) not in values,
              "Exists": present, "DoesNotExist": not present}[op]
        if not ok:
            return False
    return True


def policies_for(docs: list[Doc], labels: dict[str, str], direction: str) -> list[Doc]:
    return [p for p in of_kind(docs, "NetworkPolicy")
            if direction in p["spec"]["policyTypes"] and selects(p["spec"]["podSelector"], labels)]


def rules(docs: list[Doc], labels: dict[str, str], direction: str) -> list[Doc]:
    key = "egress" if direction == "Egress" else "ingress"
    return [r for p in policies_for(docs, labels, direction) for r in p["spec"].get(key, [])]


def test_every_pod_is_default_deny(docs: list[Doc]) -> None:
    for workload, _ in workloads(docs):
        for direction in ("Ingress", "Egress"):
            assert any(p["spec"]["podSelector"] == {} for p in
                       policies_for(docs, pod_labels(workload), direction)), \
                (workload["metadata"]["name"], direction)


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def reachable(net: Network, blocks: list[Doc]) -> list[Network]:
    """The parts of ``net`` that the ipBlocks let through."""
    parts: list[Network] = []
    for block in blocks:
        cidr = ipaddress.ip_network(block["cidr"])
        if cidr.version != net.version or not cidr.overlaps(net):
            continue
        left = [net if net.subnet_of(cidr) else cidr]  # type: ignore[arg-type]
        for text in block.get("except", []):
            cut = ipaddress.ip_network(text)
            kept: list[Network] = []
            for part in left:
                if cut.version != part.version or not cut.overlaps(part):
                    kept.append(part)
                elif cut.subnet_of(part):  # type: ignore[arg-type]
                    kept.extend(part.address_exclude(cut))  # type: ignore[arg-type]
                # else the part lies wholly inside the exception
            left = kept
        parts += left
    return parts


FORBIDDEN_BY_THE_BRIEF = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                          "127.0.0.0/8", "169.254.0.0/16", "169.254.169.254/32", "0.0.0.0/8",
                          "::1/128", "fc00::/7", "fe80::/10", "fd00:ec2::254/128",
                          "::ffff:0:0/96", "64:ff9b::/96"]


def dispatcher_egress(docs: list[Doc]) -> list[Doc]:
    return rules(docs, pod_labels(named(docs, "Deployment", "dispatcher")), "Egress")


def test_dispatcher_reaches_no_private_or_metadata_address(docs: list[Doc]) -> None:
    blocks = [peer["ipBlock"] for rule in dispatcher_egress(docs) for peer in rule["to"]
              if "ipBlock" in peer]
    assert blocks
    guard = [n for n, _ in urlsafety._IPV4_FORBIDDEN] + [n for n, _ in urlsafety._IPV6_FORBIDDEN]
    for net in [ipaddress.ip_network(n) for n in FORBIDDEN_BY_THE_BRIEF] + guard:
        assert not reachable(net, blocks), f"{net} is reachable: {reachable(net, blocks)}"
    # ... while the public internet is, in both families.
    for public in ("1.1.1.1", "8.8.8.8", "2606:4700:4700::1111", "2001:4860:4860::8888"):
        ip = ipaddress.ip_address(public)
        assert urlsafety.forbidden_reason(ip) is None
        assert reachable(ipaddress.ip_network(public), blocks), public


def test_dispatcher_egress_is_public_addresses_kafka_postgres_and_dns(docs: list[Doc]) -> None:
    allowed_peers = {("kube-system", "k8s-app", "kube-dns"): {("UDP", 53), ("TCP", 53)},
                     ("kafka", "app.kubernetes.io/name", "kafka"): {("TCP", 9092)},
                     ("postgres", "app.kubernetes.io/name", "postgresql"): {("TCP", 5432)}}
    seen = set()
    for rule in dispatcher_egress(docs):
        assert rule.get("to"), "a rule without `to` allows every destination"
        ports = {(p.get("protocol", "TCP"), p["port"]) for p in rule.get("ports", [])}
        for peer in rule["to"]:
            if "ipBlock" in peer:
                assert set(peer) == {"ipBlock"}
                continue
            # Both selectors, so the peer is those pods in that namespace, not every pod
            # of the namespace nor pods of that name anywhere.
            assert set(peer) == {"namespaceSelector", "podSelector"}, peer
            namespaces = peer["namespaceSelector"].get("matchLabels", {})
            pods = peer["podSelector"].get("matchLabels", {})
            assert set(namespaces) == {"kubernetes.io/metadata.name"} and len(pods) == 1, peer
            key = (namespaces["kubernetes.io/metadata.name"], *next(iter(pods.items())))
            assert key in allowed_peers and ports == allowed_peers[key], (key, ports)
            seen.add(key)
    assert seen == set(allowed_peers)


def test_dispatcher_ingress_is_metrics_from_monitoring_only(docs: list[Doc]) -> None:
    labels = pod_labels(named(docs, "Deployment", "dispatcher"))
    ingress = rules(docs, labels, "Ingress")
    assert ingress == [{"from": [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}],
        "ports": [{"protocol": "TCP", "port": 9103}]}]
    own = [p for p in policies_for(docs, labels, "Egress") if p["spec"]["podSelector"]]
    assert [p["metadata"]["name"] for p in own] == ["dispatcher"], \
        "the dispatcher's reach is one policy of its own, readable in one place"


def test_the_api_has_its_own_service_and_policy(docs: list[Doc]) -> None:
    fanout = named(docs, "Deployment", "fanout")
    (container,) = fanout["spec"]["template"]["spec"]["containers"]
    api_port = int(env_value(docs, container, "HOOKSTREAM_API_PORT") or 0)
    assert env_value(docs, container, "HOOKSTREAM_API_HOST") == "0.0.0.0"
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["api"] == api_port
    services = of_kind(docs, "Service")
    (api,) = [s for s in services if s["spec"]["selector"].items() <= pod_labels(fanout).items()]
    assert [p["targetPort"] for p in api["spec"]["ports"]] == ["api"]
    for service in services:
        # Kubernetes derives service-link variable names from the Service's name.
        assert not service["metadata"]["name"].upper().replace("-", "_").startswith(
            "HOOKSTREAM"), service["metadata"]["name"]
    api_policies = [p for p in policies_for(docs, pod_labels(fanout), "Ingress")
                    if any(port["port"] == api_port for r in p["spec"].get("ingress", [])
                           for port in r.get("ports", []))]
    assert [p["metadata"]["name"] for p in api_policies] == ["api"]
    (policy,) = api_policies
    assert {port["port"] for r in policy["spec"]["ingress"] for port in r["ports"]} == {api_port}
    # Nothing else reaches the fanout but the API port and its metrics port.
    reachable_ports = {port["port"] for r in rules(docs, pod_labels(fanout), "Ingress")
                       for port in r["ports"]}
    assert reachable_ports == {api_port, 9102}

