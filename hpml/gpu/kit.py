"""The GPU kit: the wheels hpml needs on a GPU machine that has torch but not the rest.

``build`` fetches the wheels the machine lacks (Hydra, OmegaConf, MLflow's tracking store,
torch-pruning) into one folder that travels with the working tree; ``install`` puts them, with
no index and no resolver, into a folder on ``PYTHONPATH``; ``check`` proves the kit complete by
running a short ``hpml.train`` job in a fresh virtual environment. Standard library only.

    python -m hpml.gpu.kit build [--folder .gpu-kit] [--python-version 3.12]
    python3 -m hpml.gpu.kit install --folder .gpu-kit --target DIR   # on the GPU machine
    python -m hpml.gpu.kit check
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hpml.gpu.packages import (
    BUILT_HERE,
    HOST_BASE,
    HOST_PACKAGES,
    KIT,
    PLATFORMS,
    normalize,
    requirements,
)

ROOT = Path(__file__).resolve().parents[2]  # the repository: hpml/gpu/kit.py
DEFAULT_FOLDER = ROOT / ".gpu-kit"
CHECK_FOLDER = ROOT / ".gpu-kit-check"  # the check's twin kit, virtual environment, logs
MAX_MIB = 40.0  # the working tree that travels holds at most 64 MiB, the kit included

# The check's job: one short epoch of the default model on synthetic data.
CHECK_ARGS = ("trainer.max_epochs=1", "data.limit=64")
STAMP = ".hpml-kit"  # in a kit folder: the Python it was built for; in the venv: its packages


def wheel_name_version(wheel: Path) -> tuple[str, str]:
    """The normalised name and the version a wheel's file name gives (PEP 427)."""
    parts = wheel.name.split("-")
    if not wheel.name.endswith(".whl") or len(parts) < 5:
        raise ValueError(f"not a wheel's file name: {wheel.name}")
    return normalize(parts[0]), parts[1]


def pip(python: str, *args: str) -> None:
    """``python -m pip ARGS``, quiet, failing loudly. The machine's pip configuration applies:
    its constraint file caps only torch and torchvision, which the kit never resolves (no deps)."""
    subprocess.run([python, "-m", "pip", *args, "--disable-pip-version-check", "-qq"], check=True)


def build(folder: Path | str, python_version: str) -> int:
    """Fetch the kit's wheels for CPython ``python_version`` on x86-64 Linux into ``folder``;
    return their total size in bytes. Wheels at the kit's version are kept, any other removed."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = folder / STAMP
    if not stamp.exists() or stamp.read_text().strip() != python_version:
        for wheel in folder.glob("*.whl"):
            wheel.unlink()
    stamp.write_text(python_version + "\n")
    wanted = {normalize(name): version for name, version in KIT}
    have: set[str] = set()
    for wheel in sorted(folder.glob("*.whl")):
        name, version = wheel_name_version(wheel)
        if wanted.get(name) == version and name not in have:
            have.add(name)
        else:
            wheel.unlink()
    missing = [(name, version) for name, version in KIT if normalize(name) not in have]
    fetch = [f"{name}=={version}" for name, version in missing if name not in BUILT_HERE]
    if fetch:
        platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
        pip(
            sys.executable,
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            python_version,
            "--implementation",
            "cp",
            *platforms,
            "-d",
            str(folder),
            *fetch,
        )
    for name, version in missing:
        if name in BUILT_HERE:  # pure Python: a py3-none-any wheel built by any Python 3
            pip(sys.executable, "wheel", "--no-deps", "-w", str(folder), f"{name}=={version}")
    return sum(wheel.stat().st_size for wheel in folder.glob("*.whl"))


def install(folder: Path | str, target: Path | str, *, python: str = sys.executable) -> Path:
    """Install the kit's wheels into ``target`` with no index and no resolver: what the GPU
    machine runs with its own ``python3 -m pip``; it then puts ``target`` on ``PYTHONPATH``."""
    wheels = sorted(str(wheel) for wheel in Path(folder).glob("*.whl"))
    if not wheels:
        raise FileNotFoundError(f"no wheels in {folder}: build the kit first")
    target = Path(target)
    pip(python, "install", "--no-index", "--no-deps", "--upgrade", "--target", str(target), *wheels)
    return target


def host_venv(venv: Path) -> Path:
    """A virtual environment of the GPU machine's packages (``HOST_BASE`` and what they pull),
    made once and re-used while ``HOST_BASE`` is unchanged; returns its python."""
    venv_python = venv / "bin" / "python"
    stamp = venv / STAMP
    wanted = "\n".join(HOST_BASE) + "\n"
    if venv_python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return venv_python
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip(str(venv_python), "install", *HOST_BASE)
    listed = subprocess.run(
        [str(venv_python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    )
    extra = sorted({normalize(dist["name"]) for dist in json.loads(listed.stdout)} - HOST_PACKAGES)
    if extra:
        raise RuntimeError(
            f"{venv} holds packages the GPU machine lacks: {', '.join(extra)}; "
            "take what pulled them out of HOST_BASE"
        )
    stamp.write_text(wanted)
    return venv_python


# Run by the check's python, with the kit on its path: the store's runs, as JSON.
READ_BACK = """
import json, sys, mlflow, torch
client = mlflow.MlflowClient()
runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
print(json.dumps({
    "python": "Python " + sys.version.split()[0],
    "torch": torch.__version__,
    "runs": [
        {"id": r.info.run_id, "status": r.info.status, "metrics": len(r.data.metrics)}
        for r in runs
    ],
}))
"""


def missing_module(output: str) -> str | None:
    """The module a failed run's output says is missing, if any."""
    found = re.findall(r"ModuleNotFoundError\W+No module named '([\w.]+)'", output)
    return found[-1] if found else None


