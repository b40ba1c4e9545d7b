"""``python -m hpml.tracking.users USER PERMISSION EXPERIMENT``: give a team member a permission
on an experiment of a server running MLflow's basic-auth app (``make server AUTH=true``).

As an admin (``MLFLOW_TRACKING_USERNAME`` and ``MLFLOW_TRACKING_PASSWORD`` in the environment),
through MLflow's own auth client: creates the user if the server has none of that name (their
password asked without echo, or read as one line from a pipe: never an argument, so never in
shell history or a process list), creates the experiment if it does not exist yet, then grants
the permission, replacing the one the user had there.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys

PERMISSIONS = ("READ", "USE", "EDIT", "MANAGE", "NO_PERMISSIONS")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m hpml.tracking.users",
        description="Create a user (if new) and grant them a permission on an experiment.",
    )
    parser.add_argument("user", help="the user's name")
    parser.add_argument("permission", choices=PERMISSIONS, help="EDIT lets them log runs")
    parser.add_argument("experiment", help="the experiment's name (created if missing)")
    parser.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI"),
        help="the server (default: MLFLOW_TRACKING_URI)",
    )
    args = parser.parse_args(argv)
    if not args.tracking_uri or not args.tracking_uri.startswith(("http://", "https://")):
        parser.error("--tracking-uri http(s)://host:port (or MLFLOW_TRACKING_URI) is needed")
    return args


def new_password(user: str) -> str:
    """The new user's password: asked on a terminal, else the first line of stdin."""
    if sys.stdin.isatty():
        return getpass.getpass(f"password for {user} (12 characters or more): ")
    return sys.stdin.readline().rstrip("\n")


def main(argv: list[str] | None = None) -> int:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from mlflow.server import get_app_client

    from hpml.tracking.redact import redact_text

    args = parse(argv)
    uri = args.tracking_uri
    auth = get_app_client("basic-auth", tracking_uri=uri)
    try:
        try:
            auth.get_user(args.user)
            created = ""
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            auth.create_user(args.user, new_password(args.user))
            created = "new "
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name(args.experiment)
        experiment_id = (
            experiment.experiment_id if experiment else client.create_experiment(args.experiment)
        )
        grant = (args.user, "experiment", experiment_id)
        try:
            auth.grant_user_permission(*grant, args.permission)
        except MlflowException as exc:  # MLflow grants once: a new permission replaces the old
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            auth.revoke_user_permission(*grant)
            auth.grant_user_permission(*grant, args.permission)
    except MlflowException as exc:
        print(f"hpml: error: {redact_text(' '.join(exc.message.split()))}", file=sys.stderr)
        return 1
    print(
        f"hpml: {created}user {args.user} has {args.permission} on experiment "
        f"{args.experiment!r} (id {experiment_id}) at {redact_text(uri)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
