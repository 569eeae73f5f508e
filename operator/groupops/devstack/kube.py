"""A real Kubernetes API server for tests and the demo: etcd and kube-apiserver, built from their
Go modules at pinned versions (tools/k8s, `make stack`), on free 127.0.0.1 ports.

Who calls it: the pytest fixtures (tests/fixtures/stack.py) and `python -m groupops.devstack up`.

Steps of `KubeApiServer.start()`:
1. credentials with the openssl CLI: a CA, the server's certificate (SANs 127.0.0.1, localhost
   and the in-cluster names), the service-account signing key pair, and a static token for the
   user `admin` in group `system:masters`;
2. etcd on a client and a peer port; ready when /health says so;
3. kube-apiserver against it (TLS, token authentication, RBAC); ready when /readyz answers 200;
4. a kubeconfig (CA data, server URL, token) that kubectl and the Python client both use.

What is not there: no controller-manager, scheduler or kubelet. So namespaces stay Terminating
after deletion, ownerReferences do not cascade, pods are never scheduled, and no `default`
ServiceAccount appears (the ServiceAccount admission plugin is off, as in controller-runtime's
envtest, so pods can still be created).
"""

from __future__ import annotations

import base64
import logging
import secrets
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import yaml

from groupops.devstack import paths
from groupops.devstack.errors import StartError
from groupops.devstack.process import ManagedProcess, free_port, port_taken

__all__ = ["KubeApiServer", "KubeSettings"]

log = logging.getLogger(__name__)

_START_ATTEMPTS = 3  # a port taken between our pick and the server's bind is retried
_SERVICE_CIDR = "10.0.0.0/24"
_FIRST_SERVICE_IP = "10.0.0.1"  # the `kubernetes` Service's ClusterIP; clients may dial it by name
_ISSUER = "https://kubernetes.default.svc.cluster.local"
_SAN_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeSettings:
    """ready_timeout_s: the API server runs every post-start hook (RBAC bootstrap roles, the
    aggregator's discovery) before /readyz says ok: 5-20 s on an idle machine, more on a busy one.
    """

    ready_timeout_s: float = 180.0
    user: str = "admin"