def check(folder: Path | str = CHECK_FOLDER) -> str:
    """Prove the kit complete: built for the running Python and installed beside only the GPU
    machine's packages, it runs ``hpml.train`` into a fresh store, from which a FINISHED run with
    metrics is read back. Returns the line that says so; raises ``RuntimeError`` naming what
    failed."""
    folder = Path(folder).resolve()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    kit = folder / f"kit-{version}"
    build(kit, version)
    wheels = len(list(kit.glob("*.whl")))
    venv_python = str(host_venv(folder / "venv"))
    site = folder / "site"
    shutil.rmtree(site, ignore_errors=True)
    install(kit, site, python=venv_python)
    log = folder / "check.log"
    with tempfile.TemporaryDirectory(prefix="hpml-gpu-kit-") as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
        env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp}/mlflow.db"
        env["PYTHONNOUSERSITE"] = "1"
        env["HYDRA_FULL_ERROR"] = "1"  # the import that failed, not Hydra's summary of it
        captured = {"cwd": tmp, "env": env, "capture_output": True, "text": True}  # both commands
        train = subprocess.run([venv_python, "-m", "hpml.train", *CHECK_ARGS], **captured)
        log.write_text(train.stdout + train.stderr)
        if train.returncode != 0:
            module = missing_module(train.stdout + train.stderr)
            what = f"missing module {module}" if module else f"hpml.train exited {train.returncode}"
            raise RuntimeError(f"{what} (log: {log})")
        read = subprocess.run([venv_python, "-c", READ_BACK], **captured)
    if read.returncode != 0:
        module = missing_module(read.stderr)
        what = f"missing module {module}" if module else "reading the store back failed"
        raise RuntimeError(f"{what}: {read.stderr.strip().splitlines()[-1:]}")
    found = json.loads(read.stdout.strip().splitlines()[-1])
    done = [run for run in found["runs"] if run["status"] == "FINISHED" and run["metrics"]]
    if not done:
        raise RuntimeError(f"no FINISHED run with metrics in the store: {found['runs']} ({log})")
    return f"ok ({found['python']}, torch {found['torch']}, {wheels} wheels)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hpml.gpu.kit", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser("build", help="fetch the kit's wheels into a folder")
    build_parser.add_argument("--folder", type=Path, default=DEFAULT_FOLDER)
    build_parser.add_argument("--python-version", default="3.12")
    install_parser = commands.add_parser("install", help="install a built kit into a folder")
    install_parser.add_argument("--folder", type=Path, default=DEFAULT_FOLDER)
    install_parser.add_argument("--target", type=Path, required=True)
    check_parser = commands.add_parser("check", help="prove the kit complete, here")
    check_parser.add_argument("--folder", type=Path, default=CHECK_FOLDER)
    commands.add_parser("list", help="print the kit's requirements")
    args = parser.parse_args(argv)
    if args.command == "build":
        size = build(args.folder, args.python_version) / 2**20
        print(f"hpml: gpu kit {args.folder}: {size:.1f} MiB")
        if size > MAX_MIB:
            print(f"hpml: gpu kit is over {MAX_MIB:.0f} MiB", file=sys.stderr)
            return 1
    elif args.command == "install":
        install(args.folder, args.target)
        print(f"hpml: gpu kit installed into {args.target}: PYTHONPATH={args.target.resolve()}")
    elif args.command == "check":
        try:
            print(f"hpml: gpu kit check: {check(args.folder)}")
        except (RuntimeError, subprocess.CalledProcessError) as error:
            print(f"hpml: gpu kit check: FAILED: {error}", file=sys.stderr)
            return 1
    else:
        print("\n".join(requirements()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
