"""Ranges of config values, and the pass that checks them with their types before any build.

``RANGES`` declares the allowed range of every numeric knob whose code does not check it itself
(the data modules and hpml's callbacks check theirs in their constructors, with ``positive_int``
and friends); a wrong value would otherwise surface deep in Lightning or torch, mid-run. Types
come from the signatures of the targets the config instantiates (:mod:`.signatures`).
"""

from __future__ import annotations

import collections.abc as abc
import fnmatch
import math
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from hpml.config_tree import leaves
from hpml.errors import ConfigError
from hpml.validate.signatures import check_types

Num = int | float


@dataclass(frozen=True)
class Range:
    """An integer or a finite number between ``low`` and ``high`` (each inclusive unless
    ``*_open``). ``inf`` and ``nan`` parse as floats and pass every comparison a range makes
    (``nan`` fails them all, so it passes ``not value < low``): they are refused here first."""

    kind: type = int
    low: Num | None = None
    high: Num | None = None
    low_open: bool = False
    high_open: bool = False
    null: str | None = None  # what null means, when it is allowed
    note: str = ""

    def expected(self) -> str:
        noun = "an integer" if self.kind is int else "a finite number"
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            text = f"{noun} in {left}{self.low}, {self.high}{right}"
        elif self.low is not None:
            text = f"{noun} {'>' if self.low_open else '>='} {self.low}"
        elif self.high is not None:
            text = f"{noun} {'<' if self.high_open else '<='} {self.high}"
        else:
            text = noun
        if self.note:
            text += f" ({self.note})"
        return text + (f", or null ({self.null})" if self.null else "")

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.null is not None
        if isinstance(value, bool) or not isinstance(value, int if self.kind is int else Num):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)


class Fraction(Range):
    """A batch count (an integer >= 0) or a fraction of the batches in [0, 1], as Lightning."""

    def expected(self) -> str:
        return "an integer >= 0 (batches) or a fraction in [0.0, 1.0]"

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, Num):
            return False
        return value >= 0 if isinstance(value, int) else 0.0 <= value <= 1.0


FINITE = Range(float)  # any number with no declared range: inf and nan are never a knob's value
SEED = Range(int, 0, 2**32 - 1)
COUNT, STEPS = Range(int, 1), Range(int, 0)

# Keys are globs over the composed config; the first match decides.
RANGES: dict[str, Range] = {
    "seed": SEED,
    "replicate": STEPS,
    "threads": Range(int, 1, null="the process's own"),
    "data.seed": SEED,
    "data.noise": Range(float, 0),
    "data.signal": Range(float, 0, 1),
    "trainer.max_epochs": Range(int, -1, null="Lightning's default", note="-1: no limit"),
    "trainer.min_epochs": Range(int, 0, null="none"),
    "trainer.max_steps": Range(int, -1, note="-1: no limit"),
    "trainer.min_steps": Range(int, 0, null="none"),
    "trainer.log_every_n_steps": COUNT,
    "trainer.num_sanity_val_steps": Range(int, -1, note="-1: all"),
    "trainer.limit_*_batches": Fraction(),
    "trainer.overfit_batches": Fraction(),
    "trainer.accumulate_grad_batches": COUNT,
    "trainer.check_val_every_n_epoch": Range(int, 1, null="by val_check_interval"),
    "trainer.gradient_clip_val": Range(float, 0, null="no clipping"),
    "fuse.max_members": Range(int, 1, null="as many as fit the device's memory"),
    "fuse.memory_fraction": Range(float, 0, 1, low_open=True),
    "model.net.embedding_dim": COUNT,
    "model.net.hidden_size": COUNT,
    "model.net.num_layers": COUNT,
    "model.net.hidden": COUNT,
    "model.net.latent": COUNT,
    "model.net.dropout": Range(float, 0, 1, high_open=True),
    "model.optimizer.lr": Range(float, 0, low_open=True),
    "model.optimizer.momentum": Range(float, 0, 1, high_open=True),
    "model.optimizer.dampening": Range(float, 0, 1),
    "model.optimizer.weight_decay": Range(float, 0),
    "model.optimizer.eps": Range(float, 0, low_open=True),
    "model.scheduler.T_max": COUNT,
    "model.scheduler.step_size": COUNT,
    "model.scheduler.gamma": Range(float, 0, low_open=True),
    "model.scheduler.eta_min": Range(float, 0),
    "logger.system_metrics_interval_s": Range(float, 0, low_open=True),
    "logger.checkpoint_max_bytes": Range(int, 0, null="no cap", note="0: never uploaded"),
    "callbacks.perf.warmup_steps": STEPS,
    "callbacks.perf.inference_warmup_steps": STEPS,
    # a plain mapping to PerformanceMonitor (NoiseRule's fields): its types are not declared
    "callbacks.perf.noise.min_steps": STEPS,
    "callbacks.perf.noise.max_*_pct": Range(float, 0),
    "callbacks.target.value": Range(float, null="no target", note="the metric's target"),
    "callbacks.roofline.batch_size": Range(int, 1, null="the data's batch size"),
    "callbacks.roofline.peak_seconds": Range(float, 0, low_open=True),
    "callbacks.checkpoint.save_top_k": Range(int, -1, note="-1: every epoch"),
    "compile.tolerance": Range(float, 0, low_open=True),
    "profile.skip_first": STEPS,
    "profile.wait": STEPS,
    "profile.warmup": STEPS,
    "profile.active": COUNT,
    "profile.repeat": Range(int, 0, note="0: until training ends"),
    "profile.row_limit": COUNT,
    "trainer.profiler.line_count_restriction": Range(float, 0, low_open=True),
}


