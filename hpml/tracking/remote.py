"""Tracking servers fail fast and lose nothing: a bounded preflight, then retries sized by hpml.

Left to itself MLflow meets an unreachable ``http(s)://`` store with urllib3 retries (7, with
exponential backoff) and prints nothing for minutes; ``http://`` without a host hangs, and other
malformed URIs fail in a paragraph about the model registry. ``prepare`` runs before any run or
training starts: it checks the URI's form, sends one request with a short bound and no retries,
and sizes MLflow's own retries (``logger.retry_s``) so that a server that goes away mid-run (a
restart, a network blip) pauses the logging call until it is back instead of losing the metrics.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any, Protocol
from urllib.parse import urlparse

from hpml.errors import ConfigError
from hpml.tracking.redact import redact_text
from hpml.tracking.store import StoreError

log = logging.getLogger(__name__)

PREFLIGHT_TIMEOUT_S = 3.0  # the whole check, name lookup included; loopback answers in ms
RETRY_S = 600.0  # a server restart or upgrade; longer outages fail the run, in one line
PREFLIGHT_ENDPOINT = "/api/2.0/mlflow/experiments/search"  # any MLflow server, any auth plugin
VALID_URIS = (
    "sqlite:///path, http(s)://host:port, databricks[://profile] or a database URI "
    "(postgresql://host/db, mysql://..., mssql://...)"
)
DATABASES = ("postgresql", "mysql", "mssql")
# urllib3 sleeps factor * 2**(n-1) s after the n-th failure in a row (0 after the first), at most
# Retry.DEFAULT_BACKOFF_MAX; MLflow takes integer factors only, and refuses more than 10 retries
# unless its internal limit variable is raised.
BACKOFF_FACTOR = 1
BACKOFF_MAX_S = 120.0
DEFAULT_RETRIES_LIMIT = 10
RETRIES_VARIABLE = "MLFLOW_HTTP_REQUEST_MAX_RETRIES"
_before_fail_fast: list[str | None] = []  # its value before fail_fast_if_server_gone zeroed it


class TrackingServerError(StoreError):
    """The tracking server did not answer the preflight, or not as an MLflow server does."""


class TrackerSettings(Protocol):
    """What ``prepare`` reads from the ``logger`` group (``MlflowTracker``)."""

    tracking_uri: str
    retry_s: float | None
    preflight_timeout_s: float


def prepare(tracker: TrackerSettings) -> None:
    """Check the ``logger`` group's store before anything starts: form, reachability, retries.

    ``tracker`` is the ``logger`` config node or an ``MlflowTracker``: the check runs before
    Lightning and torch are imported, so a bad store answers within seconds of the command.

    Raises ConfigError (a malformed URI or setting) or TrackingServerError (a server that does
    not answer), each one line with any password in the URI masked.
    """
    _undo_fail_fast()  # a job before this one, in this process, lost its server
    timeout_s = getattr(tracker, "preflight_timeout_s", PREFLIGHT_TIMEOUT_S)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
        raise ConfigError("logger.preflight_timeout_s", timeout_s, "seconds > 0")
    retry_s = getattr(tracker, "retry_s", RETRY_S)
    if retry_s is not None and (
        isinstance(retry_s, bool) or not isinstance(retry_s, int | float) or retry_s < 0
    ):
        raise ConfigError("logger.retry_s", retry_s, "seconds >= 0, or null for MLflow's own")
    if check_uri(tracker.tracking_uri) in ("http", "https"):
        redact_logs()
        if retry_s is not None:
            configure_retries(retry_s)
    preflight(tracker.tracking_uri, timeout_s)


def check_uri(tracking_uri: str) -> str:
    """The scheme of ``tracking_uri`` if MLflow can keep runs there, else a one-line ConfigError.

    An in-memory SQLite store is refused too: its runs vanish when the process ends.
    """

    def invalid(hint: str = "") -> ConfigError:
        return ConfigError("logger.tracking_uri", redact_text(str(tracking_uri)), VALID_URIS + hint)

    if not isinstance(tracking_uri, str) or not tracking_uri.strip():
        raise invalid()
    try:
        parsed = urlparse(tracking_uri)
        parsed.port  # noqa: B018 -- raises ValueError on a port that is not a number
    except ValueError:
        raise invalid() from None
    scheme = "databricks" if tracking_uri == "databricks" else parsed.scheme.lower()
    if scheme in ("http", "https"):
        if not parsed.hostname:
            raise invalid()
    elif scheme == "sqlite":
        path = tracking_uri[len("sqlite:///") :].split("?")[0]
        if not tracking_uri.startswith("sqlite:///") or path in ("", ":memory:"):
            raise invalid(" (an in-memory store keeps nothing)")
    elif scheme.split("+")[0] in DATABASES:
        if not parsed.netloc:
            raise invalid()
    elif scheme in ("", "file"):
        if os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() not in ("true", "1"):
            raise invalid(" (MLflow 3 refuses file stores unless MLFLOW_ALLOW_FILE_STORE=true)")
    elif scheme != "databricks":
        hint = ""
        if re.fullmatch(r"[\w.-]+:\d+(/.*)?", tracking_uri):
            hint = f" (did you mean http://{redact_text(tracking_uri)}?)"
        raise invalid(hint)
    return scheme


def preflight(tracking_uri: str, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> None:
    """One request to an ``http(s)://`` store, without retries, answered within ``timeout_s``.

    The request runs in a daemon thread so the bound holds whatever blocks (a name lookup is not
    covered by socket timeouts). Other stores are checked for form only: SQLite is a local file
    and databricks and databases go through their own clients.
    """
    if check_uri(tracking_uri) not in ("http", "https"):
        return
    outcome: list[str | None] = []
    worker = threading.Thread(
        target=lambda: outcome.append(_probe(tracking_uri, timeout_s)),
        name="hpml-preflight",
        daemon=True,
    )
    worker.start()
    worker.join(timeout_s)
    problem = outcome[0] if outcome else f"no answer within {timeout_s:g} s"
    if problem is not None:
        raise TrackingServerError(
            f"tracking server {redact_text(tracking_uri)} is unreachable: {problem} (one request, "
            f"limit logger.preflight_timeout_s={timeout_s:g} s); start it or set "
            "logger.tracking_uri"
        )


def _probe(tracking_uri: str, timeout_s: float) -> str | None:
    """None if an MLflow server answered, else why not, in a few words (never raises)."""
    try:
        from mlflow.utils.credentials import get_default_host_creds
        from mlflow.utils.rest_utils import http_request

        response = http_request(
            get_default_host_creds(tracking_uri),
            PREFLIGHT_ENDPOINT,
            "GET",
            max_retries=0,
            backoff_factor=0,
            backoff_jitter=0,
            timeout=timeout_s,
            raise_on_status=False,
            params={"max_results": 1},
        )
    except Exception as exc:
        return _reason(exc, timeout_s)
    code = response.status_code
    if code in (401, 403):
        return (
            f"HTTP {code}, the credentials were refused (MLFLOW_TRACKING_USERNAME and "
            "MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN)"
        )
    if code != 200 or not _is_mlflow_answer(response):
        return f"HTTP {code} for {PREFLIGHT_ENDPOINT}, not an MLflow tracking server"
    return None


def _is_mlflow_answer(response: Any) -> bool:
    try:
        return isinstance(response.json(), dict)
    except ValueError:
        return False


def _reason(exc: BaseException, timeout_s: float) -> str:
    """The cause at the bottom of MLflow's and requests' wrapping, as a user would say it."""
    import requests

    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    text = " ".join(str(e) for e in chain)
    if any(isinstance(e, requests.exceptions.Timeout) for e in chain):
        return f"no answer within {timeout_s:g} s"
    if any(isinstance(e, requests.exceptions.SSLError) for e in chain):
        return "TLS failed (see MLFLOW_TRACKING_SERVER_CERT_PATH, MLFLOW_TRACKING_INSECURE_TLS)"
    if "Connection refused" in text:
        return "connection refused"
    if re.search(
        r"Name or service not known|nodename nor servname|name resolution|"
        r"NameResolutionError|No address associated",
        text,
    ):
        return "host name not found"
    if any(isinstance(e, requests.exceptions.ConnectionError) for e in chain):
        return "cannot connect"
    return redact_text(" ".join(str(chain[-1]).split()))[:200] or type(chain[-1]).__name__


def retry_window_s(retries: int) -> float:
    """Seconds MLflow waits between ``retries`` retries of one request (jitter aside)."""
    return sum(
        0.0 if n <= 1 else min(BACKOFF_MAX_S, BACKOFF_FACTOR * 2.0 ** (n - 1))
        for n in range(1, retries + 1)
    )


def retries_for(retry_s: float) -> int:
    """The fewest retries whose waits add up to ``retry_s`` seconds (0: fail at once)."""
    retries = 0
    while retry_window_s(retries) < retry_s:
        retries += 1
    return retries


def configure_retries(retry_s: float) -> int:
    """Make MLflow retry every request to the server for about ``retry_s`` seconds.

    A metric logged while the server is away then waits (training pauses) and lands once it is
    back; an outage longer than the window fails the run in one line instead of hanging. Applies
    to Lightning's logger, hpml's own calls and MLflow's system-metrics thread alike, since all go
    through MLflow's HTTP client, which reads these variables at each request.
    """
    retries = retries_for(retry_s)
    try:
        from mlflow.environment_variables import _MLFLOW_HTTP_REQUEST_MAX_RETRIES_LIMIT as limit
    except ImportError:  # a newer MLflow without the internal limit: stay under its default
        limit = None
        if retries > DEFAULT_RETRIES_LIMIT:
            log.warning(
                "logger.retry_s=%g: MLflow allows %d retries, about %g s",
                retry_s,
                DEFAULT_RETRIES_LIMIT,
                retry_window_s(DEFAULT_RETRIES_LIMIT),
            )
            retries = DEFAULT_RETRIES_LIMIT
    if limit is not None and retries > limit.get():
        os.environ[limit.name] = str(retries)
    os.environ[RETRIES_VARIABLE] = str(retries)
    os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] = str(BACKOFF_FACTOR)
    log.debug("MLflow HTTP retries: %d, waiting up to %g s", retries, retry_window_s(retries))
    return retries


def server_gone(exc: BaseException) -> bool:
    """Whether ``exc`` is a request to the server that failed after all its retries."""
    import requests

    seen: BaseException | None = exc
    for _ in range(20):  # MLflow, Lightning and hpml each wrap it once or twice
        if seen is None:
            return False
        if isinstance(seen, requests.exceptions.ConnectionError | requests.exceptions.RetryError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def fail_fast_if_server_gone(exc: BaseException) -> None:
    """Let a run that lost its server end now, not after one more retry window per record.

    Once a request has waited out ``logger.retry_s``, the failure tag, traceback, job log and
    final status that follow would each wait as long again; they are tried once instead.
    """
    if server_gone(exc) and not _before_fail_fast:
        _before_fail_fast.append(os.environ.get(RETRIES_VARIABLE))
        os.environ[RETRIES_VARIABLE] = "0"


def _undo_fail_fast() -> None:
    """Give the next job in this process the retries it had before, whoever had set them."""
    if _before_fail_fast:
        value = _before_fail_fast.pop()
        if value is None:
            os.environ.pop(RETRIES_VARIABLE, None)
        else:
            os.environ[RETRIES_VARIABLE] = value


class RedactingFilter(logging.Filter):
    """Masks URI credentials in what a handler writes, tracebacks included.

    MLflow's own messages carry the tracking URI whole (``API request to
    http://user:password@host/... failed``): while a server is away they reach the terminal
    through its system-metrics warnings and hpml's "could not record" lines.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact_text(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
        return True


def redact_logs() -> None:
    """Put a RedactingFilter on the handlers of the root and ``mlflow`` loggers (once each)."""
    for logger in (logging.getLogger(), logging.getLogger("mlflow")):
        for handler in logger.handlers:
            if not any(isinstance(f, RedactingFilter) for f in handler.filters):
                handler.addFilter(RedactingFilter())
