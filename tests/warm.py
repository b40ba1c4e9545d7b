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
    """Answer requests, one JSON line each on stdin, with ``{"pid"}`` then ``{"rc"}`` lines."""
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
    out = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        out.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child(request)  # never returns
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        out.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()


def child(request: dict) -> None:
    """Become ``python -m <module> <args>`` in ``cwd`` with ``env``, output to the given files."""
    code = 1
    try:
        os.setsid()  # its own process group, so a timeout stops the whole tree
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
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


class WarmInterpreter:
    """The test side: starts the server on first use, sends calls, enforces timeouts."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            repo = str(Path(__file__).resolve().parent.parent)
            # this checkout, ahead of the PYTHONPATH that may hold hpml's dependencies (a GPU kit)
            path = os.pathsep.join([repo, *filter(None, [os.environ.get("PYTHONPATH")])])
            env = os.environ | {"PYTHONPATH": path}
            code = "import tests.warm as w; w.serve()"
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=repo,
                env=env,
            )
            atexit.register(self.close)
        return self.proc

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)

    def run(
        self,
        module: str,
        args: list[str],
        cwd: Path,
        env: dict[str, str],
        timeout: float,
        tmp: Path,
    ) -> subprocess.CompletedProcess | None:
        """The call's result, or None when another thread's call is in flight (the caller then
        starts a process of its own: concurrent calls stay concurrent)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            proc = self.start()
            stdout, stderr = tmp / "stdout", tmp / "stderr"
            request = {"module": module, "args": args, "cwd": str(cwd), "env": env}
            request |= {"stdout": str(stdout), "stderr": str(stderr)}
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            pid = json.loads(proc.stdout.readline())["pid"]
            answer: list[str] = []
            reader = threading.Thread(target=lambda: answer.append(proc.stdout.readline()))
            reader.start()
            reader.join(timeout)
            if reader.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                reader.join()
                raise subprocess.TimeoutExpired([module, *args], timeout)
        finally:
            self.lock.release()
        rc = json.loads(answer[0])["rc"]
        out, err = stdout.read_text(), stderr.read_text()
        return subprocess.CompletedProcess(
            [sys.executable, "-m", module, *args], rc, stdout=out, stderr=err
        )


WARM = WarmInterpreter()
