"""Who may write to a tracking server, asked before a run starts: credentials missing, credentials
refused, and a user who may read an experiment but not write to it, each told apart.

MLflow's basic-auth app (``mlflow server --app-name basic-auth``, ``make server AUTH=true``)
answers 401 to a request without valid credentials, and its REST API says who the caller is and
what they may do on an experiment without writing anything. A server without that app answers
404 there and is asked nothing more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple
from urllib.parse import urlparse

USERNAME, PASSWORD, TOKEN = (
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
)
# MLflow's basic-auth routes (GET_CURRENT_USER and GET_USER_PERMISSION of
# mlflow.server.auth.routes, which imports the server itself)
CURRENT_USER = "/api/2.0/mlflow/users/current"
USER_PERMISSION = "/api/3.0/mlflow/users/permissions/get"
EXPERIMENT_BY_NAME = "/api/2.0/mlflow/experiments/get-by-name"
# the permissions under which MLflow lets a user create runs in an experiment (``can_update``)
WRITERS = ("EDIT", "MANAGE")
GRANT_HINT = "python -m hpml.tracking.users"  # the command docs/scale-out.md shows

Request = Callable[[str, dict[str, str]], Any]  # (endpoint, params) -> requests.Response


class Refusal(NamedTuple):
    """Why a server will not take this client's runs, and what would fix it."""

    reason: str
    fix: str


def credentials_refusal(tracking_uri: str, creds: Any) -> Refusal:
    """What a 401 means for this client: no credentials given, or the ones given refused.

    Args:
        creds: MLflow's ``MlflowHostCreds`` for ``tracking_uri`` (never shown: the password).
    """
    if creds.token:
        return Refusal(f"refused the token in {TOKEN} (HTTP 401)", f"check {TOKEN}")
    if creds.username and creds.password:
        return Refusal(
            f"refused user {creds.username!r} with the password given (HTTP 401)",
            f"check {USERNAME} and {PASSWORD}, or ask the server's admin for an account",
        )
    if urlparse(tracking_uri).username:
        return Refusal(
            "refused the credentials in logger.tracking_uri (HTTP 401)",
            f"check them, or set {USERNAME} and {PASSWORD} instead",
        )
    half = ""
    if creds.username or creds.password:
        given, missing = (USERNAME, PASSWORD) if creds.username else (PASSWORD, USERNAME)
        half = f"; {given} is set, {missing} is not"
    return Refusal(
        f"wants credentials and none were given (HTTP 401{half})",
        f"set {USERNAME} and {PASSWORD} in the environment",
    )


def write_refusal(request: Request, experiment_name: str) -> Refusal | None:
    """Whether the current user may write to experiment ``experiment_name``, asked by reads
    only: None if they may, if the server has no basic-auth app, or if the experiment does not
    exist yet (its creator may write to it). Answers the server gives that are not clear leave
    the question to the run itself."""
    current = request(CURRENT_USER, {})
    if current.status_code != 200:
        return None
    user = _json(current).get("user") or {}
    username = user.get("username")
    if not username or user.get("is_admin"):
        return None
    found = request(EXPERIMENT_BY_NAME, {"experiment_name": experiment_name})
    fix = (
        f"ask someone with MANAGE on it to grant EDIT ({GRANT_HINT}), or set "
        "logger.experiment_name to another experiment"
    )
    if found.status_code == 403:
        return Refusal(
            f"lets user {username!r} neither read nor write experiment {experiment_name!r}", fix
        )
    experiment = _json(found).get("experiment") or {}
    if found.status_code != 200 or "experiment_id" not in experiment:
        return None
    answer = request(
        USER_PERMISSION,
        {
            "username": username,
            "resource_type": "experiment",
            "resource_id": str(experiment["experiment_id"]),
        },
    )
    permission = _json(answer).get("permission") if answer.status_code == 200 else None
    if permission is None or permission in WRITERS:
        return None
    return Refusal(
        f"lets user {username!r} read experiment {experiment_name!r} but not write to it "
        f"(its permission there: {permission}; a run needs {' or '.join(WRITERS)})",
        fix,
    )


def _json(response: Any) -> dict:
    """The response's JSON object, or an empty one."""
    try:
        answer = response.json()
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}
