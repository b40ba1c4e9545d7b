"""Tracking-server failures: malformed URIs and silent servers fail in one line before anything
starts; a real ``mlflow server`` stopped and restarted mid-run costs no metric."""

from __future__ import annotations

import http.server
import importlib.util
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpml.errors import ConfigError
from hpml.tracking.remote import (
    PREFLIGHT_TIMEOUT_S,
    TrackingServerError,
    check_uri,
    preflight,
    prepare,
    probe,
)
from hpml.tracking.retries import (
    configure_retries,
    fail_fast_if_server_gone,
    retries_for,
    retry_window_s,
    server_gone,
)
from tests.conftest import QUICK, run_cli, stderr_lines
from tests.servers import MlflowServer, free_port
from tests.tracking.outage import (
    assert_no_metric_lost,
    restart_mid_run,
    start_gated_run,
    wait_for,
)

MALFORMED = ["htp://x", "http://", "localhost:5000", "sqlite://", "http://host:port"]
RETRY_VARIABLES = (
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
    "_MLFLOW_HTTP_REQUEST_MAX_RETRIES_LIMIT",
)


@pytest.fixture
def retry_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """``configure_retries`` writes os.environ: undo it after the test."""
    for name in RETRY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


# --- the URI's form, in-process -----------------------------------------------------------------


@pytest.mark.parametrize("uri", MALFORMED)
def test_malformed_uri_names_the_value_and_what_is_valid(uri):
    with pytest.raises(ConfigError) as caught:
        check_uri(uri)
    message = str(caught.value)
    assert "\n" not in message
    assert f"logger.tracking_uri={uri!r}" in message
    assert "sqlite:///path" in message and "http(s)://host:port" in message
    assert "databricks" in message


def test_a_host_and_port_without_scheme_gets_a_hint():
    with pytest.raises(ConfigError, match=r"did you mean http://localhost:5000\?"):
        check_uri("localhost:5000")


@pytest.mark.parametrize(
    ("uri", "scheme"),
    [
        ("sqlite:////tmp/x/mlflow.db", "sqlite"),
        ("sqlite:///mlflow.db", "sqlite"),
        ("http://127.0.0.1:5000", "http"),
        ("https://mlflow.example.com", "https"),
        ("databricks", "databricks"),
        ("databricks://profile", "databricks"),
        ("postgresql://host/db", "postgresql"),
        ("mysql+pymysql://u@host/db", "mysql+pymysql"),
    ],
)
def test_valid_uris_pass_without_network(uri, scheme):
    assert check_uri(uri) == scheme
    if scheme not in ("http", "https"):
        preflight(uri)  # form only: no request, no error


def test_credentials_never_appear_in_messages():
    with pytest.raises(ConfigError) as caught:
        check_uri("htp://alice:hunter2@host:5000")
    assert "hunter2" not in str(caught.value) and "alice" not in str(caught.value)
    assert "htp://***@host:5000" in str(caught.value)
    with pytest.raises(TrackingServerError) as caught:
        preflight(f"http://alice:hunter2@127.0.0.1:{free_port()}")
    assert "hunter2" not in str(caught.value) and "***@127.0.0.1" in str(caught.value)


def test_bad_settings_are_config_errors():
    class Settings:
        tracking_uri = "http://127.0.0.1:9"
        retry_s = 600.0
        preflight_timeout_s = 0

    with pytest.raises(ConfigError, match=r"logger\.preflight_timeout_s"):
        prepare(Settings())
    Settings.preflight_timeout_s, Settings.retry_s = 1.0, -1
    with pytest.raises(ConfigError, match=r"logger\.retry_s"):
        prepare(Settings())


@pytest.mark.parametrize(
    ("uri", "missing"),
    [
        ("mysql+pymysql://alice:hunter2@host/db", "the Python module pymysql is not installed"),
        ("postgresql+nope://host/db", "SQLAlchemy has no such driver"),
    ],
)
def test_a_database_uri_without_its_driver_is_refused_before_any_run(uri, missing):
    """A team's database store needs a driver MLflow does not install: named in one line by
    prepare, not by SQLAlchemy's traceback when the run starts."""
    if "pymysql" in uri and importlib.util.find_spec("pymysql") is not None:
        pytest.skip("pymysql is installed here")

    class Settings:
        tracking_uri = uri
        retry_s = None
        preflight_timeout_s = 1.0

    with pytest.raises(ConfigError) as caught:
        prepare(Settings())
    line = str(caught.value)
    assert line.startswith("logger.tracking_uri=") and missing in line, line
    assert "hunter2" not in line and "+<driver>://" in line


