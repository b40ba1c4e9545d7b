"""Each callback class says how it runs in a fused array (``HpmlCallback.in_array``)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import lightning as L
import pytest

import hpml.callbacks
from hpml.callbacks.base import HpmlCallback, declared, undeclared
from hpml.callbacks.in_array import InArray
from tests.helpers import EachMember, FailAtEpoch, Undeclared


def hpml_callbacks() -> list[type]:
    """Every Lightning callback class defined in a module of ``hpml.callbacks``."""
    found = []
    for info in pkgutil.iter_modules(hpml.callbacks.__path__, "hpml.callbacks."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, L.Callback) and cls.__module__ == module.__name__:
                found.append(cls)
    return found


def test_every_callback_class_of_hpml_is_an_hpml_callback() -> None:
    classes = hpml_callbacks()
    assert len(classes) >= 15
    assert [cls.__qualname__ for cls in classes if not issubclass(cls, HpmlCallback)] == []


@pytest.mark.parametrize(
    ("target", "how"),
    [
        (FailAtEpoch, InArray.ONCE),
        (EachMember, InArray.PER_MEMBER),
        (HpmlCallback, InArray.SERIAL),  # the default
        (Undeclared, None),
        (None, None),
    ],
)
def test_what_a_class_declares(target: object, how: InArray | None) -> None:
    assert declared(target) is how


def test_the_line_says_what_is_missing() -> None:
    assert undeclared(Undeclared) == (
        "tests.helpers.Undeclared does not say how it runs in an array (in_array: per member, "
        "once, not in arrays or serial)"
    )


def test_perf_runs_once_on_an_array_without_its_flop_count() -> None:
    from hpml.callbacks.perf import PerformanceMonitor

    perf = PerformanceMonitor()
    assert perf.count_flops is True
    [once] = perf.for_members(3)
    assert once is perf and once.count_flops is False
