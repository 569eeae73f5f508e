"""Where and how the HTTP lag sources (prometheus, burrow) reach their server: `url`,
`timeoutSeconds`, `auth` and `tls` of `lagSource.<type>`, parsed, validated and resolved into an
`Endpoint`, the Secrets they name read through `SourceContext.secrets`.

Who calls it: `from_spec` of lag/prometheus.py and lag/burrow.py, on every read (the operator
builds the source per read, so a rotated Secret is used from the next read on).

Spec (the CRD checks the shapes first; these checks repeat them and add the Secrets):

    url              http(s)://host[:port][/prefix], no credentials in it (they would show in
                     status): they go in `auth`
    timeoutSeconds   (0, 120], default 5: bound on connecting and on each read of the answer
    auth             exactly one of
      bearerToken: {secretName, key}                     Authorization: Bearer <value>
      basicAuth: {secretName, usernameKey, passwordKey}  Authorization: Basic base64(user:password)
    tls
      caSecret: {name, key}   a PEM bundle of the CA(s) that signed the server's certificate; it
                              replaces the system's CAs for this source; https URLs only

Values are stripped of surrounding whitespace (a Secret made with `--from-file` often ends in a
newline), as Prometheus does with its own credential files. Every problem is a
LagSourceConfigError naming the field (`lagSource.burrow.auth.basicAuth.passwordKey`) and, for a
Secret, its name and key; never a value.
"""

from __future__ import annotations

import base64
import ssl
import urllib.parse
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from groupops.lag.base import LagSourceConfigError, LagSourceUnavailable, SecretReader
from groupops.lag.httpget import get_json, join_url

__all__ = ["CONNECTION_FIELDS", "DEFAULT_TIMEOUT_S", "MAX_TIMEOUT_S", "Endpoint", "endpoint_from_spec"]

DEFAULT_TIMEOUT_S = 5.0
"""Seconds: a healthy Prometheus or Burrow answers in milliseconds; the reconcile waits 1 s for a
read and plans on what it knows meanwhile, so a slow source costs nothing but freshness."""
MAX_TIMEOUT_S = 120.0
"""The CRD's bound."""

CONNECTION_FIELDS = frozenset({"url", "timeoutSeconds", "auth", "tls"})
"""The fields of `lagSource.<type>` this module reads; each source adds its own."""

_AUTH_KINDS = ("bearerToken", "basicAuth")


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """A source's server: base URL, time budget, the spec object it came from (`where`:
    `lagSource.prometheus`, which messages name), the Authorization header's value (a secret:
    kept out of repr) and the TLS context (None: the system's CAs)."""

    url: str
    timeout_s: float
    where: str
    authorization: str | None = field(default=None, repr=False)
    tls: ssl.SSLContext | None = None

    def get_json(self, path: str, query: Mapping[str, str] | None = None) -> Any:
        """GET `path` under the base URL (errors: lag.httpget)."""
        return get_json(
            join_url(self.url, path, query),
            timeout=self.timeout_s,
            field=self.where,
            authorization=self.authorization,
            tls=self.tls,
        )


