"""A real Prometheus for tests: Debian's `prometheus` binary (mk/prometheus.mk) on a free
127.0.0.1 port, scraping the targets a test names, every second, with optional rule files.

Who calls it: the monitoring e2e tests (tests/e2e/test_monitoring.py) through their fixture.

`start()` writes `prometheus.yml` (one job per name in `targets`, static configs), starts the
server with its TSDB in the work directory and the lifecycle API on, and is ready when
`/-/ready` answers. `set_targets` rewrites the configuration and reloads it (`POST /-/reload`).
`query` runs an instant query through the HTTP API and returns its `data`, or raises
PrometheusError with Prometheus' own error text.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeAlias

import yaml

from groupops.devstack import paths
from groupops.devstack.process import ManagedProcess, free_port

__all__ = ["PrometheusError", "PrometheusServer", "Target"]

SCRAPE_INTERVAL = "1s"

Target: TypeAlias = str | tuple[str, Mapping[str, str]]
"""A scrape target: "host:port", or ("host:port", labels to attach, as a PodMonitor would)."""


class PrometheusError(RuntimeError):
    """Prometheus answered a query with an error (its errorType and error text)."""


class PrometheusServer:
    def __init__(
        self,
        workdir: Path,
        targets: Mapping[str, Sequence[Target]] | None = None,
        *,
        rule_files: Sequence[Path] = (),
    ) -> None:
        self.workdir = workdir
        self.port = 0
        self._targets = {job: list(addresses) for job, addresses in (targets or {}).items()}
        self._rule_files = [str(path) for path in rule_files]
        self._process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _write_config(self) -> Path:
        config = {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
            "rule_files": self._rule_files,
            "scrape_configs": [
                {"job_name": job, "static_configs": [_static_config(target) for target in targets]}
                for job, targets in sorted(self._targets.items())
            ],
        }
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def start(self, timeout_s: float = 60.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        self.port = free_port()
        self._process = ManagedProcess(
            "prometheus",
            [
                str(paths.prometheus_binary()),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
                "--storage.tsdb.retention.time=1h",
            ],
            log_path=self.workdir / "prometheus.log",
        )
        self._process.start()
        self._process.wait_ready(self._ready, timeout_s=timeout_s, what="/-/ready answering")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def set_targets(self, targets: Mapping[str, Sequence[Target]]) -> None:
        self._targets = {job: list(addresses) for job, addresses in targets.items()}
        self._write_config()
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def api(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """GET an /api/v1 endpoint; its `data`, or PrometheusError with Prometheus' error."""
        query = "" if not params else "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
                document = json.load(response)
        except urllib.error.HTTPError as e:
            document = json.load(e)
        if document.get("status") != "success":
            raise PrometheusError(f"{document.get('errorType')}: {document.get('error')}")
        return document["data"]

    def query(self, expression: str) -> list[dict[str, Any]]:
        """An instant query; its result list (vector or matrix samples; [] when empty)."""
        data = self.api("query", {"query": expression})
        result = data.get("result")
        return result if isinstance(result, list) else [{"value": result}]

    def wait_for_targets_up(self, timeout_s: float = 60.0) -> None:
        """Every configured target scraped successfully at least once."""
        deadline = time.monotonic() + timeout_s
        expected = sum(len(addresses) for addresses in self._targets.values())
        while True:
            active = self.api("targets", {"state": "active"})["activeTargets"]
            up = [t for t in active if t.get("health") == "up"]
            if len(up) >= expected:
                return
            if time.monotonic() > deadline:
                states = {t.get("scrapeUrl"): (t.get("health"), t.get("lastError")) for t in active}
                raise PrometheusError(f"targets not all up after {timeout_s:.0f} s: {states}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def _static_config(target: Target) -> dict[str, Any]:
    if isinstance(target, str):
        return {"targets": [target]}
    address, labels = target
    return {"targets": [address], "labels": dict(labels)}
