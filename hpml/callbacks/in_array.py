"""How a callback runs in a fused array (``fuse=array``): each callback class says so itself.

A callback class declares ``in_array`` (a class attribute, an :class:`InArray`), and the fusion
planner (:mod:`hpml.fused.plan`) and the array's assembly (:mod:`hpml.fused.members`) read it
off the class its config's ``_target_`` names; no list of callback names decides. A class that
declares nothing (a user's ``+callbacks.x._target_=...``, a Lightning callback) makes its sweep
run one job at a time, after one line naming it. Imports nothing: the planner reads this before
anything is built.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

ATTRIBUTE = "in_array"
MEMBERS_HOOK = "for_members"  # PER_MEMBER: for_members(size) -> the callbacks doing its work
KNOBS = "array_knobs"  # optional: keyword arguments over its config's, on an array only


class InArray(StrEnum):
    """What a callback does when a sweep's jobs train as one array (a string works too:
    ``in_array = "once"``, for a callback outside hpml that does not import it)."""

    PER_MEMBER = "per member"
    """each member gets its own, in its own run: the class's ``for_members(size)`` (on the
    callback built from its config) gives the callbacks that do its work for ``size`` members
    (:class:`~hpml.callbacks.model_stats.ModelStats`,
    :class:`~hpml.callbacks.target.TimeToTarget`)"""
    ONCE = "once"
    """one callback on the whole array, built from its config with the class's
    ``array_knobs`` over it (the speed monitor: every member reads every batch)"""
    NOT_IN_ARRAYS = "not in arrays"
    """the array trains without it and still fuses (the memory breakdown measures one net's
    step; an array keeps no checkpoints)"""
    SERIAL = "serial"
    """a job with it does not fuse: its sweep runs one job at a time (it changes or measures
    the one net it is given, or a search's trial needs its own job)"""


def declared(target: Any) -> InArray | None:
    """What ``target`` (a callback class, or any object ``_target_`` names) says of how it runs
    in an array; None when it says nothing, or nothing usable (a value outside :class:`InArray`,
    or PER_MEMBER without ``for_members``)."""
    value = getattr(target, ATTRIBUTE, None)
    if value is None:
        return None
    try:
        how = InArray(value)
    except (ValueError, TypeError):
        return None
    if how is InArray.PER_MEMBER and not callable(getattr(target, MEMBERS_HOOK, None)):
        return None
    return how


def array_knobs(target: Any) -> dict[str, Any]:
    """The keyword arguments a callback is built with on an array, over its config's (its
    class's ``array_knobs``; none when it has none)."""
    return dict(getattr(target, KNOBS, None) or {})


def qualified(target: Any) -> str:
    """``package.module.Name`` of a class (or any object ``_target_`` names), for a line."""
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', target)}"


def undeclared(target: Any) -> str:
    """Why ``target``, which :func:`declared` found saying nothing usable, keeps its sweep from
    fusing, as the end of a line naming it."""
    name, value = qualified(target), getattr(target, ATTRIBUTE, None)
    values = [how.value for how in InArray]
    choices = f"{', '.join(values[:-1])} or {values[-1]}"
    if value is None:
        return f"{name} does not say how it runs in an array (in_array: {choices})"
    if value in values:  # per member, without its hook
        return f"{name} says in_array={value} but has no {MEMBERS_HOOK}(size)"
    return f"{name} says in_array={value!r}, none of {choices}"
