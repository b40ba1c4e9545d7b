"""How a callback runs in a fused array (``fuse=array``): each callback class says so itself.

Imports nothing: the fusion planner reads this before anything is built.
"""

from __future__ import annotations

from enum import StrEnum


class InArray(StrEnum):
    """What a callback does when a sweep's jobs train as one array.

    ``PER_MEMBER``: one per member, in its own run. ``ONCE``: one on the whole array.
    ``NOT_IN_ARRAYS``: the array trains without it and still fuses. ``SERIAL``: a job with it does
    not fuse.
    """

    PER_MEMBER = "per member"
    ONCE = "once"
    NOT_IN_ARRAYS = "not in arrays"
    SERIAL = "serial"
