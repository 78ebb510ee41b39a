"""The compose files checked against the code (commands, variables, ports) and against
their promises (networks, hardening, the cluster's replication). scripts/containers.sh
runs them for real; this is the part that needs no container engine."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from hookstream.cli import main as cli_main
from hookstream.core.settings import CommonSettings, all_env_names, from_env
from hookstream.dev.harness import STOP_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[2]


def _merge(base: Any, override: Any) -> Any:
    """Compose's merge of an override file: mappings key by key, lists appended."""
    if isinstance(base, dict) and isinstance(override, dict):
        return {k: _merge(base[k], v) if k in base else v for k, v in override.items()} | {
            k: v for k, v in base.items() if k not in override}
    if isinstance(base, list) and isinstance(override, list):
        return base + [x for x in override if x not in base]
    return override


@pytest.fixture(scope="module")
def single() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def cluster(single: dict[str, Any]) -> dict[str, Any]:
    return _merge(single, yaml.safe_load((ROOT / "docker-compose.cluster.yml").read_text()))


@pytest.fixture(scope="module", params=["single", "cluster"])
def compose(request: pytest.FixtureRequest) -> dict[str, Any]:
    return request.getfixturevalue(request.param)


def _ours(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in compose["services"].items() if v.get("build")}


def test_every_hookstream_variable_is_one_the_settings_read(compose: dict[str, Any]) -> None:
    known = all_env_names()
    for name, svc in _ours(compose).items():
        for var in svc.get("environment", {}):
            if var.startswith("HOOKSTREAM_"):
                assert var in known, f"{name}: {var} is not read by any settings class"


def test_commands_are_cli_subcommands(compose: dict[str, Any]) -> None:
    for name, svc in _ours(compose).items():
        argv = [*svc["command"], "--help"]
        # main() returns argparse's exit code (0 for --help, 2 for an unknown command)
        assert cli_main(argv) == 0, f"{name}: {svc['command']} is not a valid command"


