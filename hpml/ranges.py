"""What values a knob accepts, declared on the parameter that takes it.

A constructor parameter says its range in its annotation, ``Annotated[float, Range(gt=0)]``;
:mod:`hpml.validate.knobs` reads it off the ``_target_`` a config names and refuses a value
outside it before anything is built; :func:`refuse_out_of_range` refuses the same values in a
record built directly. A leaf module, so any layer may declare a range.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

Num = int | float


@dataclass(frozen=True)
class Range:
    """A finite number (an integer where the annotated type is ``int``) within the bounds given
    (``ge``/``gt`` below, ``le``/``lt`` above); never ``inf`` nor ``nan``. ``null``: what null
    means, where it is allowed; ``auto``: what the string ``auto`` chooses, where it is allowed."""

    ge: Num | None = None
    gt: Num | None = None
    le: Num | None = None
    lt: Num | None = None
    null: str | None = None
    auto: str | None = None
    note: str = ""
    kind: type = float  # int where the annotation says so: set by whoever reads the annotation

    def expected(self) -> str:
        noun = "an integer" if self.kind is int else "a finite number"
        low = self.gt if self.gt is not None else self.ge
        high = self.lt if self.lt is not None else self.le
        if low is not None and high is not None:
            left, right = "(" if self.gt is not None else "[", ")" if self.lt is not None else "]"
            text = f"{noun} in {left}{low}, {high}{right}"
        elif low is not None:
            text = f"{noun} {'>' if self.gt is not None else '>='} {low}"
        elif high is not None:
            text = f"{noun} {'<' if self.lt is not None else '<='} {high}"
        else:
            text = noun
        if self.note:
            text += f" ({self.note})"
        if self.auto:
            text += f", or auto ({self.auto})"
        return text + (f", or null ({self.null})" if self.null else "")

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.null is not None
        if value == "auto":
            return self.auto is not None
        kind = int if self.kind is int else Num
        if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
            return False
        return not (
            (self.ge is not None and value < self.ge)
            or (self.gt is not None and value <= self.gt)
            or (self.le is not None and value > self.le)
            or (self.lt is not None and value >= self.lt)
        )


SEED_RANGE = Range(ge=0, le=2**32 - 1)  # numpy's seeds

Count = Annotated[int, Range(ge=1)]  # how many of something there must be at least one of
Steps = Annotated[int, Range(ge=0)]  # how many steps (batches, passes), none allowed
Seed = Annotated[int, SEED_RANGE]
Positive = Annotated[float, Range(gt=0)]
NonNegative = Annotated[float, Range(ge=0)]
Percent = Annotated[float, Range(ge=0, le=100)]  # a share of a whole


def union_members(hint: Any) -> tuple[Any, ...]:
    """The types of a union hint (``int | None``: ``int``, ``NoneType``); any other, alone."""
    origin = typing.get_origin(hint)
    return typing.get_args(hint) if origin in (typing.Union, types.UnionType) else (hint,)


def declared_range(hint: Any) -> Range | None:
    """The :class:`Range` an annotation carries, its kind (integer or number) from the type it
    annotates: ``Annotated[int, Range(ge=1)]``, also inside ``... | None``."""
    for part in union_members(hint):
        if typing.get_origin(part) is Annotated:
            found = [m for m in part.__metadata__ if isinstance(m, Range)]
            if found:
                kinds = [a for a in union_members(part.__origin__) if a is not type(None)]
                kind = int if kinds and all(k is int for k in kinds) else float
                return dataclasses.replace(found[0], kind=kind)
    return None


def refuse_out_of_range(record: Any, error: Callable[[str, Any, str], Exception]) -> None:
    """Raise ``error(field, value, expected)`` for the first field of the dataclass ``record``
    whose value is outside the range its annotation declares (``Annotated[int, Range(ge=1)]``):
    a record built directly refuses what the config check refuses. ``error`` is the caller's,
    since this leaf imports no other."""
    hints = typing.get_type_hints(type(record), include_extras=True)
    for field in dataclasses.fields(record):
        allowed, value = declared_range(hints[field.name]), getattr(record, field.name)
        if allowed is not None and not allowed.accepts(value):
            raise error(field.name, value, allowed.expected())