def range_for(key: str) -> Range | None:
    return next((r for pattern, r in RANGES.items() if fnmatch.fnmatchcase(key, pattern)), None)


def numbers(values: list[Any]) -> abc.Iterator[float]:
    """The floats of a list, nested lists included."""
    for value in values:
        if isinstance(value, list):
            yield from numbers(value)
        elif isinstance(value, float):
            yield value


def range_problems(resolved: dict[str, Any]) -> list[ConfigError]:
    """Every value outside its declared range, and every ``inf``/``nan`` anywhere: no knob of
    hpml, Lightning or torch takes one (an ``lr=inf`` trained to the end on NaN losses)."""
    found: dict[str, ConfigError] = {}
    betas = ((resolved.get("model") or {}).get("optimizer") or {}).get("betas")
    if betas is not None and not (
        isinstance(betas, abc.Sequence)
        and len(betas) == 2
        and all(Range(float, 0, 1, high_open=True).accepts(b) for b in betas)
    ):
        found["model.optimizer.betas"] = ConfigError(
            "model.optimizer.betas",
            list(betas) if isinstance(betas, abc.Sequence) else betas,
            "two finite numbers in [0, 1), e.g. [0.9, 0.999]",
        )
    for key, value in leaves(resolved):
        declared = range_for(key)
        if declared is None and isinstance(value, float) and not math.isfinite(value):
            declared = FINITE
        if key in found:
            continue
        if declared is not None and not declared.accepts(value):
            found[key] = ConfigError(key, value, declared.expected())
        elif isinstance(value, list) and not all(map(FINITE.accepts, numbers(value))):
            found[key] = ConfigError(key, value, "finite numbers")
    return list(found.values())


def interpolated_key(value: Any) -> str | None:
    """``seed`` for the value ``${seed}``; None for anything else."""
    text = str(value)
    plain = text.startswith("${") and text.endswith("}") and text.count("$") == 1
    return text[2:-1] if plain else None


def problems(cfg: DictConfig) -> list[ConfigError]:
    """Every value outside its declared range, then the first value of each config group whose
    type its target's signature refuses (a group's later ones are judged once it is fixed)."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    written = dict(leaves(OmegaConf.to_container(cfg, resolve=False)))
    found = range_problems(resolved)
    refused = {problem.key for problem in found}
    # data.seed: ${seed} is refused with seed=abc: the one value the user typed is named once
    found = [p for p in found if interpolated_key(written.get(p.key)) not in refused]
    for group, node in resolved.items():
        try:
            check_types(node, str(group))
        except ConfigError as exc:
            if exc.key not in refused:
                found.append(exc)
    return found
