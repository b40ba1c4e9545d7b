"""Secrets never reach MLflow or the terminal: credentials in URIs and secret-named values are
masked before they are logged, as anyone who can open the tracking server reads them."""

from __future__ import annotations

import logging
import re
from typing import Any

MASK = "***"
# names of keys or environment variables that hold secrets (HF_TOKEN, db_password)
SECRET_NAME = re.compile(
    r"token|passw|secret|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"credential|auth",
    re.IGNORECASE,
)
URI_CREDENTIALS = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^\s/@]+@", re.IGNORECASE)
ENV_REFERENCE = re.compile(r"oc\.env:\s*([A-Za-z_][A-Za-z0-9_]*)")


def redact_text(text: str) -> str:
    """``scheme://user:password@host`` -> ``scheme://***@host`` anywhere in ``text``."""
    return URI_CREDENTIALS.sub(rf"\g<scheme>{MASK}@", text)


def redact_config(resolved: Any, raw: Any) -> Any:
    """``resolved`` with secret-named keys, values read from secret-named environment variables
    (seen in the unresolved ``raw`` tree) and URI credentials masked."""
    if isinstance(resolved, dict):
        raw = raw if isinstance(raw, dict) else {}
        return {
            key: MASK if SECRET_NAME.search(str(key)) else redact_config(value, raw.get(key))
            for key, value in resolved.items()
        }
    if isinstance(resolved, list):
        raw = raw if isinstance(raw, list) and len(raw) == len(resolved) else [None] * len(resolved)
        return [redact_config(value, r) for value, r in zip(resolved, raw, strict=True)]
    if isinstance(raw, str) and any(SECRET_NAME.search(n) for n in ENV_REFERENCE.findall(raw)):
        return MASK
    return redact_text(resolved) if isinstance(resolved, str) else resolved


class RedactingFilter(logging.Filter):
    """Masks URI credentials in what a handler writes, tracebacks included: MLflow's own
    messages carry the tracking URI whole."""

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
