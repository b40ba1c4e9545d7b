"""How long MLflow retries a request to the tracking server (``logger.retry_s``), and when a
run that lost its server stops waiting."""

from __future__ import annotations

import logging
import os

from hpml.errors import causes

log = logging.getLogger(__name__)

RETRY_S = 600.0  # a server restart or upgrade; longer outages fail the run, in one line
# urllib3 sleeps factor * 2**(n-1) s after the n-th failure in a row (0 after the first), at most
# Retry.DEFAULT_BACKOFF_MAX; MLflow takes integer factors only, and refuses more than 10 retries
# unless its internal limit variable is raised.
BACKOFF_FACTOR = 1
BACKOFF_MAX_S = 120.0
DEFAULT_RETRIES_LIMIT = 10
RETRIES_VARIABLE = "MLFLOW_HTTP_REQUEST_MAX_RETRIES"
_before_fail_fast: list[str | None] = []  # its value before fail_fast_if_server_gone zeroed it


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

    A metric logged while the server is away then waits and lands once it is back; a longer outage
    fails the run in one line instead of hanging. MLflow's HTTP client reads these variables at each
    request, so this covers every caller.
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

    gone = requests.exceptions.ConnectionError | requests.exceptions.RetryError
    return any(isinstance(e, gone) for e in causes(exc))


def fail_fast_if_server_gone(exc: BaseException) -> None:
    """Let a run that lost its server end now: once a request has waited out the retry window,
    what follows is tried once instead of waiting as long again."""
    if server_gone(exc) and not _before_fail_fast:
        _before_fail_fast.append(os.environ.get(RETRIES_VARIABLE))
        os.environ[RETRIES_VARIABLE] = "0"


def undo_fail_fast() -> None:
    """Give the next job in this process the retries it had before, whoever had set them."""
    if _before_fail_fast:
        value = _before_fail_fast.pop()
        if value is None:
            os.environ.pop(RETRIES_VARIABLE, None)
        else:
            os.environ[RETRIES_VARIABLE] = value