# --- the preflight, in-process -------------------------------------------------------------------


def test_preflight_refused_port_fails_naming_uri_and_its_bound():
    uri = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TrackingServerError) as caught:
        preflight(uri)
    message = str(caught.value)
    assert f"tracking server {uri} is unreachable: connection refused" in message
    assert f"logger.preflight_timeout_s={PREFLIGHT_TIMEOUT_S:g} s" in message
    assert PREFLIGHT_TIMEOUT_S <= 3  # startup (2-5 s on 2 cores) + this stays under 10 s


def test_preflight_gives_up_on_a_server_that_never_answers():
    """A port that accepts connections and then says nothing: the bound, not a hang."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # never accepted: the handshake completes, no byte comes back
        uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(TrackingServerError, match=r"no answer within 0\.3 s"):
            preflight(uri, timeout_s=0.3)


def test_a_silent_server_is_reported_as_silent_whichever_timeout_fires_first():
    """The probe's own read timeout (not the preflight's join) names the silence too: under
    load it can fire first, and it once said "cannot connect"."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
        assert probe(uri, timeout_s=0.3) == "no answer within 0.3 s"


def test_preflight_tells_a_web_server_from_an_mlflow_server():
    class NotMlflow(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotMlflow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(TrackingServerError, match=r"HTTP 404 .* not an MLflow tracking server"):
            preflight(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()


def test_a_sweeps_job_waits_longer_for_a_busy_server_than_the_first_contact():
    """A server that answers an MLflow search after 0.6 s: too slow for the first contact's
    0.2 s bound, in time for a job of a sweep, whose bound is SWEEP_JOB_PATIENCE times that."""
    from omegaconf import OmegaConf

    from hpml.build import build_tracker
    from hpml.hydra_job import HydraJob, SweepPlace
    from hpml.tracking.remote import SWEEP_JOB_PATIENCE, prepare
    from hpml.train import patience

    class Busy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(0.6)
            body = b'{"experiments": []}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    assert 0.2 * SWEEP_JOB_PATIENCE > 1.5  # the job's bound covers the answer with room to spare
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    logger = {"_target_": "hpml.tracking.MlflowTracker", "tracking_uri": uri, "retry_s": None}
    cfg = OmegaConf.create({"logger": logger | {"preflight_timeout_s": 0.2}})
    place = SweepPlace(dir="multirun/x", num=1, override_dirname="seed=2")
    job = HydraJob(Path("out"), None, "train", ("seed=2",), {}, sweep=place)
    try:
        with pytest.raises(TrackingServerError, match=r"no answer within 0\.2 s"):
            prepare(cfg.logger, patience(None))  # a single run: the first contact
        prepare(cfg.logger, patience(job))  # as train prepares a sweep's job
        assert build_tracker(cfg).tracking_uri == uri
    finally:
        server.shutdown()
        server.server_close()


# --- the retry window -----------------------------------------------------------------------------


def test_retry_window_follows_urllib3_backoff():
    assert [retry_window_s(n) for n in range(8)] == [0, 0, 2, 6, 14, 30, 62, 126]
    assert retry_window_s(9) == 126 + 120 + 120  # capped at urllib3's 120 s per wait
    assert retries_for(0) == 0
    assert retries_for(600) == 11 and retry_window_s(10) < 600 <= retry_window_s(11)


def test_configure_retries_sets_mlflow_variables_and_its_limit(retry_env):
    from mlflow.environment_variables import (
        _MLFLOW_HTTP_REQUEST_MAX_RETRIES_LIMIT,
        MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR,
        MLFLOW_HTTP_REQUEST_MAX_RETRIES,
    )

    assert configure_retries(600) == 11
    assert MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == 11
    assert MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR.get() == 1
    assert _MLFLOW_HTTP_REQUEST_MAX_RETRIES_LIMIT.get() >= 11  # else MLflow refuses 11
    assert configure_retries(30) == 5


def test_a_lost_server_fails_the_rest_at_once_until_the_next_job(retry_env):
    import requests
    from mlflow.environment_variables import MLFLOW_HTTP_REQUEST_MAX_RETRIES

    class Settings:
        tracking_uri, retry_s, preflight_timeout_s = "sqlite:////tmp/x.db", None, 5.0

    fail_fast_if_server_gone(RuntimeError("not about the server"))
    assert os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES") is None
    try:  # as MLflow wraps it: a new error raised while handling the requests error
        try:
            raise requests.exceptions.ConnectionError("Max retries exceeded")
        except requests.exceptions.ConnectionError as cause:
            raise RuntimeError(f"API request to http://h/api failed with {cause}")  # noqa: B904
    except RuntimeError as exc:
        lost = exc
    assert server_gone(lost)
    fail_fast_if_server_gone(lost)
    assert MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == 0
    prepare(Settings())  # the next job in this process (MLflow's own retry settings)
    assert os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES") is None


# --- the command line, no server ------------------------------------------------------------------


@pytest.mark.slow
def test_unreachable_server_fails_in_one_line_before_training(root, client):
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = run_cli(["model=vae", *QUICK, f"logger.tracking_uri={uri}"], root, timeout=120)
    assert result.returncode == 1
    errors = stderr_lines(result, "hpml: error:")
    assert len(errors) == 1, result.stderr[-3000:]
    assert f"tracking server {uri} is unreachable: connection refused" in errors[0]
    assert "logger.preflight_timeout_s=3 s" in errors[0]  # the bound conf/logger/mlflow.yaml sets
    assert "Epoch" not in result.stdout + result.stderr  # no training started
    assert "hpml: run" not in result.stdout
    assert client.get_experiment_by_name("hpml") is None  # no run in the local store either


@pytest.mark.slow
@pytest.mark.parametrize("uri", ["htp://x", "http://", "localhost:5000"])
def test_malformed_uri_fails_in_one_line(root, uri):
    result = run_cli(["model=vae", *QUICK, f"logger.tracking_uri={uri}"], root, timeout=120)
    assert result.returncode != 0
    errors = stderr_lines(result, "hpml: error:")
    assert len(errors) == 1, result.stderr[-3000:]
    assert f"logger.tracking_uri={uri!r} is invalid" in errors[0]
    assert "sqlite:///path" in errors[0] and "http(s)://host:port" in errors[0]
    assert "Epoch" not in result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("uri", ["http://alice:hunter2@127.0.0.1:{port}", "htp://x"])
def test_sweep_against_a_bad_store_stops_before_any_job(root, uri):
    uri = uri.format(port=free_port())
    result = run_cli(
        ["-m", "model=vae", *QUICK, "data.batch_size=32,64", f"logger.tracking_uri={uri}"],
        root,
        timeout=120,
    )
    assert result.returncode == 1
    errors = stderr_lines(result, "hpml: error:")
    assert len(errors) == 1, result.stderr[-3000:]
    assert "no job was started" in errors[0]
    assert "hunter2" not in result.stdout + result.stderr
    assert "Epoch" not in result.stdout + result.stderr
    assert not list((root / "multirun").rglob(".hydra"))  # no job folder either


# --- a real server, stopped and restarted mid-run -------------------------------------------------


@pytest.fixture(scope="module")
def module_server(
    tmp_path_factory: pytest.TempPathFactory, store_template: Path
) -> Iterator[MlflowServer]:
    """One server for the module: starting one takes ~25 s on 2 cores."""
    server = MlflowServer(tmp_path_factory.mktemp("server"), store_template)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def mlflow_server(module_server: MlflowServer) -> MlflowServer:
    """The module's server, running (a test before may have left it stopped)."""
    module_server.ensure_running()
    return module_server


@pytest.mark.slow
def test_preflight_passes_against_a_live_server(mlflow_server):
    preflight(mlflow_server.uri)


@pytest.mark.slow
def test_run_goes_to_the_server_with_metrics_and_artifacts(mlflow_server, root):
    uri = mlflow_server.uri
    args = ["model=vae", *QUICK, f"logger.tracking_uri={uri}", "logger.experiment_name=served"]
    result = run_cli(args, root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"hpml: compare runs at {uri}/#/experiments/" in result.stdout  # the server's own UI
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("served").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    run_id = runs[0].info.run_id
    assert "train/throughput_samples_per_s" in runs[0].data.metrics
    assert runs[0].data.params["logger.tracking_uri"] == uri
    assert [a.path for a in client.list_artifacts(run_id, "model")] == ["model/architecture.txt"]
    stored = (mlflow_server.folder / "artifacts").rglob("architecture.txt")
    assert any(run_id in path.parts for path in stored)  # stored by the server
    local = MlflowClient(f"sqlite:///{root}/mlflow.db")
    assert local.get_experiment_by_name("served") is None  # nothing went to the local store
    assert not list((root / "multirun").rglob(".hydra"))  # no job folder either


@pytest.mark.slow
def test_server_stopped_and_restarted_mid_run_loses_no_metric(mlflow_server, root, tmp_path):
    restarted = restart_mid_run(mlflow_server, root, tmp_path / "gate", "outage")
    losses = assert_no_metric_lost(mlflow_server, restarted)
    print(f"train/loss (step, value): {[(m.step, round(m.value, 2)) for m in losses]}")


@pytest.mark.slow
def test_server_gone_for_good_fails_the_run_in_one_line(mlflow_server, root, tmp_path):
    """Past ``logger.retry_s`` the run fails, once, instead of waiting out the window again for
    each record that follows (failure tag, traceback, job log, status), and MLflow's messages on
    the way mask the URI's password. Leaves the server down: the fixture restarts it for any test
    after this one."""
    gate = tmp_path / "gate"
    uri = mlflow_server.uri.replace("//", "//alice:hunter2@")  # the server ignores the password
    proc = start_gated_run(
        [
            "trainer.max_epochs=2",
            "logger.experiment_name=gone",
            "logger.retry_s=2",
            f"logger.tracking_uri={uri}",
        ],
        root,
        gate,
    )
    try:
        wait_for(gate / "reached", proc)
        mlflow_server.stop()
        (gate / "go").touch()
        out, err = proc.communicate(timeout=300)  # a hang would be 4+ windows of 600 s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1
    errors = [line for line in err.splitlines() if line.startswith("hpml: error:")]
    assert len(errors) == 1, err[-3000:]
    assert f"127.0.0.1:{mlflow_server.port}" in errors[0]
    assert "test/loss" not in out + err  # the run stopped at the outage, it did not go on
    # MLflow's messages carry the URI whole; neither the terminal nor the job log shows it
    assert "hunter2" not in out + err
    [job_log] = (root / "outputs").rglob("train.log")
    assert "hunter2" not in job_log.read_text() and "***@127.0.0.1" in job_log.read_text()


# --- a server with users: what its answers mean, in-process ---------------------------------------


def test_the_auth_routes_the_preflight_asks_are_mlflows():
    from mlflow.server.auth import routes

    from hpml.tracking import access

    assert access.CURRENT_USER == routes.GET_CURRENT_USER
    assert access.USER_PERMISSION == routes.GET_USER_PERMISSION


@pytest.mark.parametrize(
    ("username", "password", "token", "uri", "reason"),
    [
        (None, None, None, "http://h:5000", "wants credentials and none were given (HTTP 401)"),
        (
            "alice",
            None,
            None,
            "http://h:5000",
            "none were given (HTTP 401; MLFLOW_TRACKING_USERNAME is set, "
            "MLFLOW_TRACKING_PASSWORD is not)",
        ),
        ("alice", "hunter2", None, "http://h:5000", "refused user 'alice' with the password"),
        (None, None, "tok", "http://h:5000", "refused the token in MLFLOW_TRACKING_TOKEN"),
        (None, None, None, "http://a:hunter2@h:5000", "refused the credentials in logger."),
    ],
)
def test_a_401_says_whether_credentials_were_missing_or_refused(
    username, password, token, uri, reason
):
    from mlflow.utils.rest_utils import MlflowHostCreds

    from hpml.tracking.access import credentials_refusal

    creds = MlflowHostCreds(uri, username=username, password=password, token=token)
    refusal = credentials_refusal(uri, creds)
    assert reason in refusal.reason
    assert "hunter2" not in refusal.reason + refusal.fix