def test_dependencies_exist_and_services_wait_for_setup(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, svc in services.items():
        for dep in svc.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown service {dep}"
    for name in ("relay", "fanout", "dispatcher"):
        deps = services[name]["depends_on"]
        assert deps["migrate"]["condition"] == "service_completed_successfully"
        assert deps["topics"]["condition"] == "service_completed_successfully"


def test_health_checks_probe_the_port_each_service_listens_on(compose: dict[str, Any]) -> None:
    port_var = {"relay": "HOOKSTREAM_RELAY_HTTP_PORT", "fanout": "HOOKSTREAM_FANOUT_HTTP_PORT",
                "dispatcher": "HOOKSTREAM_DISPATCHER_HTTP_PORT"}
    for name, var in port_var.items():
        svc = compose["services"][name]
        port = svc["environment"][var]
        probe = " ".join(svc["healthcheck"]["test"])
        assert f"127.0.0.1:{port}/healthz" in probe
        assert svc["environment"]["HOOKSTREAM_HTTP_HOST"] == "0.0.0.0"


def test_database_url_matches_the_postgres_service(compose: dict[str, Any]) -> None:
    pg = compose["services"]["postgres"]["environment"]
    for svc in _ours(compose).values():
        url = svc["environment"]["HOOKSTREAM_DATABASE_URL"]
        m = re.match(r"postgresql://(\w+):(\$\{[^}]+\})@postgres:5432/(\w+)$", url)
        assert m, url
        assert m.groups() == (pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"])
        assert svc["environment"]["HOOKSTREAM_KAFKA_BOOTSTRAP"] == ",".join(
            _advertised(b) for _, b in sorted(_brokers(compose).items()))


def test_no_secret_is_written_in_the_files(compose: dict[str, Any]) -> None:
    """Passwords and the sealing keys come from the environment or an env file, required
    (``${VAR:?...}``), never a value in the file or the image."""
    assert compose["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith(
        "${POSTGRES_PASSWORD:?")
    for name, svc in _ours(compose).items():
        assert svc["environment"]["HOOKSTREAM_SECRET_KEYS"].startswith(
            "${HOOKSTREAM_SECRET_KEYS:?"), name
    assert "SECRET" not in (ROOT / "Dockerfile").read_text()


def test_set_up_commands_wait_for_their_server(compose: dict[str, Any]) -> None:
    for name in ("migrate", "topics"):
        command = compose["services"][name]["command"]
        assert command[:2] == [name, "--wait"] and float(command[2]) >= 60, command


def test_every_process_is_hardened_and_stops_after_its_drain(compose: dict[str, Any]) -> None:
    for name, svc in _ours(compose).items():
        assert svc["init"] is True, name  # SIGTERM forwarded, zombies reaped
        assert svc["read_only"] is True and svc["tmpfs"] == ["/tmp"], name
        assert svc["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in svc["security_opt"], name
        grace = float(svc["stop_grace_period"].removesuffix("s"))
        assert grace > STOP_TIMEOUT_S, name


# -- networks: the dispatcher's egress reaches no internal service (seed 002) -------------


def _networks(svc: dict[str, Any]) -> set[str]:
    nets = svc.get("networks", ["default"])
    return set(nets)  # a list, or a mapping of network → options


def test_the_dispatcher_shares_a_network_only_with_what_it_needs(
        compose: dict[str, Any]) -> None:
    services = compose["services"]
    mine = _networks(services["dispatcher"])
    neighbours = {other for other, svc in services.items()
                  if other != "dispatcher" and _networks(svc) & mine}
    kafka = set(_brokers(compose))
    assert neighbours == {"postgres", "prometheus"} | kafka, neighbours
    # the only network it shares with Prometheus is one where Prometheus listens on no
    # port: Prometheus scrapes the dispatcher, it is never reached from it
    prom = services["prometheus"]
    shared = _networks(prom) & mine
    assert shared == {"dispatcher-metrics"}
    listen = next(a for a in prom["command"] if a.startswith("--web.listen-address="))
    address = listen.split("=", 1)[1].rsplit(":", 1)[0]
    assert address == prom["networks"]["control"]["ipv4_address"]
    # and its way out is its own
    assert [n for n, svc in services.items() if "egress" in _networks(svc)] == ["dispatcher"]


def test_the_api_is_on_no_network_of_the_dispatcher(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["fanout"]["environment"]["HOOKSTREAM_API_PORT"] == "8080"
    for name in ("fanout", "relay", "grafana", "migrate", "topics"):
        assert not _networks(services[name]) & _networks(services["dispatcher"]), name


# -- Kafka: three KRaft brokers, and topics replicated 3 / min ISR 2 (issue #16) -----------


def _brokers(compose: dict[str, Any]) -> dict[str, dict[str, str]]:
    """service name → environment, for every Kafka service."""
    return {name: svc["environment"] for name, svc in compose["services"].items()
            if svc.get("image", "").startswith("apache/kafka:")}


def _advertised(env: dict[str, str]) -> str:
    (listener,) = [x for x in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
                   if x.startswith("PLAINTEXT://")]
    return listener.removeprefix("PLAINTEXT://")


def test_one_broker_by_default_replicating_once(single: dict[str, Any]) -> None:
    (env,) = _brokers(single).values()
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "1@kafka:9093"
    settings = from_env(CommonSettings, {k: v for k, v in single["services"]["topics"][
        "environment"].items() if k.startswith("HOOKSTREAM_")})
    assert settings.topic_replication_factor == settings.topic_min_insync_replicas == 1
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"


def test_three_kraft_brokers_form_one_quorum(cluster: dict[str, Any]) -> None:
    compose = cluster
    brokers = _brokers(compose)
    assert len(brokers) == 3, sorted(brokers)
    assert len({env["CLUSTER_ID"] for env in brokers.values()}) == 1
    assert sorted(env["KAFKA_NODE_ID"] for env in brokers.values()) == ["1", "2", "3"]
    voters = {env["KAFKA_CONTROLLER_QUORUM_VOTERS"] for env in brokers.values()}
    assert len(voters) == 1
    port = next(iter(brokers.values()))["KAFKA_LISTENERS"].split("CONTROLLER://:")[1]
    assert voters.pop().split(",") == [
        f"{env['KAFKA_NODE_ID']}@{name}:{port}" for name, env in sorted(brokers.items())]
    for name, env in brokers.items():
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert _advertised(env) == f"{name}:9092"  # each advertises itself, not a neighbour
    volumes = {v.split(":")[0] for name in brokers
               for v in compose["services"][name]["volumes"]}
    assert len(volumes) == len(brokers)  # one log directory each


def test_topics_are_replicated_three_ways_with_two_in_sync(cluster: dict[str, Any]) -> None:
    compose = cluster
    brokers = _brokers(compose)
    topics = compose["services"]["topics"]
    # the settings the topics command really reads (and checks), not just the strings
    settings = from_env(CommonSettings, {k: v for k, v in topics["environment"].items()
                                         if k.startswith("HOOKSTREAM_")})
    assert settings.topic_replication_factor == 3 == len(brokers)
    assert settings.topic_min_insync_replicas == 2
    assert "--partitions" not in topics["command"]  # the settings decide, as everywhere
    for name in brokers:
        assert topics["depends_on"][name]["condition"] == "service_healthy"
        assert set(compose["services"][name]["networks"]) == {"kafka", "dispatcher-kafka"}
    for env in brokers.values():
        # Kafka's own topics: the consumer offsets and the idempotent/transactional
        # producer state are as precious as the records.
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
        assert env["KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR"] == "2"
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
        assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"


def test_every_service_uses_the_same_topic_layout(compose: dict[str, Any]) -> None:
    names = ("HOOKSTREAM_TOPIC_PARTITIONS", "HOOKSTREAM_TOPIC_REPLICATION_FACTOR",
             "HOOKSTREAM_TOPIC_MIN_INSYNC_REPLICAS")
    layouts = {name: tuple(svc["environment"].get(n) for n in names)
               for name, svc in _ours(compose).items()}
    assert len(set(layouts.values())) == 1, layouts


def test_dockerfile_ships_what_the_package_needs() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for folder in ("src", "services", "schemas"):
        assert f"COPY {folder} ./{folder}" in text
    assert 'ENTRYPOINT ["hookstream"]' in text


# -- observability: Prometheus and Grafana are wired to the files under deploy/ ------------


def _mounts(svc: dict[str, Any]) -> dict[str, str]:
    """container path → host path, for bind mounts (host paths start with ./)."""
    out = {}
    for volume in svc.get("volumes", []):
        host, container = volume.split(":")[:2]
        if host.startswith("./"):
            out[container] = host[2:]
    return out


def test_prometheus_scrapes_every_service_on_its_port(compose: dict[str, Any]) -> None:
    prom = compose["services"]["prometheus"]
    mounts = _mounts(prom)
    config_arg = next(a for a in prom["command"] if a.startswith("--config.file="))
    config_path = config_arg.split("=", 1)[1]
    folder, name = config_path.rsplit("/", 1)
    config = yaml.safe_load((ROOT / mounts[folder] / name).read_text())
    targets = {job["job_name"]: t for job in config["scrape_configs"]
               for sc in job["static_configs"] for t in sc["targets"]}
    for svc in ("relay", "fanout", "dispatcher"):
        port = compose["services"][svc]["environment"][f"HOOKSTREAM_{svc.upper()}_HTTP_PORT"]
        assert targets[f"hookstream-{svc}"] == f"{svc}:{port}"
    for rule_file in config["rule_files"]:
        assert (ROOT / mounts[folder] / rule_file).is_file(), rule_file


def test_grafana_is_provisioned_with_the_prometheus_service_and_the_dashboard(
        compose: dict[str, Any]) -> None:
    grafana = compose["services"]["grafana"]
    mounts = _mounts(grafana)
    provisioning = ROOT / mounts["/etc/grafana/provisioning"]
    (source,) = yaml.safe_load(
        (provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert source["url"] == "http://prometheus:9090" and "prometheus" in compose["services"]
    (provider,) = yaml.safe_load(
        (provisioning / "dashboards" / "hookstream.yml").read_text())["providers"]
    dashboards = ROOT / mounts[provider["options"]["path"]]
    files = sorted(dashboards.glob("*.json"))
    assert files, f"no dashboard in {dashboards}"
    for path in files:
        dashboard = json.loads(path.read_text())
        uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p.get("targets", [])}
        assert uids == {source["uid"]}, f"{path.name} uses data sources {uids}"
    assert grafana["depends_on"]["prometheus"]["condition"] == "service_healthy"
