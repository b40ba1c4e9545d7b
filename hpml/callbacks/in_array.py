"""How a callback runs in a fused array (``fuse=array``): each callback class says so itself.

Imports nothing: the fusion planner reads this before anything is built.
"""

from __future__ import annotations

from enum import StrEnum


class InArray(StrEnum):
    """What a callback does when a sweep's jobs train as one array.

    ``PER_MEMBER``: each member gets its own, in its own run (``for_members(size)``: the model
    statistics, the time to target). ``ONCE``: one on the whole array (the speed monitor: every
    member reads every batch). ``NOT_IN_ARRAYS``: the array trains without it and still fuses
    (the memory breakdown measures one net's step; an array keeps no checkpoint). ``SERIAL``: a
    job with it does not fuse, its sweep runs one job at a time (it changes or measures the one
    net it is given, or a search's trial needs its own job).
    """

    PER_MEMBER = "per member"
    ONCE = "once"
    NOT_IN_ARRAYS = "not in arrays"
    SERIAL = "serial"