class KubeApiServer:
    """etcd + kube-apiserver under `workdir` (created). `kubeconfig` is valid after start()."""

    def __init__(self, workdir: Path, settings: KubeSettings | None = None) -> None:
        self.workdir = workdir
        self.settings = settings or KubeSettings()
        self.etcd: ManagedProcess | None = None
        self.apiserver: ManagedProcess | None = None
        self.port: int | None = None
        self.token = ""
        self.start_seconds: float | None = None

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def server_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the API server was never started")
        return f"https://127.0.0.1:{self.port}"

    @property
    def log_paths(self) -> list[Path]:
        return [self.workdir / "etcd.log", self.workdir / "kube-apiserver.log"]

    def processes(self) -> list[ManagedProcess]:
        return [process for process in (self.etcd, self.apiserver) if process is not None]

    def rss(self) -> dict[str, int | None]:
        return {process.name: process.rss() for process in self.processes()}

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        etcd_binary = paths.etcd_binary()
        apiserver_binary = paths.kube_apiserver_binary()
        began = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._make_credentials()
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                etcd_url = self._start_etcd(etcd_binary)
                self._start_apiserver(apiserver_binary, etcd_url)
                self._write_kubeconfig()
                break
            except StartError as e:
                self.stop()
                if attempt == _START_ATTEMPTS or not port_taken(e):
                    raise
                log.warning("kube: attempt %d lost a port race (%s); retrying with new ports", attempt, e)
                shutil.rmtree(self.workdir / "etcd-data", ignore_errors=True)
            except BaseException:
                self.stop()
                raise
        self.start_seconds = time.monotonic() - began
        log.info("kube-apiserver ready at %s in %.1f s", self.server_url, self.start_seconds)

    def stop(self, timeout_s: float = 15.0) -> None:
        """API server first (it would log etcd errors while it drains), then etcd. Idempotent."""
        for process in (self.apiserver, self.etcd):
            if process is not None:
                process.stop(timeout_s)

    def __enter__(self) -> KubeApiServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- steps -----------------------------------------------------------------------------

    def _make_credentials(self) -> None:
        pki = self.pki
        pki.mkdir(parents=True, exist_ok=True)
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        _openssl(
            "req", "-x509", *ec, "-days", "3650", "-subj", "/CN=groupops-dev-ca",
            "-keyout", pki / "ca.key", "-out", pki / "ca.crt",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
        _openssl(
            "req", *ec, "-subj", "/CN=kube-apiserver",
            "-keyout", pki / "apiserver.key", "-out", pki / "apiserver.csr",
        )  # fmt: skip
        sans = ",".join(["IP:127.0.0.1", f"IP:{_FIRST_SERVICE_IP}", *(f"DNS:{name}" for name in _SAN_NAMES)])
        extensions = pki / "apiserver.ext"
        extensions.write_text(
            f"subjectAltName={sans}\n"
            "extendedKeyUsage=serverAuth\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "basicConstraints=critical,CA:FALSE\n"
        )
        _openssl(
            "x509", "-req", "-in", pki / "apiserver.csr", "-CA", pki / "ca.crt",
            "-CAkey", pki / "ca.key", "-CAcreateserial", "-days", "3650",
            "-extfile", extensions, "-out", pki / "apiserver.crt",
        )  # fmt: skip
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", pki / "sa.key")
        _openssl("pkey", "-in", pki / "sa.key", "-pubout", "-out", pki / "sa.pub")
        self.token = secrets.token_urlsafe(32)
        tokens = pki / "tokens.csv"
        tokens.write_text(f'{self.token},{self.settings.user},{self.settings.user},"system:masters"\n')
        tokens.chmod(0o600)

    def _start_etcd(self, binary: Path) -> str:
        client_port, peer_port = free_port(), free_port()
        client_url = f"http://127.0.0.1:{client_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        self.etcd = ManagedProcess(
            "etcd",
            [
                str(binary),
                "--name=groupops",
                f"--data-dir={self.workdir / 'etcd-data'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=groupops={peer_url}",
                # Test data is thrown away; fsync on every write only slows the suite down.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            log_path=self.workdir / "etcd.log",
            cwd=self.workdir,
        )
        self.etcd.start()
        self.etcd.wait_ready(
            lambda: _http_ok(f"{client_url}/health", None, None),
            timeout_s=self.settings.ready_timeout_s,
            what=f"/health on {client_url}",
        )
        return client_url

    def _start_apiserver(self, binary: Path, etcd_url: str) -> None:
        pki = self.pki
        self.port = free_port()
        self.apiserver = ManagedProcess(
            "kube-apiserver",
            [
                str(binary),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer={_ISSUER}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={_SERVICE_CIDR}",
                # No controller-manager creates `default` ServiceAccounts here (see module doc).
                "--disable-admission-plugins=ServiceAccount",
                # The endpoint reconciler would publish 127.0.0.1 for the `kubernetes` Service,
                # which Endpoints validation rejects, every 10 s in the log.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--profiling=false",
            ],
            log_path=self.workdir / "kube-apiserver.log",
            cwd=self.workdir,
        )
        self.apiserver.start()
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        url = f"{self.server_url}/readyz"
        self.apiserver.wait_ready(
            lambda: _http_ok(url, context, self.token),
            timeout_s=self.settings.ready_timeout_s,
            what=f"/readyz on {self.server_url}",
        )

    def _write_kubeconfig(self) -> None:
        ca_data = base64.b64encode((self.pki / "ca.crt").read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "groupops-dev",
                    "cluster": {"server": self.server_url, "certificate-authority-data": ca_data},
                }
            ],
            "users": [{"name": self.settings.user, "user": {"token": self.token}}],
            "contexts": [
                {"name": "groupops-dev", "context": {"cluster": "groupops-dev", "user": self.settings.user}}
            ],
            "current-context": "groupops-dev",
            "preferences": {},
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)


def _openssl(*args: str | Path) -> None:
    command = ["openssl", *(str(arg) for arg in args)]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    if result.returncode != 0:
        raise StartError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")


def _http_ok(url: str, context: ssl.SSLContext | None, token: str | None) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            status: int = response.status
            return status == 200
    except (urllib.error.URLError, OSError):
        return False
