"""What an hpml callback may tell the lifecycle, each with a default that works in every mode.

Beyond Lightning's hooks: how it runs in a fused array, what it refuses in a model before
training, and which stages of the net it recomputes. A plain ``lightning.Callback`` is taken as
saying nothing, and its sweep runs one job at a time after one line naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import lightning as L
from torch import nn

from hpml.callbacks.in_array import InArray


class HpmlCallback(L.Callback):
    """A Lightning callback that also answers hpml's lifecycle.

    Class attributes:
        in_array: how it runs when a sweep's jobs train as one fused array (``SERIAL``: its
            sweep does not fuse).
        recomputes_stages: whether it recomputes stages of the eager net in backward (activation
            checkpointing), which a step that replaces the net during fit would rename.
    """

    in_array: ClassVar[InArray] = InArray.SERIAL
    recomputes_stages: bool = False

    def for_members(self, size: int) -> list[L.Callback]:
        """The callbacks doing this one's work on an array of ``size`` members (``ONCE``: one
        for them all, ``PER_MEMBER``: one per member); itself by default."""
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


def declared(target: Any) -> InArray | None:
    """How ``target`` (the class a callback's ``_target_`` names) runs in an array; None for a
    class that is no :class:`HpmlCallback` (a Lightning callback, a user's own): it says nothing."""
    if isinstance(target, type) and issubclass(target, HpmlCallback):
        return target.in_array
    return None


def qualified(target: Any) -> str:
    """``package.module.Name`` of a class (or any object ``_target_`` names), for a line."""
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', target)}"


def undeclared(target: Any) -> str:
    """Why ``target``, which says nothing of arrays, keeps its sweep from fusing, as the end of
    a line naming it."""
    values = [how.value for how in InArray]
    choices = f"{', '.join(values[:-1])} or {values[-1]}"
    return f"{qualified(target)} does not say how it runs in an array (in_array: {choices})"
