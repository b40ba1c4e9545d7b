"""``python3 -m hpml.gpu.check --out DIR``: hpml's CUDA paths run and measured on a GPU machine.

Stops in one line where there is no CUDA; else installs the wheel kit and runs the parts of
:mod:`hpml.gpu.parts` in priority order, each under its own time budget, rewriting ``DIR`` after
every part so a check cut short still returns what it measured. Module level is standard
library only.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from hpml.gpu.kit import DEFAULT_FOLDER, ROOT, install
from hpml.gpu.parts import CALLS, Part, parts
from hpml.gpu.rows import Row, Store

REPORT_SUFFIXES = (".html", ".md", ".png", ".svg", ".csv", ".json", ".txt")
MIN_COMMAND_S = 5.0  # a command started with less time than this would only be cut
NCU_GLOBS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")


def cuda_device() -> str | None:
    """The first CUDA device's name, or None (torch missing, or no CUDA device)."""
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def ncu() -> str | None:
    return shutil.which("ncu") or next((p for g in NCU_GLOBS for p in sorted(glob.glob(g))), None)


def interruptible() -> None:
    """SIGINT back to its default in a command about to start: a check started as a shell's
    background job (``&``, ``nohup``) has SIGINT ignored, which its commands would inherit,
    and each cut at its budget would then wait out the grace period and kill its run."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_command(argv: Sequence[str], env: dict[str, str], timeout_s: float, log) -> str:
    """Run one command in its own process group, its output into ``log`` and returned; past
    ``timeout_s`` the whole group is interrupted (runs end KILLED, not RUNNING), then killed."""
    log.write(f"\n$ {' '.join(argv)}\n")
    log.flush()
    start = time.monotonic()
    with subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=interruptible,  # the check runs its commands from its one thread
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=max(timeout_s, 1))
            status = f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                out, _ = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
            status = f"cut at its budget of {timeout_s:.0f} s"
    log.write(out + f"\n[{status}, {time.monotonic() - start:.1f} s]\n")
    log.flush()
    return out + f"\n[{status}]\n"


def read_store(uri: str) -> dict[str, list]:
    """Every run of the store by experiment name (mlflow imported here: the kit is on the path)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    return {
        e.name: client.search_runs([e.experiment_id], max_results=1000)
        for e in client.search_experiments()
    }


