"""What an hpml callback may tell the lifecycle, each with a default that works in every mode.

Lightning asks a callback for hooks only; hpml's lifecycle also asks how it runs in a fused
array (:mod:`hpml.callbacks.in_array`), what it refuses in a model before training, and which
stages of the net it recomputes. :class:`HpmlCallback` declares these with defaults, so a
callback that overrides none of them trains in a single run and makes a fused sweep run one job
at a time; a plain ``lightning.Callback`` is taken as saying nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import lightning as L
from torch import nn

from hpml.callbacks.in_array import InArray


class HpmlCallback(L.Callback):
    """A Lightning callback that also answers hpml's lifecycle.

    Class attributes:
        in_array: how it runs when a sweep's jobs train as one fused array (``SERIAL``: its
            sweep does not fuse).
        array_knobs: keyword arguments over its config's when it is built for an array
            (``ONCE``), e.g. to turn off a count the members' own callbacks make.
    """

    in_array: ClassVar[InArray] = InArray.SERIAL
    array_knobs: ClassVar[Mapping[str, Any]] = {}

    def for_members(self, size: int) -> list[L.Callback]:
        """The callbacks doing this one's work for each of ``size`` members of an array
        (``in_array = PER_MEMBER``); itself by default."""
        return [self]

    def check_model(
        self,
        pl_module: L.LightningModule,
        build_net: Callable[[], nn.Module],
        input_shape: Sequence[int],
        name: str,
    ) -> None:
        """Refuse, before training, what this callback cannot do to the model (raise a
        :class:`~hpml.errors.ConfigError`); nothing by default.

        Args:
            pl_module: the model, built on the meta device.
            build_net: builds a real CPU net, for a check that must run one.
            input_shape: one sample's shape.
            name: the ``model=`` option, for the line a refusal prints.
        """

    def stages(self, model: nn.Module) -> list[Any]:
        """The stages of ``model`` this callback recomputes in backward (activation
        checkpointing); none by default. A step that replaces the net is refused beside it."""
        return []
