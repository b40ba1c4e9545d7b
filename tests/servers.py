"""A real ``mlflow server`` on a free loopback port, for tests of runs sent over HTTP."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO


def free_port() -> int:
    """A loopback port nothing listens on (the socket is closed again)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MlflowServer:
    """``mlflow server`` on a fixed loopback port with a SQLite store, stoppable and restartable
    on the same port and store; each start waits until the store answers a search (``/health``
    answers before the server has opened its store, which can take seconds on a crowded
    machine: hpml's preflight would then time out on a server that is still starting)."""

    def __init__(self, folder: Path, store_template: Path) -> None:
        self.folder, self.port = folder, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        shutil.copy(store_template, folder / "server.db")  # schema made once per session
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        mlflow_cli = Path(sys.executable).parent / "mlflow"
        return [
            str(mlflow_cli),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{self.folder / 'server.db'}",
            "--artifacts-destination",
            str(self.folder / "artifacts"),
        ]

    def start(self, timeout_s: float = 180) -> None:
        self.proc = subprocess.Popen(
            self.command(),
            # MLflow's job runners, a process each, serve none of hpml's requests (``make
            # server``'s JOBS=false): off as there
            env=os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                search = f"{self.uri}/api/2.0/mlflow/experiments/search?max_results=1"
                with urllib.request.urlopen(search, timeout=10) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"mlflow server did not answer on {self.uri}")
            time.sleep(0.5)

    def ensure_running(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.start()

    def stop(self) -> None:
        """SIGTERM to the whole process group (the CLI and its uvicorn worker), SIGKILL after
        10 s: a server under ``make`` has been seen to sit out a 30 s grace period."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None


class MakeServer(MlflowServer):
    """The server as a team starts it: ``make server`` from the repository, with this test's
    port, store and artifact folder (and the running interpreter's environment)."""

    def command(self) -> list[str]:
        return [
            "make",
            "--no-print-directory",
            "-C",
            str(REPO),
            "-o",
            ".venv/.installed",  # never (re)install from a test: use the running environment
            "server",
            f"BIN={Path(sys.executable).parent}",
            "HOST=127.0.0.1",
            f"PORT={self.port}",
            "WORKERS=1",  # MLflow's 4 would each import its server on the test's 2 cores
            f"DB=sqlite:///{self.folder / 'server.db'}",
            f"ARTIFACTS={self.folder / 'artifacts'}",
        ]
