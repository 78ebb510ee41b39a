"""The shipped Prometheus configuration, alert rules and dashboard, checked with promtool
(Debian's ``prometheus`` package); no server needed. Against a running Prometheus:
test_observability_prometheus.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "hookstream.json"
RUNBOOK = ROOT / "docs" / "runbook.md"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is not installed (scripts/bootstrap.sh installs Debian's prometheus)")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60,
                          check=False, cwd=PROM)


def test_promtool_check_rules() -> None:
    result = _promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_check_config() -> None:
    result = _promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_alerts_fire_on_their_cause_and_not_on_look_alikes() -> None:
    # alerts.test.yml: e.g. one slow endpoint is not HookstreamPlatformBehind, a shrinking
    # backlog is not HookstreamConsumerLagGrowing, replicas are not added up.
    result = _promtool("test", "rules", "alerts.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_tested_and_has_a_runbook_section() -> None:
    rules = [r for g in yaml.safe_load((PROM / "alerts.yml").read_text())["groups"]
             for r in g["rules"]]
    tests = yaml.safe_load((PROM / "alerts.test.yml").read_text())["tests"]
    fired = {t["alertname"] for case in tests for t in case["alert_rule_test"]
             if t["exp_alerts"]}
    headings = {line[3:].strip().lower() for line in RUNBOOK.read_text().splitlines()
                if line.startswith("## ")}
    for rule in rules:
        name = rule["alert"]
        assert name in fired, f"{name}: no promtool test sees it fire"
        assert rule["annotations"]["runbook"] == f"docs/runbook.md#{name.lower()}"
        assert name.lower() in headings, f"{name}: no '## {name}' section in docs/runbook.md"
        # page / warning: the platform's on-call; customer: one tenant's endpoint, routed to
        # whoever talks to the tenant (the runbook's "one customer is slow")
        assert rule["labels"]["severity"] in {"page", "warning", "customer"}


def test_dashboard_is_well_formed_for_grafana() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            # only Grafana macros may remain unresolved in a query
            assert not re.search(r"\$(?!__rate_interval|__interval|__range)\w+",
                                 target["expr"]), target["expr"]
