"""A run's config as its job made it: the overrides of its reproducible command (the tag
``hpml.command``), composed again to ask its data whether it can be held as tensors, and the
runs of its sweep a fused array could train with it."""

from __future__ import annotations

import shlex
import tempfile
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING

from hpml.errors import HpmlError, one_line
from hpml.report.groups import ignored, params_but

if TYPE_CHECKING:
    from mlflow.entities import Run

COMMAND = ["python", "-m", "hpml.train"]  # how the tag hpml.command begins


def overrides(run: Run) -> list[str]:
    """The overrides of the job that made ``run``, as its command gave them to Hydra."""
    text = run.data.tags.get("hpml.command", "")
    words = shlex.split(text)
    if words[: len(COMMAND)] != COMMAND:
        raise HpmlError(
            f"run {run.info.run_id} was not made by `python -m hpml.train` (tag hpml.command: "
            f"{text or 'none'}): advise reads the overrides of an hpml.train job"
        )
    return [word for word in words[len(COMMAND) :] if not word.startswith("-")]


def held(args: list[str]) -> tuple[bool | None, str]:
    """Whether the data of the job ``args`` compose can be held as tensors, as its data module
    says before reading a file (:meth:`~hpml.data.base.HpmlDataModule.in_memory_problem`),
    and why not; None where the config does not compose here."""
    from hydra.core.hydra_config import HydraConfig

    from hpml.build import build
    from hpml.train import compose_job

    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = compose_job(args, Path(tmp))
            try:
                problem = build("data", cfg.data).in_memory_problem()
            finally:
                HydraConfig.instance().cfg = None
    except Exception as exc:
        return None, f"not known: the run's config does not compose here ({one_line(exc)})"
    return problem is None, problem or ""


def fusable_patterns() -> list[str]:
    """The keys a fused array keeps shapes in (``conf/fuse/array.yaml``'s ``fusable``)."""
    from omegaconf import OmegaConf

    from hpml.build import CONF_DIR

    return list(OmegaConf.load(CONF_DIR / "fuse" / "array.yaml").fuse.fusable)


def fusable(run: Run, sweep: list[Run]) -> int:
    """How many of ``sweep``'s runs (``run`` among them) differ from ``run`` only in keys a
    fused array keeps shapes in, repeats and seeds: the members one array could train."""
    patterns = fusable_patterns()

    def rest(other: Run) -> frozenset[tuple[str, str]]:
        kept = params_but(other, ignored)
        return frozenset((k, v) for k, v in kept if not any(fnmatch(k, p) for p in patterns))

    mine = rest(run)
    return max(1, sum(rest(other) == mine for other in sweep))
