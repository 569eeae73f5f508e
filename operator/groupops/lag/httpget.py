"""One small HTTP GET for the sources that speak HTTP (prometheus, burrow), with their errors mapped.

Who calls it: `lag.endpoint.Endpoint.get_json`, which adds the source's time budget, credentials
and TLS context.

Foreign errors become this package's tree at this boundary (`raise ... from e`):
connection refused, DNS failure, timeout, HTTP 5xx and 429 -> LagSourceUnavailable (retried);
a certificate that does not verify, or no TLS where https was asked -> LagSourceUnavailable
naming the `tls` field (the source cannot be reached safely; the last plan keeps running);
HTTP 401/403 -> LagAuthorizationError naming the `auth` field; other 4xx and a body that is not
JSON -> LagSourceConfigError (the URL or query is wrong; retrying will not help).

What a remote server answered never goes into an error's message: messages reach the policy's
status, and a policy author must not be able to read internal services' answers back through
the operator (docs/design.md §13.3). The operator's log keeps an excerpt (`log_answer`).

Credentials go to the URL asked and nowhere else: urllib copies a request's headers to wherever a
redirect points, another host included, so the Authorization header is an *unredirected* one (a
redirected request arrives without it and is refused, which the source reports as a 401).
"""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from groupops.lag.base import LagAuthorizationError, LagSourceConfigError, LagSourceUnavailable

__all__ = ["HTTPStatusError", "get_json", "join_url", "log_answer"]

log = logging.getLogger(__name__)

_BODY_EXCERPT = 200
_SEE_LOG = "the operator's log has its answer"


def log_answer(where: str, what: str, answer: Any) -> None:
    """An excerpt of a remote answer for the operator's log only (never in a message)."""
    log.warning("%s from %s: %s", what, where, str(answer)[:_BODY_EXCERPT])


class HTTPStatusError(LagSourceConfigError):
    """A 4xx answer other than 401/403/429; `status` is the HTTP status code."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def join_url(base: str, path: str, query: Mapping[str, str] | None = None) -> str:
    url = base.rstrip("/") + "/" + path.lstrip("/")
    if query:
        url += "?" + urllib.parse.urlencode(query)
    return url


def get_json(
    url: str,
    *,
    timeout: float,
    field: str = "lagSource",
    authorization: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> Any:
    """GET `url` and decode its JSON body. `field` is the spec object the settings came from
    (`lagSource.prometheus`), named in messages; `authorization` the Authorization header's value
    (a secret: never in a message or the log); `tls` the context that verifies the server (None:
    the system's CAs). `where` in messages is the URL without its query."""
    where = url.split("?", 1)[0]
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if authorization is not None:
        request.add_unredirected_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=tls) as response:
            body = response.read()
    except urllib.error.HTTPError as e:
        log_answer(where, f"HTTP {e.code}", e.read()[:_BODY_EXCERPT].decode("utf-8", "replace"))
        if e.code in (401, 403):
            fix = f"check {field}.auth" if authorization is not None else f"it asks for {field}.auth"
            raise LagAuthorizationError(f"HTTP {e.code} from {where}: {fix}") from e
        if e.code >= 500 or e.code == 429:
            raise LagSourceUnavailable(f"HTTP {e.code} from {where} ({_SEE_LOG})") from e
        raise HTTPStatusError(f"HTTP {e.code} from {where} ({_SEE_LOG})", e.code) from e
    except ValueError:
        # http.client refuses a header value with a line break; the value is a credential, so
        # neither it nor the exception that quotes it goes anywhere (lag.endpoint checks first).
        raise LagSourceConfigError(f"{field}: the request to {where} could not be made") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        raise _unreachable(e, where, timeout=timeout, field=field) from e
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LagSourceConfigError(f"{where} did not answer JSON: is this the right URL?") from e


def _unreachable(error: Exception, where: str, *, timeout: float, field: str) -> LagSourceUnavailable:
    """What a failure to get an answer says: the verification that failed, the time budget, or
    the socket's reason (all from this side of the connection, never the server's words)."""
    reason: object = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(reason, ssl.SSLCertVerificationError):
        detail = reason.verify_message or reason.reason or "certificate verify failed"
        return LagSourceUnavailable(
            f"TLS verification of {where} failed: {detail} (a private CA goes in {field}.tls.caSecret)"
        )
    if isinstance(reason, ssl.SSLError):
        return LagSourceUnavailable(
            f"TLS with {where} failed: {reason.reason or 'handshake'} (does it serve https?)"
        )
    if isinstance(reason, TimeoutError):
        return LagSourceUnavailable(f"no answer from {where} within {timeout:g} s ({field}.timeoutSeconds)")
    if isinstance(reason, http.client.HTTPException):
        return LagSourceUnavailable(f"{where} did not answer HTTP ({type(reason).__name__})")
    return LagSourceUnavailable(f"cannot reach {where}: {reason}")
