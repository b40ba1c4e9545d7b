"""``Pruner``: one object for every method and mode, for a schedule of steps.

    pruner = Pruner(L2Structured(), mode="physical")
    pruner.attach(net, example)          # resolve targets, record the original widths
    report = pruner.prune(net, 0.5)      # to 50% of the original, in place; call again to go on
    pruner.finalize(net)                 # masks folded into the weights (mask mode)

The amount is always measured against the original model, so repeated calls never compound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from hpml.errors import ConfigError, IncompatibleError, positive_int
from hpml.optimize.prune import mask as masks
from hpml.optimize.prune.amount import check_amount
from hpml.optimize.prune.lstm import LSTMPruner
from hpml.optimize.prune.methods import Method, Structured
from hpml.optimize.prune.stats import LayerStats, layer_stats
from hpml.optimize.prune.structured import ChannelPruner, check_runs, output_shapes
from hpml.optimize.prune.targets import (
    DEFAULT_EXCLUDE,
    DEFAULT_TARGETS,
    LAYER_TYPES,
    Target,
    resolve,
)


@dataclass
class PruneReport:
    """Where the targets stand after a ``prune`` call, against the original model."""

    amount: float
    layers: dict[str, LayerStats]
    widths: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def sparsity(self) -> float:
        """Share of the original targeted weight elements now removed or zero."""
        total = sum(s.numel_before for s in self.layers.values())
        alive = sum(s.nonzero for s in self.layers.values())
        return 1 - alive / total if total else 0.0

    @property
    def row_sparsity(self) -> float:
        """Share of the original targeted rows (output channels, gate rows) removed or all zero."""
        total = sum(s.rows_before for s in self.layers.values())
        alive = sum(s.rows_alive for s in self.layers.values())
        return 1 - alive / total if total else 0.0

    def table(self, method: str, mode: str) -> dict[str, Any]:
        """What ``prune/layers.json`` holds: the step, then each layer's widths and counts."""
        return {
            "method": method,
            "mode": mode,
            "amount": self.amount,
            "sparsity": self.sparsity,
            "row_sparsity": self.row_sparsity,
            "widths": {k: list(v) for k, v in self.widths.items()},
            "layers": {k: v.to_dict() for k, v in self.layers.items()},
        }


class Pruner:
    """Prune ``targets`` minus ``exclude`` of a model by ``method`` in ``mode``.

    Args:
        method: ranks what goes first (:mod:`hpml.optimize.prune.methods`).
        mode: ``physical`` (channels removed) or ``mask`` (zeroed); None: the method's default.
        targets, exclude: what is pruned (:mod:`hpml.optimize.prune.targets`).
        min_channels: no layer keeps fewer channels or hidden units (physical).
        embedding: also remove embedding dimensions (physical LSTM).
        coupled: layer names pruned together (default: the model's ``prune_coupled``).
        round_to: every width physical pruning leaves (channels, hidden units, embedding
            dimensions) is a multiple of it, rounded down as torch-pruning's ``round_to``
            (:func:`~hpml.optimize.prune.amount.units_to_keep`); masks keep every shape, so
            mask mode takes only 1.
    """

    def __init__(
        self,
        method: Method,
        mode: str | None = None,
        targets: Sequence[str] | None = DEFAULT_TARGETS,
        exclude: Sequence[str] | None = DEFAULT_EXCLUDE,
        min_channels: int = 1,
        embedding: bool = False,
        coupled: Sequence[Sequence[str]] | None = None,
        round_to: int = 1,
    ) -> None:
        mode = method.check_mode(mode)
        min_channels = positive_int("min_channels", min_channels)
        self.round_to = positive_int("round_to", round_to)
        if round_to != 1 and mode != "physical":
            raise ConfigError(
                "round_to",
                round_to,
                f"1 for {method.name} in mask mode: masks keep every shape, so there is no "
                "width to round (round_to rounds the channels physical pruning keeps)",
            )
        self.method, self.mode = method, mode
        self.targets_spec = list(targets) if targets else list(DEFAULT_TARGETS)
        self.exclude_spec = list(exclude) if exclude is not None else []
        self.min_channels, self.embedding, self.coupled = min_channels, embedding, coupled
        self.targets: list[Target] = []
        self.before: dict[str, LayerStats] = {}
        # brings a model to an amount of the original, in place; says which widths changed
        self._engine: masks.MaskPruner | LSTMPruner | ChannelPruner | None = None
        self._shapes: list[Any] = []
        self._example: Any = None

    def check(self, model: nn.Module) -> list[Target]:
        """The targets ``model`` (perhaps on the meta device) has; a ConfigError for an entry
        that names nothing in it."""
        return resolve(model, self.targets_spec, self.exclude_spec)

    def attach(self, model: nn.Module, example: Any) -> list[Target]:
        """Resolve the targets on the unpruned ``model`` and set up the engines."""
        self.targets = self.check(model)
        self.before = layer_stats(model, self.targets)
        self._example = example
        if self.mode == "mask":
            self._engine = masks.MaskPruner(self.method, self.targets)
            return self.targets
        self._shapes = output_shapes(model, example)
        modules = {t.module_name: t.module(model) for t in self.targets}
        lstms = [n for n, m in modules.items() if isinstance(m, nn.LSTM)]
        layers = [n for n, m in modules.items() if isinstance(m, LAYER_TYPES)]
        for name, module in modules.items():
            if isinstance(module, nn.RNNBase) and name not in lstms:
                raise IncompatibleError(
                    f"physical pruning supports nn.LSTM, not {type(module).__name__} ({name}); "
                    f"use prune.mode=mask"
                )
        others = sorted(set(modules) - set(lstms) - set(layers))
        if others:
            raise IncompatibleError(
                f"physical pruning removes channels of Conv, Linear and LSTM layers, not of "
                f"{type(modules[others[0]]).__name__} ({others[0]}); leave it out of "
                f"prune.targets or use prune.mode=mask"
            )
        if lstms and layers:
            raise IncompatibleError(
                f"physical pruning of {', '.join(layers)} beside an nn.LSTM is not supported "
                f"(torch-pruning cannot trace multi-layer LSTMs): add them to prune.exclude, "
                f"or use prune.mode=mask"
            )
        if lstms:  # hidden units ranked as rows: physical mode takes structured methods only
            assert isinstance(self.method, Structured)
            self._engine = LSTMPruner(
                model,
                example,
                lstms,
                self.method.scores,
                self.min_channels,
                self.embedding,
                self.round_to,
            )
        else:
            channels, coupled = self.method.channels, self.coupled
            self._engine = ChannelPruner(
                model, example, layers, channels, self.min_channels, coupled, self.round_to
            )
        return self.targets

    def prune(self, model: nn.Module, amount: float) -> PruneReport:
        """Bring the targets of ``model`` to ``amount`` of the original, in place."""
        amount = check_amount(amount)
        if self._engine is None:
            raise RuntimeError("call attach(model, example) before prune")
        widths = self._engine.prune(model, amount)
        if self.mode == "physical":
            check_runs(model, self._example, self._shapes)
        return self.report(model, amount, widths)

    def report(
        self, model: nn.Module, amount: float, widths: dict[str, tuple[int, int]] | None = None
    ) -> PruneReport:
        return PruneReport(amount, layer_stats(model, self.targets, self.before), widths or {})

    def finalize(self, model: nn.Module) -> nn.Module:
        """Make masks permanent (mask mode); physical pruning is permanent already."""
        if self.mode == "mask":
            masks.make_permanent(model)
        return model
