"""``python -m hpml.profile.ncu``: one ``hpml.train`` run under Nsight Compute, the counters of a
training step's kernels logged to its MLflow run (``ncu/*`` metrics, ``hpml.ncu.*`` tags, the
export and a per-kernel table under ``ncu/``).

A command around the run rather than a ``profile=`` option: Nsight Compute has to start the
process it profiles and hands its counts over only once that process has ended, so nothing
inside the run can read them. The command starts ncu around ``hpml.train`` with
``profile=nvtx`` (the step's NVTX ranges, no profiler of hpml's own), profiles the kernels inside
the forward and backward ranges, finds the run the job printed, and reads the export into it.
``--read`` reads an export made another way into a run. Conventions: docs/profiling.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpml import garbage
from hpml.errors import ConfigError, HpmlError
from hpml.names import (
    NCU_CACHE_TAG,
    NCU_CLOCK_TAG,
    NCU_COUNTERS_TAG,
    NCU_DEVICE_TAG,
    NCU_REGIONS,
    NCU_STEP_TAG,
    NCU_TENSOR_TAG,
    human,
)

if TYPE_CHECKING:  # mlflow takes seconds to import: --help answers without it
    from mlflow import MlflowClient

RUN_LINE = re.compile(r"^hpml: run ([0-9a-f]{32}) finished in (\S+)$")
# hpml's range names hold "/", ncu's delimiter between nested ranges: matched as a regex
RANGES = ("regex:hpml.forward/", "regex:hpml.backward/")
EXPORT, REPORT = "raw_page.csv", "ncu"  # in --out: the CSV ncu prints, its report (.ncu-rep)
NCU_PLACES = ("/usr/local/cuda/bin/ncu",)


def compute_capability(text: str) -> str:
    if not re.fullmatch(r"\d+\.\d+", text):
        raise argparse.ArgumentTypeError(f"{text!r}: expected MAJOR.MINOR, e.g. 9.0")
    return text


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m hpml.profile.ncu",
        description="Train one run under Nsight Compute and log the counters of a training "
        "step's kernels (FLOPs, DRAM bytes, tensor-core work) to its MLflow run: "
        "python -m hpml.profile.ncu [options] -- <hpml.train overrides>. --read logs an "
        "export made elsewhere (ncu --csv --page raw) to a run.",
    )
    parser.add_argument("--ncu", metavar="PATH", help="ncu to run (default: on PATH)")
    parser.add_argument(
        "--cache-control",
        choices=["all", "none"],
        help="ncu --cache-control: all flushes the caches before each kernel (default all; "
        "with --read: what the export was made with, else recorded as unstated)",
    )
    parser.add_argument(
        "--clock-control",
        choices=["base", "none"],
        help="ncu --clock-control: base locks the clocks at base (default base; with --read: "
        "what the export was made with, else recorded as unstated)",
    )
    parser.add_argument(
        "--step",
        type=int,
        metavar="N",
        help="which training step's kernels to log, 1 = the first counted (default: the last)",
    )
    parser.add_argument(
        "--cc",
        type=compute_capability,
        help="the GPU's compute capability, which picks the counters (default: torch's device)",
    )
    parser.add_argument(
        "--out", type=Path, metavar="DIR", help="where ncu writes (default: outputs/ncu/<time>)"
    )
    parser.add_argument("--read", type=Path, metavar="EXPORT", help="log this export instead")
    parser.add_argument("--run", metavar="RUN_ID", help="with --read: the run it is of")
    parser.add_argument("--tracking-uri", help="the run's store (default: where the job said)")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="hpml.train overrides")
    args = parser.parse_args(argv)
    args.overrides = args.overrides[1:] if args.overrides[:1] == ["--"] else args.overrides
    if args.read is not None and (args.run is None or args.overrides):
        parser.error("--read EXPORT takes --run RUN_ID and no overrides")
    return args


def train_command(python: str, overrides: Sequence[str]) -> list[str]:
    """``python -m hpml.train`` with ``overrides`` and ``profile=nvtx``; refused in one line:
    another profiler (torch.profiler's CUDA tracing and Nsight cannot share CUPTI) or a sweep
    (ncu counts one process, and one run is read back)."""
    for override in overrides:
        if override in ("-m", "--multirun"):
            raise ConfigError("--multirun", override, "one run: give the sweep's jobs one by one")
        key, _, value = override.lstrip("+~").partition("=")
        if key == "profile" and value != "nvtx":
            raise ConfigError("profile", value, "nvtx (the default here): ncu is the profiler")
    nvtx = [] if any(o.lstrip("+~").startswith("profile=") for o in overrides) else ["profile=nvtx"]
    return [python, "-m", "hpml.train", *overrides, *nvtx]


def ncu_command(
    ncu: str, train: Sequence[str], out: Path, counters: Sequence[str], cache: str, clock: str
) -> list[str]:
    """ncu around ``train``: the kernels inside hpml's forward and backward ranges, ``counters``
    of each, the raw page as CSV in ``out`` (with ncu's own lines) and the report beside it."""
    return [
        ncu,
        "--nvtx",
        *(word for r in RANGES for word in ("--nvtx-include", r)),
        *("--metrics", ",".join(counters)),
        *("--cache-control", cache, "--clock-control", clock),
        *("--csv", "--page", "raw", "--print-units", "base"),
        *("--log-file", str(out / EXPORT), "--export", str(out / REPORT), "--force-overwrite"),
        *train,
    ]


def run_profiled(command: Sequence[str]) -> tuple[int, str | None, str | None]:
    """Run ``command``, its output passed through; its exit status, and the run id and store
    of the ``hpml: run ... finished in ...`` line it printed (None, None without one)."""
    found: tuple[str, str] | None = None
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, bufsize=1) as process:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            if match := RUN_LINE.match(line.rstrip("\n")):
                found = (match[1], match[2])
    return process.returncode, *(found or (None, None))


def _client(tracking_uri: str, run_id: str) -> MlflowClient:
    """The client of the store holding run ``run_id``; a store or run not there is one line."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from hpml.store_file import sqlite_path

    path = sqlite_path(tracking_uri)
    if path is not None and not path.exists():
        raise HpmlError(f"no MLflow store at {path}: name the run's store with --tracking-uri")
    client = MlflowClient(tracking_uri)
    try:
        client.get_run(run_id)
    except MlflowException:
        raise HpmlError(f"unknown run id '{run_id}' in {tracking_uri}") from None
    return client


def attach(
    export: Path,
    run_id: str,
    tracking_uri: str,
    step: int | None = None,
    cache: str | None = None,
    clock: str | None = None,
) -> str:
    """Log step ``step`` (1-based; None: the last) of ``export`` to run ``run_id``: its
    metrics, the tags saying how it was counted, the export and its per-kernel table; the
    line that says what was logged."""
    from mlflow.entities import Metric, RunTag

    from hpml.analysis.ncu import load
    from hpml.analysis.ncu_work import READ, check, groups_csv, step_metrics, work

    parsed = load(export, READ)
    found = check(parsed)
    if step is not None and not 1 <= step <= len(found):
        raise ConfigError("--step", step, f"1 to {len(found)}, the steps counted")
    index = len(found) - 1 if step is None else step - 1
    chosen = {r: kernels for r, kernels in found[index].items() if r in NCU_REGIONS}
    if not chosen:
        raise HpmlError(f"step {index + 1} has no forward or backward kernels")
    done = {region: work(kernels) for region, kernels in chosen.items()}
    first = next(iter(chosen.values()))[0]
    tags = {
        NCU_CACHE_TAG: cache or "unstated",
        NCU_CLOCK_TAG: clock or "unstated",
        NCU_COUNTERS_TAG: ",".join(c for c in READ if c in parsed.units),
        NCU_DEVICE_TAG: f"{first.device} (CC {first.cc})",
        NCU_STEP_TAG: f"{index + 1} of {len(found)}",
        NCU_TENSOR_TAG: ",".join(sorted({c for d in done.values() for c in d.unknown})) or "none",
    }
    client = _client(tracking_uri, run_id)
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, now, 0) for k, v in step_metrics(chosen).items()],
        tags=[RunTag(k, v) for k, v in tags.items()],
    )
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(export, Path(tmp) / EXPORT)
        (Path(tmp) / "kernels.csv").write_text(groups_csv(chosen))
        client.log_artifacts(run_id, tmp, "ncu")
    counted = "; ".join(
        f"{NCU_REGIONS[r]} {d.kernels} kernels, {human(d.flops, 'FLOP')}, "
        f"{human(d.dram_bytes)} DRAM, {d.intensity:.3g} FLOP/byte"
        for r, d in done.items()
    )
    line = f"hpml: counted step {index + 1} of {len(found)} into run {run_id}: {counted}"
    if tags[NCU_TENSOR_TAG] != "none":
        line += (
            f"\nhpml: note: tensor-core work on {tags[NCU_TENSOR_TAG]} has no known FLOPs per "
            f"unit on CC {first.cc}: its FLOPs are left out (a lower bound)"
        )
    return line


def device_cc() -> str:
    """The compute capability of the GPU torch sees: which counters to ask ncu for."""
    import torch

    if not torch.cuda.is_available():
        raise HpmlError("no CUDA device: Nsight Compute counts GPU kernels (--cc names one)")
    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}"


def profile(args: argparse.Namespace) -> None:
    """Train under ncu, then read what it counted into the run."""
    from hpml.analysis.ncu_work import counters

    ncu = args.ncu or shutil.which("ncu") or next(filter(os.path.exists, NCU_PLACES), None)
    if ncu is None:
        raise HpmlError("Nsight Compute (ncu) is not on PATH nor in /usr/local/cuda/bin: --ncu")
    train = train_command(sys.executable, args.overrides)
    root = Path(os.environ.get("HPML_ROOT") or Path.cwd())
    out = args.out or root / "outputs" / "ncu" / time.strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    cache, clock = args.cache_control or "all", args.clock_control or "base"
    command = ncu_command(ncu, train, out, counters(args.cc or device_cc()), cache, clock)
    print(f"hpml: {shlex.join(command)}", flush=True)
    code, run_id, uri = run_profiled(command)
    if run_id is None or uri is None:
        raise HpmlError(f"no run finished under ncu (exit {code}): see {out / EXPORT}")
    print(attach(out / EXPORT, run_id, args.tracking_uri or uri, args.step, cache, clock))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.read is not None:
            uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
            root = Path(os.environ.get("HPML_ROOT") or Path.cwd()).resolve()
            uri = uri or f"sqlite:///{root / 'mlflow.db'}"
            settings = (args.step, args.cache_control, args.clock_control)
            print(attach(args.read, args.run, uri, *settings))
        else:
            profile(args)
    except HpmlError as exc:
        print(f"hpml: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    with garbage.command():
        raise SystemExit(main())
