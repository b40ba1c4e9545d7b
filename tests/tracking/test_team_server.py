"""A team's tracking server as docs/scale-out.md sets it up: ``make server AUTH=true`` with users
and per-experiment permissions, its runs in a private PostgreSQL cluster where PostgreSQL is
installed (SQLite where not), many jobs writing at once, a restart mid-run.

One server and one cluster serve the whole file (each takes seconds to start, and this file runs
on one test worker): each test keeps to experiments of its own."""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow import MlflowClient

from hpml.tracking import users
from hpml.tracking.access import PASSWORD, USERNAME
from tests.conftest import QUICK, REPO, run_cli, stderr_lines
from tests.servers import AuthServer, PostgresCluster, postgres_missing
from tests.tracking.outage import (
    assert_no_metric_lost,
    finish,
    restart_mid_run,
    start_gated_run,
    wait_for,
)

pytestmark = pytest.mark.slow

# fresh each session, so that finding one anywhere is a leak and not a coincidence
PASSWORDS = {user: secrets.token_urlsafe(12) for user in ("admin", "alice", "bob", "carol")}
# (user, permission, experiment), made by the documented command as the fixture starts
GRANTS = (("alice", "EDIT", "team"), ("bob", "READ", "team"), ("carol", "EDIT", "withdrawn"))


@contextlib.contextmanager
def credentials(user: str | None, password: str | None = None) -> Iterator[None]:
    """This process's (and the runs it starts') MLFLOW_TRACKING_USERNAME and _PASSWORD for the
    block; None unsets one."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in ((USERNAME, user), (PASSWORD, password)):
            if value is None:
                patch.delenv(name, raising=False)
            else:
                patch.setenv(name, value)
        yield


def as_user(user: str) -> contextlib.AbstractContextManager[None]:
    return credentials(user, PASSWORDS[user])


def grant(uri: str, user: str, permission: str, experiment: str) -> str:
    """``python -m hpml.tracking.users`` as an admin runs it, in-process, the user's password
    piped in; what it printed."""
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        patch.setattr(sys, "stdin", io.StringIO(PASSWORDS[user] + "\n"))
        assert users.main([user, permission, experiment, "--tracking-uri", uri]) == 0
    return printed.getvalue()


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresCluster | None]:
    """The file's PostgreSQL cluster; None where none can run (postgres_missing says why)."""
    if postgres_missing() is not None:
        yield None
        return
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def needs_postgres(cluster: PostgresCluster | None) -> PostgresCluster:
    if cluster is None:
        pytest.skip(postgres_missing())
    return cluster


@pytest.fixture(scope="module")
def team(
    tmp_path_factory: pytest.TempPathFactory,
    store_template: Path,
    postgres: PostgresCluster | None,
) -> Iterator[AuthServer]:
    """``make server AUTH=true`` (DB= the cluster's database), its users made by the documented
    command: ``granted`` holds what that printed."""
    db = postgres.database("mlflow") if postgres is not None else None
    server = AuthServer(tmp_path_factory.mktemp("team"), store_template, PASSWORDS["admin"], db)
    try:
        server.start()
        with as_user("admin"):
            server.granted = [grant(server.uri, *row) for row in GRANTS]
        yield server
    finally:
        server.stop()


def runs_of(uri: str, experiment: str) -> list:
    with as_user("admin"):
        client = MlflowClient(uri)
        found = client.get_experiment_by_name(experiment)
        return client.search_runs([found.experiment_id]) if found else []


