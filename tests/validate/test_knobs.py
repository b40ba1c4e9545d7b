"""A knob's range is read off the parameter that declares it, through the config's ``_target_``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from hpml.ranges import Count, Range
from hpml.validate.knobs import range_problems


@dataclass(frozen=True)
class Limits:
    """What a plain mapping under ``limits`` stands for."""

    share: Annotated[float, Range(gt=0, le=1)] = 0.5


class Sampler:
    """A plug-in as a user would write one: its ranges on its parameters, nothing else."""

    def __init__(
        self,
        rounds: Count = 3,
        rate: Annotated[float | None, Range(gt=0, null="as fast as it goes")] = None,
        limits: Limits | dict | None = None,
        label: str = "",
    ) -> None:
        self.rounds, self.rate, self.limits, self.label = rounds, rate, limits, label


def refused(**knobs: object) -> list[str]:
    node = {"_target_": f"{__name__}.Sampler", **knobs}
    return [str(problem) for problem in range_problems({"callbacks": {"sampler": node}})]


def test_values_inside_the_declared_ranges_pass() -> None:
    assert refused(rounds=1, rate=None, limits={"share": 1.0}, label="x") == []
    assert refused(rate=0.25, limits={"share": 1e-9}) == []


def test_each_value_outside_its_declared_range_is_one_line_naming_what_is_valid() -> None:
    assert refused(rounds=0, rate=-1.0, limits={"share": 1.5}) == [
        "callbacks.sampler.rounds=0 is invalid: expected an integer >= 1",
        "callbacks.sampler.rate=-1.0 is invalid: expected a finite number > 0, "
        "or null (as fast as it goes)",
        "callbacks.sampler.limits.share=1.5 is invalid: expected a finite number in (0, 1]",
    ]


def test_the_kind_comes_from_the_annotated_type_and_inf_is_never_in_range() -> None:
    assert refused(rounds=2.5, rate=float("inf")) == [
        "callbacks.sampler.rounds=2.5 is invalid: expected an integer >= 1",
        "callbacks.sampler.rate=inf is invalid: expected a finite number > 0, "
        "or null (as fast as it goes)",
    ]
    assert refused(rounds=True) == [
        "callbacks.sampler.rounds=True is invalid: expected an integer >= 1"
    ]


def test_a_parameter_without_a_range_is_judged_only_for_inf_and_nan() -> None:
    assert refused(label="anything") == []
    node = {"_target_": f"{__name__}.Sampler", "unknown": float("nan")}
    assert [str(p) for p in range_problems({"x": node})] == [
        "x.unknown=nan is invalid: expected a finite number"
    ]


if TYPE_CHECKING:
    from decimal import Decimal  # a name only a type checker sees


class Hinted:
    """One annotation that cannot be resolved at run time beside a declared range."""

    def __init__(self, rounds: Count = 3, unit: Decimal | None = None) -> None:
        self.rounds, self.unit = rounds, unit


def test_a_hint_only_a_type_checker_resolves_hides_no_other_range() -> None:
    node = {"_target_": f"{__name__}.Hinted", "rounds": 0}
    assert [str(p) for p in range_problems({"x": node})] == [
        "x.rounds=0 is invalid: expected an integer >= 1"
    ]
