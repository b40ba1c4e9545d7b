"""Each callback class says how it runs in a fused array (``hpml.callbacks.in_array``)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import lightning as L
import pytest

import hpml.callbacks
from hpml.callbacks.in_array import InArray, array_knobs, declared, undeclared
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


def test_every_callback_class_of_hpml_says_how_it_runs_in_an_array() -> None:
    classes = hpml_callbacks()
    assert len(classes) >= 15
    silent = [cls.__qualname__ for cls in classes if declared(cls) is None]
    assert silent == []


class Twice(L.Callback):
    in_array = "twice"


class NoHook(L.Callback):
    in_array = InArray.PER_MEMBER


@pytest.mark.parametrize(
    ("target", "how"),
    [
        (FailAtEpoch, InArray.ONCE),
        (EachMember, InArray.PER_MEMBER),  # as a string, with its for_members
        (Undeclared, None),
        (Twice, None),
        (NoHook, None),  # per member, with no way to make the members' callbacks
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
    assert undeclared(NoHook).endswith(
        "NoHook says in_array=per member but has no for_members(size)"
    )
    assert undeclared(Twice).endswith(
        "Twice says in_array='twice', none of per member, once, not in arrays or serial"
    )


def test_array_knobs_are_the_classs_own_and_a_copy() -> None:
    from hpml.callbacks.perf import PerformanceMonitor

    knobs = array_knobs(PerformanceMonitor)
    assert knobs == {"count_flops": False}
    knobs["count_flops"] = True
    assert array_knobs(PerformanceMonitor) == {"count_flops": False}
    assert array_knobs(FailAtEpoch) == {}