def make_server(*variables: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    # subprocess: `make server` is the documented command, refusals and exit status included
    return subprocess.run(
        [
            *("make", "--no-print-directory", "-C", str(REPO), "-o", ".venv/.installed"),
            *("server", f"BIN={Path(sys.executable).parent}", "AUTH=true", *variables),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_make_server_refuses_auth_without_the_admins_password_in_the_environment():
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_AUTH_ADMIN_PASSWORD"}
    missing = make_server(env=env)
    assert missing.returncode != 0
    [line] = [x for x in missing.stderr.splitlines() if x.startswith("make server:")]
    assert "export MLFLOW_AUTH_ADMIN_PASSWORD" in line
    secret = PASSWORDS["admin"]
    argued = make_server(f"MLFLOW_AUTH_ADMIN_PASSWORD={secret}", env=env)
    assert argued.returncode != 0
    [line] = [x for x in argued.stderr.splitlines() if x.startswith("make server:")]
    assert "in the environment" in line and "not on make's command line" in line
    assert secret not in argued.stdout + argued.stderr
    assert "mlflow server" not in missing.stdout + argued.stdout  # neither started a server


def test_the_users_command_makes_each_user_with_their_permission(team):
    for line, (user, permission, experiment) in zip(team.granted, GRANTS, strict=True):
        assert line.startswith(f"hpml: new user {user} has {permission} on experiment ")
        assert f"{experiment!r}" in line and PASSWORDS[user] not in line
    with as_user("admin"):
        # an existing user: no password asked (stdin holds none), the permission granted anew
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            args = ["bob", "READ", "team", "--tracking-uri", team.uri]
            assert users.main(args) == 0
        assert printed.getvalue().startswith("hpml: user bob has READ on experiment 'team'")
        from mlflow.server import get_app_client

        auth = get_app_client("basic-auth", tracking_uri=team.uri)
        team_id = MlflowClient(team.uri).get_experiment_by_name("team").experiment_id
        assert auth.get_user_permission("alice", "experiment", team_id).permission == "EDIT"
        assert auth.get_user_permission("bob", "experiment", team_id).permission == "READ"


def test_a_run_with_edit_credentials_finishes_and_no_password_is_logged(team, root, tmp_path):
    args = ["model=vae", *QUICK, f"logger.tracking_uri={team.uri}", "logger.experiment_name=team"]
    with as_user("alice"):
        result = run_cli(args, root)
    assert result.returncode == 0, result.stderr[-3000:]
    [run_id] = [line.split()[2] for line in result.stdout.splitlines() if "hpml: run " in line]
    with as_user("admin"):
        import mlflow.artifacts

        run = MlflowClient(team.uri).get_run(run_id)
        team_id = MlflowClient(team.uri).get_experiment_by_name("team").experiment_id
        artifacts = Path(
            mlflow.artifacts.download_artifacts(
                run_id=run_id, tracking_uri=team.uri, dst_path=str(tmp_path / "artifacts")
            )
        )
    assert run.info.status == "FINISHED"
    assert run.info.experiment_id == team_id
    assert "train/loss" in run.data.metrics
    logged = [*run.data.params.values(), *run.data.tags.values(), result.stdout, result.stderr]
    files = [p for p in [*artifacts.rglob("*"), *(root / "outputs").rglob("*")] if p.is_file()]
    assert any(p.name == "train.log" for p in files) and any(p.suffix == ".yaml" for p in files)
    for secret in PASSWORDS.values():
        assert all(secret not in text for text in logged)
        assert all(secret.encode() not in p.read_bytes() for p in files)
    assert PASSWORDS["admin"] not in team.log.read_text(errors="replace")  # nor the server's


REFUSALS = [
    pytest.param(None, None, "wants credentials and none were given (HTTP 401)", id="none"),
    pytest.param(
        "alice",
        "not-" + PASSWORDS["alice"],
        "refused user 'alice' with the password given (HTTP 401)",
        id="wrong",
    ),
    pytest.param(
        "bob",
        PASSWORDS["bob"],
        "lets user 'bob' read experiment 'team' but not write to it (its permission there: "
        "READ; a run needs EDIT or MANAGE)",
        id="read-only",
    ),
]


@pytest.mark.parametrize(("user", "password", "reason"), REFUSALS)
def test_each_refusal_is_one_line_before_any_run(team, root, user, password, reason):
    before = {r.info.run_id for r in runs_of(team.uri, "team")}
    args = ["model=vae", *QUICK, f"logger.tracking_uri={team.uri}", "logger.experiment_name=team"]
    with credentials(user, password):
        result = run_cli(args, root)
    assert result.returncode == 1
    errors = stderr_lines(result, "hpml: error:")
    assert len(errors) == 1, result.stderr[-3000:]
    print(errors[0])
    assert f"tracking server {team.uri} {reason}" in errors[0]
    assert "logger.preflight_timeout_s=3 s" in errors[0]  # the preflight's answer, in its bound
    if user is None:
        assert f"set {USERNAME} and {PASSWORD}" in errors[0]
    assert "epoch 0" not in result.stdout.lower() and "Traceback" not in result.stderr
    assert {r.info.run_id for r in runs_of(team.uri, "team")} == before  # no run, none RUNNING
    for secret in PASSWORDS.values():
        assert secret not in result.stdout + result.stderr
    if password is not None:
        assert password not in result.stdout + result.stderr


def test_a_permission_withdrawn_mid_run_stops_the_run_in_one_line(team, root, tmp_path):
    from mlflow.server import get_app_client

    gate, uri = tmp_path / "gate", team.uri
    args = [
        "trainer.max_epochs=2",
        f"logger.tracking_uri={uri}",
        "logger.experiment_name=withdrawn",
    ]
    with as_user("carol"):
        proc = start_gated_run(args, root, gate)
    try:
        wait_for(gate / "reached", proc)  # epoch 0 landed
        with as_user("admin"):
            experiment_id = MlflowClient(uri).get_experiment_by_name("withdrawn").experiment_id
            auth = get_app_client("basic-auth", tracking_uri=uri)
            auth.revoke_user_permission("carol", "experiment", experiment_id)  # READ is left
    finally:
        (gate / "go").touch()
    out, err = finish(proc, 300)
    assert proc.returncode == 1, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("hpml: error:")]
    assert len(errors) == 1, err[-3000:]
    print(errors[0])
    [run] = runs_of(uri, "withdrawn")
    run_id = run.info.run_id
    assert f"refused user 'carol' a write to run {run_id} of experiment 'withdrawn'" in errors[0]
    # what the line says of the run is what the server holds: carol may no longer end it
    assert run.info.status == "RUNNING"
    assert "stays RUNNING there" in errors[0] and f"resume={run_id}" in errors[0]
    # nothing else was tried, or said: each would have been refused in a line of its own
    assert "could not record" not in out + err and "Failed to log system metrics" not in out + err
    assert "Traceback" not in err and PASSWORDS["carol"] not in out + err
    # what the line offers: EDIT granted again, the same command with resume= continues the
    # run and ends it
    with as_user("admin"):
        grant(uri, "carol", "EDIT", "withdrawn")
    with as_user("carol"):
        resumed = run_cli([*args, f"resume={run_id}"], root)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    [run] = runs_of(uri, "withdrawn")
    assert run.info.run_id == run_id and run.info.status == "FINISHED"


def test_three_sweeps_of_three_jobs_at_once_record_every_run(team, postgres, root):
    """Three users' sweeps at once on the joblib launcher, each job a writer of its own. At
    ``n_jobs=1`` joblib runs a sweep's jobs one after another in the sweep's own process: the
    server still meets three sweeps at once, and no sweep pays for pool workers that import
    torch afresh (about 10 CPU seconds each)."""
    needs_postgres(postgres)
    sweeps, seeds = 3, ["1", "2", "3"]
    args = [
        *("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=1", "model=vae", *QUICK),
        *(f"seed={','.join(seeds)}", "test=false", "callbacks.perf.measured_peak=false"),
        *(f"logger.tracking_uri={team.uri}", "logger.experiment_name=sweeps"),
    ]
    with as_user("alice"), concurrent.futures.ThreadPoolExecutor(sweeps) as pool:
        results = list(pool.map(lambda _: run_cli(args, root, timeout=600), range(sweeps)))
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
    runs = runs_of(team.uri, "sweeps")
    parents = {r.info.run_id for r in runs if r.data.tags.get("hpml.sweep_parent") == "true"}
    children = [r for r in runs if r.info.run_id not in parents]
    assert len(parents) == sweeps and len(children) == sweeps * len(seeds)
    assert {r.info.status for r in runs} == {"FINISHED"}
    for parent in parents:
        mine = [c for c in children if c.data.tags.get("mlflow.parentRunId") == parent]
        assert sorted(c.data.params["seed"] for c in mine) == seeds


def test_a_server_restarted_mid_run_on_postgresql_loses_no_metric(team, postgres, root, tmp_path):
    import psycopg

    cluster = needs_postgres(postgres)
    with as_user("alice"):
        restarted = restart_mid_run(team, root, tmp_path / "gate", "restart")
        assert_no_metric_lost(team, restarted)
    run_id = restarted[3]
    # the metrics are PostgreSQL's: the server keeps no other store
    with psycopg.connect(f"host=127.0.0.1 port={cluster.port} user=postgres dbname=mlflow") as db:
        [(rows,)] = db.execute(
            "SELECT count(*) FROM metrics WHERE run_uuid = %s AND key = 'train/loss'", (run_id,)
        ).fetchall()
    assert rows == 3
