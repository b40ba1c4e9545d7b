"""Tracking servers fail fast and lose nothing: a bounded preflight, then retries sized by hpml.

:func:`prepare` runs before any run starts: it checks the URI's form, asks the server within a
short bound whether it answers and whether it takes this client's runs (:mod:`access`), and
sizes MLflow's retries so a server that goes away mid-run pauses the logging call until it is
back instead of losing the metrics.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Protocol
from urllib.parse import urlparse

from hpml.errors import ConfigError, causes
from hpml.ranges import Range
from hpml.tracking.access import Refusal, credentials_refusal, write_refusal
from hpml.tracking.redact import redact_logs, redact_text
from hpml.tracking.refused import quiet_refused_writes
from hpml.tracking.retries import RETRY_S, configure_retries, undo_fail_fast
from hpml.tracking.store import StoreError

PREFLIGHT_TIMEOUT_S = 3.0  # the whole check, name lookup included; loopback answers in ms
# A job of a sweep asks a store its sweep's parent run already reached: silence there is far
# likelier a server busy with the other jobs (a joblib pool on a crowded machine, a SLURM array
# starting at once) than a missing one, so its bound is this many times the first contact's.
SWEEP_JOB_PATIENCE = 10
PREFLIGHT_ENDPOINT = "/api/2.0/mlflow/experiments/search"  # any MLflow server, any auth plugin
VALID_URIS = (
    "sqlite:///path, http(s)://host:port, databricks[://profile] or a database URI "
    "(postgresql://host/db, mysql://..., mssql://...)"
)
DATABASES = ("postgresql", "mysql", "mssql")


class TrackingServerError(StoreError):
    """The tracking server did not answer the preflight, or not as an MLflow server does."""


class TrackerSettings(Protocol):
    """What ``prepare`` reads from the ``logger`` group (``MlflowTracker``)."""

    tracking_uri: str
    retry_s: float | None
    preflight_timeout_s: float
    experiment_name: str  # read if present: whether this client may write there


def prepare(tracker: TrackerSettings, patience: float = 1) -> None:
    """Check the ``logger`` group's store before torch is imported: form, reachability, retries.

    Args:
        tracker: the ``logger`` config node or an ``MlflowTracker``.
        patience: multiplies ``preflight_timeout_s`` (``SWEEP_JOB_PATIENCE`` for a sweep's jobs).

    Raises:
        ConfigError: a malformed URI or setting, or a database URI whose driver is missing.
        TrackingServerError: a server that does not answer (the URI's password masked).
    """
    undo_fail_fast()  # a job before this one, in this process, lost its server
    timeout_s = getattr(tracker, "preflight_timeout_s", PREFLIGHT_TIMEOUT_S)
    if not Range(gt=0).accepts(timeout_s):
        raise ConfigError("logger.preflight_timeout_s", timeout_s, "seconds > 0")
    retry_s = getattr(tracker, "retry_s", RETRY_S)
    if not Range(ge=0, null="MLflow's own").accepts(retry_s):
        raise ConfigError("logger.retry_s", retry_s, "seconds >= 0, or null for MLflow's own")
    scheme = check_uri(tracker.tracking_uri)
    database = scheme.split("+")[0]
    if scheme in ("http", "https"):
        redact_logs()
        quiet_refused_writes()
        if retry_s is not None:
            configure_retries(retry_s)
    elif database in DATABASES and (missing := missing_driver(tracker.tracking_uri)):
        raise ConfigError(
            "logger.tracking_uri",
            redact_text(tracker.tracking_uri),
            f"a database URI whose driver is installed, but {missing}; install it, or "
            f"name an installed driver ({database}+<driver>://...)",
        )
    preflight(tracker.tracking_uri, timeout_s * patience, getattr(tracker, "experiment_name", None))


def check_uri(tracking_uri: str) -> str:
    """The scheme of ``tracking_uri`` if MLflow can keep runs there (not in memory), else a
    one-line ConfigError."""

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
    elif scheme == "sqlite":  # sqlite:///<file>: no host, and a file (else it is in memory)
        if parsed.netloc or parsed.path.strip("/") in ("", ":memory:"):
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


def missing_driver(tracking_uri: str) -> str | None:
    """What database URI ``tracking_uri`` lacks to connect, as SQLAlchemy (MLflow's engine)
    resolves its driver: ``the Python module psycopg is not installed``; None if nothing."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        make_url(tracking_uri).get_dialect().import_dbapi()
    except ModuleNotFoundError as exc:
        return f"the Python module {exc.name} is not installed"
    except (ArgumentError, NoSuchModuleError) as exc:
        return f"SQLAlchemy has no such driver ({exc})"
    return None


def preflight(
    tracking_uri: str, timeout_s: float = PREFLIGHT_TIMEOUT_S, experiment_name: str | None = None
) -> None:
    """Requests to an ``http(s)://`` store, without retries, answered within ``timeout_s`` all
    together (in a daemon thread, so the bound holds even for a name lookup): one where the
    server takes the client's credentials, then (``experiment_name`` given, the basic-auth app
    running) who the user is and whether they may write there. Other stores are checked for
    form only."""
    if check_uri(tracking_uri) not in ("http", "https"):
        return
    # imported here, outside the bound: on a crowded machine these imports alone can take
    # seconds, and the limit is for the server's answer
    import mlflow.utils.rest_utils  # noqa: F401
    import requests  # noqa: F401

    outcome: list[str | Refusal | None] = []
    worker = threading.Thread(
        target=lambda: outcome.append(probe(tracking_uri, timeout_s, experiment_name)),
        name="hpml-preflight",
        daemon=True,
    )
    worker.start()
    worker.join(timeout_s)
    problem = outcome[0] if outcome else f"no answer within {timeout_s:g} s"
    if isinstance(problem, Refusal):
        raise TrackingServerError(
            f"tracking server {redact_text(tracking_uri)} {problem.reason} (asked before any "
            f"run, limit logger.preflight_timeout_s={timeout_s:g} s); {problem.fix}"
        )
    if problem is not None:
        raise TrackingServerError(
            f"tracking server {redact_text(tracking_uri)} is unreachable: {problem} (one request, "
            f"limit logger.preflight_timeout_s={timeout_s:g} s); start it or set "
            "logger.tracking_uri"
        )


def probe(
    tracking_uri: str, timeout_s: float, experiment_name: str | None = None
) -> str | Refusal | None:
    """None if an MLflow server answered and takes this client's runs in ``experiment_name``
    (if given); else why not: a few words for a server that did not answer as one, a
    :class:`Refusal` for one that will not take the runs (never raises)."""
    try:
        from mlflow.utils.credentials import get_default_host_creds
        from mlflow.utils.rest_utils import http_request

        creds = get_default_host_creds(tracking_uri)

        def request(endpoint: str, params: dict[str, str]):
            return http_request(
                creds,
                endpoint,
                "GET",
                max_retries=0,
                backoff_factor=0,
                backoff_jitter=0,
                timeout=timeout_s,
                raise_on_status=False,
                params=params,
            )

        response = request(PREFLIGHT_ENDPOINT, {"max_results": "1"})
        code = response.status_code
        if code == 401:
            return credentials_refusal(tracking_uri, creds)
        if code == 403:
            return (
                "HTTP 403, the credentials were refused (MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN)"
            )
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if code != 200 or not isinstance(answer, dict):
            return f"HTTP {code} for {PREFLIGHT_ENDPOINT}, not an MLflow tracking server"
        return write_refusal(request, experiment_name) if experiment_name else None
    except Exception as exc:
        return _reason(exc, timeout_s)


def _reason(exc: BaseException, timeout_s: float) -> str:
    """The cause at the bottom of MLflow's and requests' wrapping, as a user would say it."""
    import requests
    import urllib3

    chain = causes(exc)
    text = " ".join(str(e) for e in chain)
    # with retries off, urllib3 wraps a read timeout in MaxRetryError and requests turns that
    # into a plain ConnectionError: the timeout is found further down the chain (not urllib3's
    # TimeoutError: a refused connection, NewConnectionError, is one of its subclasses)
    timeouts = (requests.exceptions.Timeout, urllib3.exceptions.ReadTimeoutError)
    if any(isinstance(e, timeouts) for e in chain):
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
