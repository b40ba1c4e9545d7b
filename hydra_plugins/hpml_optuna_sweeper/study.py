"""The Optuna side of a search, apart from Hydra's launching: a sweep override as an Optuna
distribution, a job's value for its trial, a stored study's fit with the search space, and the
importances of the study's parameters."""

from __future__ import annotations

import logging
import math
from typing import Any

from hydra.core.override_parser.types import Override, Transformer
from hydra.core.utils import JobReturn, JobStatus

log = logging.getLogger(__name__)


def distribution(override: Override) -> Any:
    """The Optuna distribution of a sweep override: ``choice(...)`` (and ``a,b``) categorical,
    ``range(a,b[,step])`` stepped over its values, ``interval(a,b)`` float, ``tag(log, ...)``
    log-scaled (integer where both ends are integers)."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    value = override.value()
    if override.is_choice_sweep() or override.is_range_sweep():
        values = list(override.sweep_iterator(transformer=Transformer.encode))
    if override.is_choice_sweep() or (override.is_range_sweep() and value.shuffle):
        return CategoricalDistribution(values)
    if override.is_range_sweep():
        if all(isinstance(v, int) for v in (value.start, value.stop, value.step)):
            return IntDistribution(value.start, max(values), step=value.step)
        return FloatDistribution(value.start, max(values), step=value.step)
    if override.is_interval_sweep():
        log_scale = "log" in value.tags
        if log_scale and float(value.start).is_integer() and float(value.end).is_integer():
            return IntDistribution(int(value.start), int(value.end), log=True)
        return FloatDistribution(value.start, value.end, log=log_scale)
    raise ValueError(f"{override.input_line}: not a sweep Optuna can sample")


def param_importances(study: Any, optuna: Any) -> dict[str, float]:
    """Each parameter's share of the variance of the study's values (Optuna's default
    evaluator, PED-ANOVA; they sum to 1), or nothing where the completed trials cannot tell
    (fewer than two, or one value for every trial)."""
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if len(complete) < 2:  # Optuna would warn and give every parameter the same share
        return {}
    try:
        found = optuna.importance.get_param_importances(study)
    except (ValueError, RuntimeError) as exc:
        log.info(f"no parameter importances: {exc}")
        return {}
    return {key: float(value) for key, value in found.items()}


def job_value(job_return: JobReturn) -> tuple[float | None, str | None]:
    """The job's value for the study, or None and why: a job that raised, returned NaN (hpml's
    failed job in a sweep) or returned no number."""
    if job_return.status == JobStatus.FAILED:
        return None, f"the job raised {job_return._return_value!r}"
    value = job_return.return_value
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None, f"the job returned {value!r}, not a number (is optimized_metric logged?)"
    return (None, "its job failed (see its train.log)") if math.isnan(value) else (value, None)


def check_compatible(study: Any, space: dict[str, Any]) -> None:
    """Refuse a search space whose distributions differ from those the study's trials used."""
    from optuna.distributions import check_distribution_compatibility

    for trial in study.trials:
        for name, used in trial.distributions.items():
            if name in space:
                try:
                    check_distribution_compatibility(used, space[name])
                except ValueError:
                    raise ValueError(
                        f"{name} is sampled from {space[name]}, but trial {trial.number} of the "
                        f"stored study used {used}: give the new space another "
                        "hydra.sweeper.study_name"
                    ) from None
