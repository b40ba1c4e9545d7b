"""One warm interpreter per test worker that forks a fresh child for each ``python -m`` call.

A ``python -m hpml.train`` spends about 11 CPU-seconds importing torch, Lightning, MLflow and
Hydra before it reads its first argument; the tests start about eighty of them. The server below
imports those third-party packages once and, per call, forks a child that takes the call's
working directory, environment, arguments and output files, runs the module as ``__main__``
(``runpy``, as ``-m`` does) and exits the way the interpreter would: non-daemon threads joined,
``atexit`` handlers run, streams flushed, its exit status that of ``SystemExit`` or 1 after a
traceback. hpml itself is never imported by the server, so each child imports hpml (and
registers its resolvers and config) from the code under test, as a fresh process would.

What a fork cannot reproduce is start-up that reads the environment at import time in one of
the pre-imported packages; none of the variables the tests set (``HPML_*``, ``MLFLOW_*``,
``OMP_NUM_THREADS`` read at torch's first parallel region) is read that way.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

# what ``python -m hpml.train`` imports from outside hpml, heaviest first
PRELOAD = (
    "torch",
    "torchvision",
    "lightning.pytorch",
    "torchmetrics",
    "mlflow",
    "mlflow.tracking",
    "mlflow.store.tracking.sqlalchemy_store",
    "hydra",
    "hydra.utils",
    "hydra.compose",
    "omegaconf",
    "optuna",
    "torch_pruning",
    "psutil",
    "filelock",
)


def serve() -> None:
    """Answer requests, one JSON line each on stdin: fork a child for each at once (calls run
    concurrently), answer ``{"id", "pid"}``, and ``{"pid", "rc"}`` when that child exits."""
    # a Hydra job has configured logging before it imports these; Lightning, meeting a root
    # logger without handlers, would add its own and stop propagating (its lines then miss
    # hpml's console filters): import them under a stand-in handler
    stand_in = logging.NullHandler()
    logging.root.addHandler(stand_in)
    for name in PRELOAD:
        # one not installed (optuna, on a GPU machine given only a kit) is only not warm: a
        # child that needs it imports it, and fails, as a fresh process would
        with contextlib.suppress(ModuleNotFoundError):
            importlib.import_module(name)
    logging.root.removeHandler(stand_in)
    from tests import hydra_cache

    hydra_cache.install()
    hydra_cache.warm(Path(__file__).resolve().parent.parent / "conf")  # what every child loads
    out, pending, children, reading = sys.stdout, b"", set(), True

    def answer(message: dict) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    while reading or children:
        # one thread only (a fork copies no other thread's locks): poll for exits while
        # children run, else sleep until the next request
        ready, _, _ = select.select([0] if reading else [], [], [], 0.05 if children else None)
        if ready:
            chunk = os.read(0, 1 << 16)
            reading, pending = bool(chunk), pending + chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            sys.stderr.flush()
            # subprocess: one fork per CLI call, from the imports made once
            pid = os.fork()
            if pid == 0:
                child(request)  # never returns
            children.add(pid)
            answer({"id": request["id"], "pid": pid})
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            children.discard(pid)
            answer({"pid": pid, "rc": os.waitstatus_to_exitcode(status)})


def child(request: dict) -> None:
    """Become ``python -m <module> <args>`` in ``cwd`` with ``env``, output to the given files."""
    code = 1
    try:
        os.setsid()  # its own process group, so a timeout stops the whole tree
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            # appending: stdout and stderr may share a file, in the order they were written
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(target, fd)
            os.close(target)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 -- the process's own streams
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[0] = request["cwd"]  # as ``-m`` puts the working directory first
        extra = request["env"].get("PYTHONPATH", "").split(os.pathsep)
        sys.path[1:1] = [p for p in extra if p and p not in sys.path]  # read at start-up
        code = run_module(request["module"], request["args"])
        threading._shutdown()  # type: ignore[attr-defined] -- as the interpreter does at exit
        atexit._run_exitfuncs()
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def run_module(module: str, args: list[str]) -> int:
    """``runpy`` the module as ``__main__`` with ``args``; its exit status as the shell sees it."""
    import runpy
    import traceback

    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


class WarmProcess:
    """A call forked by the server, used as a ``subprocess.Popen`` with ``text=True``,
    ``stdout=PIPE``, ``stderr=PIPE`` and ``start_new_session=True``: its pid leads its own
    process group; its output is read once it has exited."""

    def __init__(self, server: WarmInterpreter, pid: int, args: list[str], tmp: Path) -> None:
        self.server, self.pid, self.args, self.tmp = server, pid, args, tmp
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        stderr = self.tmp / "stderr"  # absent where merged into stdout
        return (self.tmp / "stdout").read_text(), stderr.read_text() if stderr.exists() else ""

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WarmInterpreter:
    """The test side: starts the server on first use, sends calls, enforces timeouts."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()  # one request written at a time
        self.answered = threading.Condition()
        self.pids: dict[int, int] = {}  # request id -> pid
        self.exits: dict[int, int] = {}  # pid -> exit status
        self.requests = 0

    def start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            repo = str(Path(__file__).resolve().parent.parent)
            # this checkout, ahead of the PYTHONPATH that may hold hpml's dependencies (a GPU kit)
            path = os.pathsep.join([repo, *filter(None, [os.environ.get("PYTHONPATH")])])
            env = os.environ | {"PYTHONPATH": path}
            code = "import tests.warm as w; w.serve()"
            # subprocess: the warm interpreter, one per test worker
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=repo,
                env=env,
            )
            threading.Thread(target=self.read, args=(self.proc,), daemon=True).start()
            atexit.register(self.close)
        return self.proc

    def read(self, proc: subprocess.Popen) -> None:
        """The server's answers, as they come, for the callers waiting on them."""
        for line in proc.stdout:
            message = json.loads(line)
            with self.answered:
                if "id" in message:
                    self.pids[message["id"]] = message["pid"]
                else:
                    self.exits[message["pid"]] = message["rc"]
                self.answered.notify_all()

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """``pid``'s exit status, taken once (a later child may get the same pid), or None if
        it has not exited within ``timeout``."""
        with self.answered:
            self.answered.wait_for(lambda: pid in self.exits, timeout)
            return self.exits.pop(pid, None)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)

    def popen(
        self,
        module: str,
        args: list[str],
        cwd: Path,
        env: dict[str, str],
        tmp: Path,
        merged: bool = False,
    ) -> WarmProcess:
        """``python -m MODULE ARGS`` in ``cwd`` with ``env``, started; output files in ``tmp``
        (``merged``: stderr into stdout's, as ``stderr=STDOUT``)."""
        request = {"module": module, "args": args, "cwd": str(cwd), "env": env}
        stderr = "stdout" if merged else "stderr"
        request |= {"stdout": str(tmp / "stdout"), "stderr": str(tmp / stderr)}
        with self.lock:
            proc = self.start()
            self.requests += 1
            request["id"] = self.requests
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
        with self.answered:
            self.answered.wait_for(lambda: request["id"] in self.pids)
            pid = self.pids.pop(request["id"])
        return WarmProcess(self, pid, [sys.executable, "-m", module, *args], tmp)

    def run(
        self,
        module: str,
        args: list[str],
        cwd: Path,
        env: dict[str, str],
        timeout: float,
        tmp: Path,
    ) -> subprocess.CompletedProcess:
        """The call's result; past ``timeout`` its process group is killed."""
        proc = self.popen(module, args, cwd, env, tmp)
        try:
            out, err = proc.communicate(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout=out, stderr=err)


WARM = WarmInterpreter()
