"""prometheus and burrow against a real local HTTP(S) server that checks credentials: the
Authorization header each `auth` asks for is sent (and only to the URL asked), a refused or
missing credential and every bad Secret reference are clear errors naming the field and never
the secret, a private CA makes https verify while without it verification fails clearly, and
`timeoutSeconds` bounds a server that does not answer.

The throwaway CA and server certificate are made with the `openssl` command (the `cryptography`
package is not installed here); the Secrets are a `SecretReader` over a dict, as the operator's
reader hands them to the sources (controller/lagaccess.py)."""

from __future__ import annotations

import base64
import logging
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from groupops.lag import LagAuthorizationError, LagSnapshot, LagSourceConfigError, LagSourceUnavailable
from groupops.lag.endpoint import endpoint_from_spec
from groupops.lag.registry import SourceContext, build_lag_source
from tests.fixtures.json_http import JsonHandler

TOKEN = "s3cr3t-t0ken-4711"
USER, PASSWORD = "lag-reader", "pa55-w0rd-0815"
BEARER = f"Bearer {TOKEN}"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
NEVER_SHOWN = (TOKEN, PASSWORD, base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode())

SECRETS: dict[str, dict[str, bytes]] = {
    "prom-token": {"token": f"{TOKEN}\n".encode()},  # made with --from-file: a trailing newline
    "burrow-login": {"user": USER.encode(), "password": PASSWORD.encode()},
    "empty": {"token": b"  \n"},
    "two-lines": {"token": f"{TOKEN}\nX-Other: 1".encode()},
    "binary": {"token": b"\xff\xfe"},
    "colon-user": {"user": b"a:b", "password": b"p"},
    "not-pem": {"ca.crt": b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"},
}


def read_secret(name: str) -> Mapping[str, bytes] | None:
    return SECRETS.get(name)


def counts(topics: Any) -> Mapping[str, int]:
    return {topic: 2 for topic in topics}


CONTEXT = SourceContext(bootstrap_servers="unused:9092", secrets=read_secret, partition_counts=counts)

BEARER_AUTH = {"bearerToken": {"secretName": "prom-token", "key": "token"}}
BASIC_AUTH = {"basicAuth": {"secretName": "burrow-login", "usernameKey": "user", "passwordKey": "password"}}

PROMETHEUS_ANSWER = {
    "status": "success",
    "data": {
        "resultType": "vector",
        "result": [{"metric": {"topic": "t", "partition": "1"}, "value": [0, "7"]}],
    },
}
BURROW_ANSWER = {
    "error": False,
    "status": {"status": "OK", "partitions": [{"topic": "t", "partition": 1, "current_lag": 7}]},
}


# -- the stand-in server -----------------------------------------------------------------------------


@dataclass
class Site:
    """What one server expects and answers, and what it saw."""

    expected_authorization: str | None = None
    redirect_to: str | None = None
    hold: threading.Event | None = None
    seen_authorization: list[str | None] = field(default_factory=list)

    def answer(self, path: str) -> tuple[int, Any]:
        if path == "/api/v1/query":
            return 200, PROMETHEUS_ANSWER
        if path == "/v3/kafka/main/consumer/g/lag":
            return 200, BURROW_ANSWER
        return 404, {"error": True, "message": "not found"}


def handler_for(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:
            site.seen_authorization.append(self.headers.get("Authorization"))
            if site.hold is not None:
                site.hold.wait(10)
            if site.redirect_to is not None:
                self.send_response(302)
                self.send_header("Location", site.redirect_to + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if site.expected_authorization is not None and (
                self.headers.get("Authorization") != site.expected_authorization
            ):
                self.send_json(
                    401,
                    {"status": "error", "error": "unauthorized"},
                    {"WWW-Authenticate": 'Basic realm="lag"'},
                )
                return
            self.send_json(*site.answer(urlparse(self.path).path))

    return Handler


Serve = Callable[..., str]


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (the timeout test) breaks the pipe of the late answer: expected."""


@pytest.fixture
def serve() -> Iterator[Serve]:
    """serve(site, tls=None) -> the base URL of a server on 127.0.0.1 answering as `site` says."""
    running: list[tuple[QuietServer, Site]] = []

    def start(site: Site, tls: ssl.SSLContext | None = None) -> str:
        httpd = QuietServer(("127.0.0.1", 0), handler_for(site))
        if tls is not None:
            httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        running.append((httpd, site))
        return f"{'https' if tls else 'http'}://127.0.0.1:{httpd.server_address[1]}"

    yield start
    for httpd, site in running:
        if site.hold is not None:
            site.hold.set()
        httpd.shutdown()
        httpd.server_close()


@dataclass(frozen=True)
class Certificates:
    ca_pem: bytes
    server: ssl.SSLContext


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """A throwaway CA and a certificate it signed for 127.0.0.1, made with the openssl command."""
    where = tmp_path_factory.mktemp("tls")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=where, check=True, capture_output=True, timeout=60)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=groupops unit-test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (where / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n"
    )
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.crt", "-days", "2", "-extfile", "server.ext",
    )  # fmt: skip
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(Path(where / "server.crt"), Path(where / "server.key"))
    return Certificates(ca_pem=(where / "ca.crt").read_bytes(), server=server)


def read(kind: str, url: str, context: SourceContext = CONTEXT, **settings: Any) -> LagSnapshot:
    spec = {"url": url, **({"cluster": "main"} if kind == "burrow" else {}), **settings}
    return build_lag_source(kind, spec, context).read("g", ["t"])


def assert_no_secret_in(text: str) -> None:
    for secret in NEVER_SHOWN:
        assert secret not in text


# -- credentials -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["prometheus", "burrow"])
@pytest.mark.parametrize(
    ("auth", "header"),
    [pytest.param(BEARER_AUTH, BEARER, id="bearer"), pytest.param(BASIC_AUTH, BASIC, id="basic")],
)
def test_the_credential_goes_in_the_authorization_header(
    serve: Serve, kind: str, auth: dict[str, Any], header: str
) -> None:
    site = Site(expected_authorization=header)
    snapshot = read(kind, serve(site), auth=auth)
    assert site.seen_authorization == [header]
    assert snapshot.lags == {"t": (0, 7)}


@pytest.mark.parametrize("kind", ["prometheus", "burrow"])
def test_a_refused_credential_names_the_auth_field_and_never_the_secret(
    serve: Serve, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = serve(Site(expected_authorization="Bearer another-token"))
    with pytest.raises(LagAuthorizationError) as caught:
        read(kind, url, auth=BEARER_AUTH)
    assert f"HTTP 401 from {url}" in str(caught.value)
    assert f"check lagSource.{kind}.auth" in str(caught.value)
    assert_no_secret_in(str(caught.value))
    assert_no_secret_in(caplog.text)


def test_a_server_asking_for_credentials_names_the_auth_field(serve: Serve) -> None:
    with pytest.raises(LagAuthorizationError, match=r"it asks for lagSource\.prometheus\.auth"):
        read("prometheus", serve(Site(expected_authorization=BEARER)))


def test_a_redirect_never_carries_the_credential_to_where_it_points(serve: Serve) -> None:
    """urllib copies ordinary headers to a redirect's target, another host included."""
    elsewhere = Site(expected_authorization=BEARER)
    here = Site(redirect_to=serve(elsewhere))
    with pytest.raises(LagAuthorizationError):
        read("burrow", serve(here), auth=BEARER_AUTH)
    assert here.seen_authorization == [BEARER]
    assert elsewhere.seen_authorization == [None]


def test_the_credential_is_kept_out_of_the_endpoints_repr() -> None:
    spec = {"url": "http://prometheus:9090", "auth": BASIC_AUTH}
    endpoint = endpoint_from_spec(spec, where="lagSource.prometheus", own_fields=(), secrets=read_secret)
    assert endpoint.authorization == BASIC
    assert_no_secret_in(repr(endpoint))


@pytest.mark.parametrize(
    ("auth", "message"),
    [
        pytest.param(
            {"bearerToken": {"secretName": "nope", "key": "token"}},
            "lagSource.prometheus.auth.bearerToken.secretName: "
            "Secret 'nope' not found in the policy's namespace",
            id="secret-missing",
        ),
        pytest.param(
            {"bearerToken": {"secretName": "prom-token", "key": "tokn"}},
            "lagSource.prometheus.auth.bearerToken.key: Secret 'prom-token' has no key 'tokn'",
            id="key-missing",
        ),
        pytest.param(
            {"basicAuth": {"secretName": "burrow-login", "usernameKey": "user", "passwordKey": "pw"}},
            "lagSource.prometheus.auth.basicAuth.passwordKey: Secret 'burrow-login' has no key 'pw'",
            id="password-key-missing",
        ),
        pytest.param(
            {"bearerToken": {"secretName": "empty", "key": "token"}},
            "lagSource.prometheus.auth.bearerToken.key: key 'token' of Secret 'empty' is empty",
            id="empty-value",
        ),
        pytest.param(
            {"bearerToken": {"secretName": "two-lines", "key": "token"}},
            "lagSource.prometheus.auth.bearerToken.key: key 'token' of Secret 'two-lines' holds control",
            id="line-break-in-the-value",
        ),
        pytest.param(
            {"bearerToken": {"secretName": "binary", "key": "token"}},
            "lagSource.prometheus.auth.bearerToken.key: key 'token' of Secret 'binary' is not UTF-8 text",
            id="not-text",
        ),
        pytest.param(
            {"basicAuth": {"secretName": "colon-user", "usernameKey": "user", "passwordKey": "password"}},
            "lagSource.prometheus.auth.basicAuth.usernameKey: "
            "the username in key 'user' of Secret 'colon-user'",
            id="colon-in-the-username",
        ),
        pytest.param(
            {**BEARER_AUTH, **BASIC_AUTH},
            "lagSource.prometheus.auth: set exactly one of bearerToken and basicAuth, not both",
            id="both",
        ),
        pytest.param(
            {},
            "lagSource.prometheus.auth: set exactly one of bearerToken and basicAuth, not neither",
            id="neither",
        ),
        pytest.param(
            {"bearer": {"secretName": "prom-token", "key": "token"}},
            "lagSource.prometheus.auth.bearer: unknown field; known: basicAuth, bearerToken",
            id="unknown-kind",
        ),
        pytest.param(
            {"bearerToken": {"secretName": "prom-token"}},
            "lagSource.prometheus.auth.bearerToken.key: required",
            id="key-not-given",
        ),
        pytest.param(
            {"bearerToken": {"secretName": 7, "key": "token"}},
            "lagSource.prometheus.auth.bearerToken.secretName: expected a non-empty string, got 7",
            id="name-not-a-string",
        ),
    ],
)
def test_a_bad_credential_reference_names_the_field_and_never_the_value(
    auth: dict[str, Any], message: str
) -> None:
    with pytest.raises(LagSourceConfigError) as caught:
        build_lag_source("prometheus", {"url": "http://prometheus:9090", "auth": auth}, CONTEXT)
    assert str(caught.value).startswith(message)
    assert_no_secret_in(str(caught.value))


def test_without_a_secret_reader_a_credential_is_refused() -> None:
    """Outside the operator (tools, the CLI) nothing reads Secrets."""
    without = SourceContext(bootstrap_servers="unused:9092", partition_counts=counts)
    with pytest.raises(LagSourceConfigError, match=r"^lagSource\.burrow\.auth\.bearerToken\.secretName: "):
        build_lag_source("burrow", {"url": "http://b:8000", "cluster": "c", "auth": BEARER_AUTH}, without)


def test_a_secret_the_operator_may_not_read_is_reported_on_the_field() -> None:
    def forbidden(name: str) -> Mapping[str, bytes] | None:
        raise LagSourceConfigError(f"the operator may not read Secret {name!r}: list it in kafkaAuthSecrets")

    context = SourceContext(bootstrap_servers="unused:9092", secrets=forbidden)
    with pytest.raises(LagSourceConfigError) as caught:
        build_lag_source("prometheus", {"url": "http://p:9090", "auth": BEARER_AUTH}, context)
    assert str(caught.value) == (
        "lagSource.prometheus.auth.bearerToken.secretName: the operator may not read Secret 'prom-token': "
        "list it in kafkaAuthSecrets"
    )


# -- TLS -------------------------------------------------------------------------------------------------


def with_ca(certificates: Certificates) -> SourceContext:
    secrets = {**SECRETS, "lag-ca": {"ca.crt": certificates.ca_pem}}
    return SourceContext(bootstrap_servers="unused:9092", secrets=secrets.get, partition_counts=counts)


CA = {"caSecret": {"name": "lag-ca", "key": "ca.crt"}}


@pytest.mark.parametrize("kind", ["prometheus", "burrow"])
def test_a_private_ca_makes_https_verify(serve: Serve, certificates: Certificates, kind: str) -> None:
    site = Site(expected_authorization=BEARER)
    url = serve(site, tls=certificates.server)
    snapshot = read(kind, url, with_ca(certificates), auth=BEARER_AUTH, tls=CA)
    assert snapshot.lags == {"t": (0, 7)}
    assert site.seen_authorization == [BEARER]


def test_without_the_ca_verification_fails_with_the_field_to_set(
    serve: Serve, certificates: Certificates
) -> None:
    site = Site(expected_authorization=BEARER)
    url = serve(site, tls=certificates.server)
    with pytest.raises(LagSourceUnavailable) as caught:
        read("prometheus", url, with_ca(certificates), auth=BEARER_AUTH)
    message = str(caught.value)
    assert message.startswith(f"TLS verification of {url}/api/v1/query failed: ")
    assert "lagSource.prometheus.tls.caSecret" in message
    assert site.seen_authorization == [], "no request may be sent over an unverified connection"


def test_https_to_a_plain_http_server_is_a_clear_tls_failure(
    serve: Serve, certificates: Certificates
) -> None:
    url = serve(Site()).replace("http://", "https://")
    with pytest.raises(LagSourceUnavailable, match=r"^TLS with https://127\.0\.0\.1:\d+/api/v1/query failed"):
        read("prometheus", url, with_ca(certificates), tls=CA)


@pytest.mark.parametrize(
    ("url", "tls", "message"),
    [
        pytest.param(
            "http://p:9090",
            CA,
            "lagSource.prometheus.tls: only used with an https:// lagSource.prometheus.url",
            id="tls-with-http",
        ),
        pytest.param(
            "https://p:9090",
            {"caSecret": {"name": "lag-ca", "key": "tls.crt"}},
            "lagSource.prometheus.tls.caSecret.key: Secret 'lag-ca' has no key 'tls.crt'",
            id="key-missing",
        ),
        pytest.param(
            "https://p:9090",
            {"caSecret": {"name": "not-pem", "key": "ca.crt"}},
            "lagSource.prometheus.tls.caSecret.key: "
            "key 'ca.crt' of Secret 'not-pem' holds no PEM certificate",
            id="not-a-certificate",
        ),
        pytest.param("https://p:9090", {}, "lagSource.prometheus.tls.caSecret: required", id="no-ca-secret"),
    ],
)
def test_a_bad_tls_setting_names_the_field(
    certificates: Certificates, url: str, tls: dict[str, Any], message: str
) -> None:
    with pytest.raises(LagSourceConfigError) as caught:
        build_lag_source("prometheus", {"url": url, "tls": tls}, with_ca(certificates))
    assert str(caught.value).startswith(message)


# -- time budget --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["prometheus", "burrow"])
def test_the_timeout_bounds_a_server_that_does_not_answer(serve: Serve, kind: str) -> None:
    url = serve(Site(hold=threading.Event()))
    started = time.monotonic()
    with pytest.raises(LagSourceUnavailable) as caught:
        read(kind, url, timeoutSeconds=0.3)
    assert time.monotonic() - started < 3.0
    assert f"within 0.3 s (lagSource.{kind}.timeoutSeconds)" in str(caught.value)