def close_left_running(uri: str) -> list[str]:
    """End as KILLED every run still RUNNING once a part's processes are gone: one whose process
    was cut before it could end its run (a run under Nsight Compute, which stops its target
    itself). Returns their ids."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    left = client.search_runs(experiments, "attributes.status = 'RUNNING'", max_results=1000)
    for run in left:
        client.set_tag(run.info.run_id, "hpml.gpu_check", "left RUNNING by its cut process")
        client.set_terminated(run.info.run_id, "KILLED")
    return [run.info.run_id for run in left]


def write_summary(out: Path, header: dict[str, str], done: dict[str, list[Row]]) -> None:
    rows = [row for part in done.values() for row in part]
    lines = [f"# hpml GPU check: {header['device']}", ""]
    lines += [f"- {k}: {v}" for k, v in header.items()]
    lines += ["", "| path | ran | measured |", "|---|---|---|"]
    lines += [f"| {r.path} | {r.ran} | {r.measured} |" for r in rows]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    data = {"header": header, "parts": {k: [asdict(r) for r in v] for k, v in done.items()}}
    (out / "summary.json").write_text(json.dumps(data, indent=1) + "\n")


def pack(out: Path, name: str, folders: Sequence[Path], suffixes: Sequence[str]) -> None:
    """The files of ``folders`` with one of ``suffixes`` into ``out/name``; files over 4 MiB are
    left out (the way back takes a few files of 16 MiB at most)."""
    with tarfile.open(out / name, "w:gz") as tar:
        for folder in folders:
            for path in sorted(folder.rglob("*")):
                if path.suffix in suffixes and path.is_file() and path.stat().st_size <= 4 * 2**20:
                    tar.add(path, arcname=f"{folder.name}/{path.relative_to(folder)}")


def expand(arg: str, names: dict[str, str]) -> list[str]:
    """One argument with its ``{name}``s filled in; ``{gpu_tests}`` becomes the test files that
    mark a test ``gpu``, relative to the repository."""
    if arg != "{gpu_tests}":
        return [arg.format(**names)]
    tests = (ROOT / "tests").rglob("test_*.py")
    return sorted(str(path.relative_to(ROOT)) for path in tests if "mark.gpu" in path.read_text())


def run_part(
    part: Part,
    env: dict[str, str],
    names: dict[str, str],
    deadline: float,
    logs: Path,
    min_s: float = MIN_COMMAND_S,
) -> str:
    """A part's commands in turn, all within its budget and the check's deadline; a command
    with less than ``min_s`` seconds left is not started."""
    end = min(time.monotonic() + part.budget_s, deadline)
    outputs = []
    with open(logs / f"{part.name}.log", "w") as log:
        for command in part.commands:
            left = end - time.monotonic()
            if left < min_s:
                outputs.append(f"[not run: the part's budget was spent] {' '.join(command)}")
                continue
            if "{ncu}" in command and not names.get("ncu"):
                outputs.append("[not run: Nsight Compute (ncu) not found]")
                continue
            argv = [x for arg in command for x in expand(arg, names)]
            outputs.append(run_command(argv, env, left, log))
    return "\n".join(outputs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m hpml.gpu.check", description=__doc__)
    parser.add_argument(
        "--out",
        type=Path,
        default=os.environ.get("OUT"),
        help="where the summary, store and reports go (default: $OUT)",
    )
    parser.add_argument("--kit", type=Path, default=DEFAULT_FOLDER, help="the wheel kit")
    parser.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/hpml-gpu-check"),
        help="the runs' root (HPML_ROOT): store, outputs, sweeps",
    )
    parser.add_argument("--budget-s", type=float, help="the whole check's budget (default 360)")
    parser.add_argument(
        "--parts", help="a comma-separated subset of: " + ", ".join(p.name for p in parts())
    )
    parser.add_argument(
        "--call",
        choices=list(CALLS),
        help="the parts and budget of one of a lease's calls: "
        + "; ".join(f"{k}: {', '.join(v[0])} in {v[1]:.0f} s" for k, v in CALLS.items()),
    )
    args = parser.parse_args(argv)
    if args.call is not None:
        called, budget = CALLS[args.call]
        args.parts = args.parts or ",".join(called)
        args.budget_s = args.budget_s or budget
    args.budget_s = args.budget_s or 360.0
    device = cuda_device()
    if device is None:
        print("hpml: gpu check needs a CUDA device: torch here sees none (or is not installed)")
        return 2
    if args.out is None:
        parser.error("--out is required where OUT is not set")
    deadline = time.monotonic() + args.budget_s
    chosen = [p for p in parts() if not args.parts or p.name in args.parts.split(",")]
    out, work = args.out.resolve(), args.work.resolve()
    logs = work / "logs"
    for folder in (out, logs):
        folder.mkdir(parents=True, exist_ok=True)
    site = work / "site"
    try:
        install(args.kit, site)
    except FileNotFoundError as error:
        print(f"hpml: gpu check: {error} (`make gpu-kit` builds it)")
        return 2
    wheels = len(list(args.kit.glob("*.whl")))
    sys.path.insert(0, str(site))
    import torch

    uri = f"sqlite:///{work}/mlflow.db"
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
        "HPML_ROOT": str(work),
        "MLFLOW_TRACKING_URI": uri,
        "PYTHONUNBUFFERED": "1",
    }
    header = {
        "device": device,
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "python": sys.version.split()[0],
        "kit": f"{wheels} wheels",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python3 -m hpml.gpu.check " + " ".join(argv or sys.argv[1:]),
    }
    names = {"python": sys.executable, "ncu": ncu() or "", "work": str(work)}
    bench, started = ROOT / ".bench" / "results", time.time()
    done: dict[str, list[Row]] = {}
    outputs: dict[str, str] = {}
    for part in chosen:
        part_start = time.monotonic()
        outputs[part.name] = run_part(part, env, names, deadline, logs)
        try:
            close_left_running(uri)
            store = Store(read_store(uri), str(work), outputs, str(bench), started)
            done[part.name] = part.rows(store)
        except Exception as error:  # a part's rows must not stop the next part
            done[part.name] = [Row(part.name, "failed", f"reading its runs: {error!r}")]
        print(f"hpml: gpu check: {part.name} in {time.monotonic() - part_start:.0f} s", flush=True)
        write_summary(out, header, done)
        if (work / "mlflow.db").exists():
            shutil.copy(work / "mlflow.db", out / "mlflow.db")
        jobs = [f for f in (work / "multirun", work / "outputs") if f.exists()]
        pack(out, "logs.tar.gz", [logs, *jobs], (".log",))
        reports = [work / "study2", work / "study5", work / "mlartifacts", bench]
        pack(out, "reports.tar.gz", [f for f in reports if f.exists()], REPORT_SUFFIXES)
    print((out / "summary.md").read_text() if (out / "summary.md").exists() else "no summary")
    return 0 if all(r.ran != "failed" for rows in done.values() for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