def endpoint_from_spec(
    spec: Mapping[str, Any], *, where: str, own_fields: Collection[str], secrets: SecretReader | None
) -> Endpoint:
    """The endpoint of `spec` (`lagSource.<type>`, named `where` in messages); `own_fields` are
    the source's other fields, so that anything else is refused as unknown."""
    known = CONNECTION_FIELDS | set(own_fields)
    for name in spec:
        if name not in known:
            raise LagSourceConfigError(f"{where}.{name}: unknown field; known: {', '.join(sorted(known))}")
    url = _url(spec.get("url"), where)
    timeout = spec.get("timeoutSeconds", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= MAX_TIMEOUT_S:
        raise LagSourceConfigError(
            f"{where}.timeoutSeconds: expected a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {timeout!r}"
        )
    authorization = None
    if spec.get("auth") is not None:
        authorization = _authorization(spec["auth"], f"{where}.auth", secrets)
    tls = None
    if spec.get("tls") is not None:
        if urllib.parse.urlsplit(url).scheme != "https":
            raise LagSourceConfigError(f"{where}.tls: only used with an https:// {where}.url")
        tls = _tls(spec["tls"], f"{where}.tls", secrets)
    return Endpoint(url=url, timeout_s=float(timeout), where=where, authorization=authorization, tls=tls)


def _url(url: Any, where: str) -> str:
    if not isinstance(url, str):
        raise LagSourceConfigError(f"{where}.url: expected an http(s) URL, got {url!r}")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise LagSourceConfigError(f"{where}.url: not a valid URL (its host or port)") from None
    if "@" in parts.netloc:
        # Not repeated: the URL holds a password.
        raise LagSourceConfigError(
            f"{where}.url: credentials in the URL would show in status; use {where}.auth.basicAuth"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LagSourceConfigError(f"{where}.url: expected an http(s) URL with a host, got {url!r}")
    return url


def _authorization(auth: Any, where: str, secrets: SecretReader | None) -> str:
    fields = _object(auth, where, optional=_AUTH_KINDS)
    chosen = [kind for kind in _AUTH_KINDS if fields.get(kind) is not None]
    if len(chosen) != 1:
        given = "both" if chosen else "neither"
        raise LagSourceConfigError(f"{where}: set exactly one of bearerToken and basicAuth, not {given}")
    kind = chosen[0]
    if kind == "bearerToken":
        ref = _strings(fields[kind], f"{where}.bearerToken", ("secretName", "key"))
        token = _credential(secrets, ref, f"{where}.bearerToken", "key")
        return f"Bearer {token}"
    ref = _strings(fields[kind], f"{where}.basicAuth", ("secretName", "usernameKey", "passwordKey"))
    username = _credential(secrets, ref, f"{where}.basicAuth", "usernameKey")
    password = _credential(secrets, ref, f"{where}.basicAuth", "passwordKey")
    if ":" in username:
        raise LagSourceConfigError(
            f"{where}.basicAuth.usernameKey: the username in key {ref['usernameKey']!r} of Secret "
            f"{ref['secretName']!r} contains ':', which basic authentication cannot carry"
        )
    pair = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
    return f"Basic {pair}"


def _tls(tls: Any, where: str, secrets: SecretReader | None) -> ssl.SSLContext:
    fields = _object(tls, where, required=("caSecret",))
    ref = _strings(fields["caSecret"], f"{where}.caSecret", ("name", "key"))
    data = _secret_value(secrets, ref["name"], ref["key"], f"{where}.caSecret.name", f"{where}.caSecret.key")
    problem = f"{where}.caSecret.key: key {ref['key']!r} of Secret {ref['name']!r}"
    try:
        pem = data.decode("ascii")
    except UnicodeDecodeError:
        raise LagSourceConfigError(f"{problem} is not a PEM certificate bundle") from None
    try:
        return ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError):
        raise LagSourceConfigError(f"{problem} holds no PEM certificate") from None


def _credential(secrets: SecretReader | None, ref: Mapping[str, str], where: str, key_field: str) -> str:
    """One credential from the Secret `ref` names: text, stripped, without control characters
    (they would break the header, or smuggle another one in)."""
    name, key = ref["secretName"], ref[key_field]
    raw = _secret_value(secrets, name, key, f"{where}.secretName", f"{where}.{key_field}")
    problem = f"{where}.{key_field}: key {key!r} of Secret {name!r}"
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise LagSourceConfigError(f"{problem} is not UTF-8 text") from None
    if not text:
        raise LagSourceConfigError(f"{problem} is empty")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise LagSourceConfigError(f"{problem} holds control characters (a line break?)")
    if key_field == "key" and not text.isascii():
        raise LagSourceConfigError(f"{problem} is not an ASCII token")
    return text


def _secret_value(
    secrets: SecretReader | None, name: str, key: str, name_field: str, key_field: str
) -> bytes:
    if secrets is None:
        raise LagSourceConfigError(
            f"{name_field}: Secrets are read by the operator only, from the policy's namespace"
        )
    try:
        data = secrets(name)
    except LagSourceConfigError as e:
        raise LagSourceConfigError(f"{name_field}: {e}") from e
    except LagSourceUnavailable as e:
        raise LagSourceUnavailable(f"{name_field}: {e}") from e
    if data is None:
        raise LagSourceConfigError(f"{name_field}: Secret {name!r} not found in the policy's namespace")
    value = data.get(key)
    if value is None:
        raise LagSourceConfigError(f"{key_field}: Secret {name!r} has no key {key!r}")
    return value


def _object(
    value: Any, where: str, *, required: Collection[str] = (), optional: Collection[str] = ()
) -> Mapping[str, Any]:
    known = (*required, *optional)
    if not isinstance(value, Mapping):
        raise LagSourceConfigError(f"{where}: expected an object with {', '.join(known)}")
    for name in value:
        if name not in known:
            raise LagSourceConfigError(f"{where}.{name}: unknown field; known: {', '.join(sorted(known))}")
    for name in required:
        if value.get(name) is None:
            raise LagSourceConfigError(f"{where}.{name}: required")
    return value


def _strings(value: Any, where: str, names: Collection[str]) -> dict[str, str]:
    """An object of the required non-empty strings `names` and nothing else."""
    fields = _object(value, where, required=names)
    for name in names:
        if not isinstance(fields[name], str) or not fields[name]:
            raise LagSourceConfigError(f"{where}.{name}: expected a non-empty string, got {fields[name]!r}")
    return {name: fields[name] for name in names}
