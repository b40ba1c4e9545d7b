"""A real ``mlflow server`` on a free loopback port, for tests of runs sent over HTTP, and a
private PostgreSQL cluster for it to keep its runs in."""

from __future__ import annotations

import base64
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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

    def __init__(self, folder: Path, store_template: Path, db: str | None = None) -> None:
        """Args:
        db: the backend store's URI; None: a copy of ``store_template`` in ``folder``."""
        self.folder, self.port = folder, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        if db is None:
            shutil.copy(store_template, folder / "server.db")  # schema made once per session
            db = f"sqlite:///{folder / 'server.db'}"
        self.db = db
        self.env: dict[str, str] = {}  # the server's own, beyond this process's environment
        self.credentials: tuple[str, str] | None = None  # (user, password) its checks send
        self.log = folder / "server.log"  # what the server printed, every start appended
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
            self.db,
            "--artifacts-destination",
            str(self.folder / "artifacts"),
        ]

    def start(self, timeout_s: float = 180) -> None:
        self.launch()
        self.wait_until_answering(timeout_s)

    def launch(self) -> None:
        """Start the server's process; it answers seconds later (:meth:`wait_until_answering`)."""
        with self.log.open("ab") as log:
            # subprocess: a tracking server, as a team runs one
            self.proc = subprocess.Popen(
                self.command(),
                # MLflow's job runners, a process each, serve none of hpml's requests (``make
                # server``'s JOBS=false): off as there
                env=os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"} | self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_until_answering(self, timeout_s: float = 180) -> None:
        """Return once the launched server answers a search; fail the test with its log's tail
        if it exits or has not answered within ``timeout_s``."""
        search = urllib.request.Request(
            f"{self.uri}/api/2.0/mlflow/experiments/search?max_results=1"
        )
        if self.credentials is not None:
            basic = base64.b64encode(":".join(self.credentials).encode()).decode()
            search.add_header("Authorization", f"Basic {basic}")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(search, timeout=10) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self.log.read_text(errors="replace")[-3000:]
                pytest.fail(f"mlflow server did not answer on {self.uri}: {tail}")
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
            f"DB={self.db}",
            f"ARTIFACTS={self.folder / 'artifacts'}",
        ]


class AuthServer(MakeServer):
    """``make server AUTH=true``: MLflow's basic-auth app, its users in the server's own store,
    its admin ``admin`` made on the first start with ``admin_password``, handed over as a team
    hands it, in the environment."""

    ADMIN = "admin"

    def __init__(
        self, folder: Path, store_template: Path, admin_password: str, db: str | None = None
    ) -> None:
        super().__init__(folder, store_template, db)
        self.credentials = (self.ADMIN, admin_password)
        self.env = {"MLFLOW_AUTH_ADMIN_PASSWORD": admin_password}

    def command(self) -> list[str]:
        return [*super().command(), "AUTH=true"]


# Debian installs PostgreSQL's server programs here, off the PATH, one folder per major version
POSTGRES_BIN = Path("/usr/lib/postgresql")


def postgres_bin() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``: Debian's newest version, else the PATH's."""
    versions = [p.parent for p in POSTGRES_BIN.glob("*/bin/initdb")]
    if versions:
        return max(versions, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def postgres_missing() -> str | None:
    """Why no private PostgreSQL cluster can run here, or None."""
    if postgres_bin() is None:
        return (
            f"PostgreSQL is not installed (no initdb in {POSTGRES_BIN}/<version>/bin or on the "
            "PATH; Debian: apt-get install postgresql)"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "initdb refuses root, and there is no user postgres to run it as"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the driver psycopg is not installed (pip install -e '.[dev]')"
    return None


class PostgresCluster:
    """A private PostgreSQL cluster: ``initdb`` into a temporary folder, ``pg_ctl`` serving it
    on a free loopback port (its socket in that folder), trusting local connections, durability
    off (a test's data outlives no crash). Where the tests run as root it runs as user
    ``postgres``: initdb refuses root. Its folder is not under pytest's temporary root, which
    only root may enter."""

    def __init__(self) -> None:
        bin_dir = postgres_bin()
        assert bin_dir is not None, postgres_missing()
        self.bin = bin_dir
        self.folder = Path(tempfile.mkdtemp(prefix="hpml-pg-"))
        self.as_owner: list[str] = []
        if os.geteuid() == 0:
            os.chown(self.folder, pwd.getpwnam("postgres").pw_uid, -1)
            self.as_owner = ["runuser", "-u", "postgres", "--"]
        self.data, self.port = self.folder / "data", free_port()
        self.started = False

    def _run(self, *command: str | Path) -> None:
        # subprocess: PostgreSQL's own tools (initdb, pg_ctl, createdb) as its owner
        result = subprocess.run(
            [*self.as_owner, *map(str, command)], capture_output=True, text=True, timeout=120
        )
        if result.returncode != 0:
            pytest.fail(
                f"{Path(command[0]).name} failed: {(result.stdout + result.stderr)[-3000:]}"
            )

    def start(self) -> None:
        self._run(
            self.bin / "initdb",
            *("-D", self.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"),
            "--no-sync",
        )
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            self.bin / "pg_ctl",
            "-D",
            self.data,
            "-l",
            self.folder / "log",
            "-w",
            "-o",
            options,
            "start",
        )
        self.started = True

    def database(self, name: str) -> str:
        """A new database ``name``; its URI, with the driver MLflow's store uses."""
        self._run(
            self.bin / "createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name
        )
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.started:
            self._run(self.bin / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
            self.started = False
        shutil.rmtree(self.folder, ignore_errors=True)
