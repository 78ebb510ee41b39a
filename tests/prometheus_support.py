"""A real Prometheus (Debian's package) for end-to-end tests: scraping a running
pipeline with the repository's scrape jobs and alert rules, at 1 s intervals."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from hookstream.dev.harness import Pipeline, free_port
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"


class PrometheusServer:
    def __init__(self, config: Path, data: Path, log: Path) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus is not installed (scripts/bootstrap.sh installs Debian's)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={data}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.log = log
        wait_until(self._ready, 30, 0.2, message=f"prometheus ready ({log})")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited:\n{self.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as resp:
                return resp.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        return data["result"] if data["resultType"] == "vector" else [data["result"]]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def scrape_pipeline(pipeline: Pipeline, work: Path) -> PrometheusServer:
    """Prometheus with deploy/prometheus's jobs (pointed at this pipeline's ports) and
    alert rules, scraping and evaluating every second; all three targets up."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", scrape_timeout="1s",
                            evaluation_interval="1s")
    config["rule_files"] = [str(RULES)]
    for job in config["scrape_configs"]:
        service = job["job_name"].removeprefix("hookstream-")
        job["static_configs"] = [{"targets": [f"127.0.0.1:{pipeline[service].http_port}"]}]
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    prometheus = PrometheusServer(work / "prometheus.yml", work / "tsdb", work / "prometheus.log")
    try:
        wait_until(lambda: len(prometheus.query('up{job=~"hookstream-.*"} == 1')) == 3, 30,
                   message="three targets up")
    except BaseException:
        prometheus.stop()
        raise
    return prometheus
