"""One small HTTP GET for the sources that speak HTTP (prometheus, burrow), with their errors mapped.

Foreign errors become this package's tree at this boundary (`raise ... from e`):
connection refused, DNS failure, timeout, HTTP 5xx -> LagSourceUnavailable (retried);
HTTP 401/403 -> LagAuthorizationError; other 4xx and a body that is not JSON -> LagSourceConfigError
(the URL or query is wrong; retrying will not help).

What a remote server answered never goes into an error's message: messages reach the policy's
status, and a policy author must not be able to read internal services' answers back through
the operator (docs/design.md §13.3). The operator's log keeps an excerpt (`log_answer`).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from groupops.lag.base import LagAuthorizationError, LagSourceConfigError, LagSourceUnavailable

__all__ = ["HTTPStatusError", "get_json", "join_url", "log_answer"]

log = logging.getLogger(__name__)

_BODY_EXCERPT = 200
_SEE_LOG = " (the operator's log has its answer)"


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


def get_json(url: str, *, timeout: float, headers: Mapping[str, str] | None = None) -> Any:
    """GET `url` and decode its JSON body. `where` in messages is the URL without its query."""
    where = url.split("?", 1)[0]
    request = urllib.request.Request(url, headers={"Accept": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as e:
        log_answer(where, f"HTTP {e.code}", e.read()[:_BODY_EXCERPT].decode("utf-8", "replace"))
        if e.code in (401, 403):
            raise LagAuthorizationError(f"HTTP {e.code} from {where}: check the credentials") from e
        if e.code >= 500 or e.code == 429:
            raise LagSourceUnavailable(
                f"HTTP {e.code} from {where} (the operator's log has its answer)"
            ) from e
        raise HTTPStatusError(
            f"HTTP {e.code} from {where} (the operator's log has its answer)", e.code
        ) from e
    except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
        reason = getattr(e, "reason", e)
        raise LagSourceUnavailable(f"cannot reach {where}: {reason}") from e
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LagSourceConfigError(f"{where} did not answer JSON: is this the right URL?") from e
