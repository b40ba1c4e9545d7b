"""``Pruner``: one object for every method and mode, usable from plain PyTorch.

    pruner = Pruner(L2Structured(), mode="physical")   # or Pruner("l2_structured", ...)
    pruner.attach(net, example)          # resolve targets, record the original widths
    report = pruner.prune(net, 0.5)      # to 50% of the original, in place; call again to go on
    pruner.finalize(net)                 # masks folded into the weights (mask mode)

Methods: the classes of :mod:`hpml.optimize.prune.methods` or any plug-in subclass (unstructured
ones mask only; structured ones mask or physical, physical by default; each says so itself).
Physical mode removes output channels of Conv/Linear layers through torch-pruning and hidden
units of ``nn.LSTM`` through :mod:`hpml.optimize.prune.lstm`; mask mode zeroes weights through
``torch.nn.utils.prune``. Every engine has one ``prune(model, amount)``. The amount is always
measured against the original model, so repeated calls (a gradual schedule) never compound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from torch import Tensor, nn

from hpml.errors import ConfigError, IncompatibleError
from hpml.optimize.prune import mask as masks
from hpml.optimize.prune.amount import check_amount
from hpml.optimize.prune.lstm import LSTMPruner
from hpml.optimize.prune.methods import MODES, Method, named
from hpml.optimize.prune.stats import LayerStats, layer_stats
from hpml.optimize.prune.structured import ChannelPruner, check_runs, output_shapes
from hpml.optimize.prune.targets import DEFAULT_EXCLUDE, DEFAULT_TARGETS, Target, resolve

__all__ = ["MODES", "Engine", "PruneReport", "Pruner"]


class Engine(Protocol):
    """What every engine does: bring ``model`` to ``amount`` of the original, in place, and say
    which layers changed width (``{name: (before, after)}``; empty for masks)."""

    def prune(self, model: nn.Module, amount: float) -> dict[str, tuple[int, int]]: ...


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


class Pruner:
    """Prune ``targets`` minus ``exclude`` of a model by ``method`` in ``mode``.

    ``method``: a :class:`~hpml.optimize.prune.methods.Method`, or the ``name`` of one.
    """

    def __init__(
        self,
        method: Method | str = "l1_structured",
        mode: str | None = None,
        targets: Sequence[str] | None = DEFAULT_TARGETS,
        exclude: Sequence[str] | None = DEFAULT_EXCLUDE,
        min_channels: int = 1,
        embedding: bool = False,
        coupled: Sequence[Sequence[str]] | None = None,
    ) -> None:
        spec = named(method) if isinstance(method, str) else method
        mode = spec.check_mode(mode)
        if isinstance(min_channels, bool) or not isinstance(min_channels, int) or min_channels < 1:
            raise ConfigError("min_channels", min_channels, "a positive integer")
        self.method = spec.name or type(spec).__name__
        self.spec, self.mode = spec, mode
        self.targets_spec = list(targets) if targets else list(DEFAULT_TARGETS)
        self.exclude_spec = list(exclude) if exclude is not None else []
        self.min_channels, self.embedding, self.coupled = min_channels, embedding, coupled
        self.targets: list[Target] = []
        self.before: dict[str, LayerStats] = {}
        self._engines: list[Engine] = []
        self._shapes: list[Any] = []
        self._example: Any = None

    def check(self, model: nn.Module) -> list[Target]:
        """The targets ``model`` has (a ConfigError for an entry that names nothing in it);
        ``model`` may be on the meta device: nothing is computed."""
        return resolve(model, self.targets_spec, self.exclude_spec)

    def attach(self, model: nn.Module, example: Any) -> list[Target]:
        """Resolve the targets on the unpruned ``model`` and set up the engines."""
        self.targets = self.check(model)
        self.before = layer_stats(model, self.targets)
        self._example = example
        if self.mode == "mask":
            self._engines = [masks.MaskPruner(self.spec, self.targets)]
            return self.targets
        self._shapes = output_shapes(model, example)
        modules = list(dict.fromkeys(t.module_name for t in self.targets))
        lstms = [n for n in modules if isinstance(model.get_submodule(n), nn.LSTM)]
        rnns = [
            n for n in modules if isinstance(model.get_submodule(n), nn.RNNBase) and n not in lstms
        ]
        others = [n for n in modules if n not in lstms and n not in rnns]
        layers = [
            n
            for n in others
            if isinstance(model.get_submodule(n), nn.Linear | nn.modules.conv._ConvNd)
        ]
        if rnns:
            raise IncompatibleError(
                f"physical pruning supports nn.LSTM, not "
                f"{type(model.get_submodule(rnns[0])).__name__} ({rnns[0]}); "
                f"use prune.mode=mask"
            )
        if set(others) - set(layers):
            name = sorted(set(others) - set(layers))[0]
            raise IncompatibleError(
                f"physical pruning removes channels of Conv, Linear and LSTM layers, not of "
                f"{type(model.get_submodule(name)).__name__} ({name}); leave it out of "
                f"prune.targets or use prune.mode=mask"
            )
        if lstms and layers:
            raise IncompatibleError(
                f"physical pruning of {', '.join(layers)} beside an nn.LSTM is not supported "
                f"(torch-pruning cannot trace multi-layer LSTMs): add them to prune.exclude, "
                f"or use prune.mode=mask"
            )
        if lstms:
            self._engines = [
                LSTMPruner(
                    model,
                    example,
                    lstms,
                    self.spec.units,
                    self.min_channels,
                    self.embedding,
                )
            ]
        else:
            self._engines = [
                ChannelPruner(
                    model, example, layers, self.spec.channels, self.min_channels, self.coupled
                )
            ]
        return self.targets

    def prune(self, model: nn.Module, amount: float) -> PruneReport:
        """Bring the targets of ``model`` to ``amount`` of the original, in place."""
        amount = check_amount(amount)
        if not self._engines:
            raise RuntimeError("call attach(model, example) before prune")
        widths: dict[str, tuple[int, int]] = {}
        for engine in self._engines:
            widths |= engine.prune(model, amount)
        if self.mode == "physical":
            check_runs(model, self._example, self._shapes)
        return self.report(model, amount, widths)

    def report(
        self, model: nn.Module, amount: float, widths: dict[str, tuple[int, int]] | None = None
    ) -> PruneReport:
        return PruneReport(amount, layer_stats(model, self.targets, self.before), widths or {})

    def mask_alone(self, weight: Tensor, amount: float) -> Tensor:
        """The mask this pruner's method gives ``weight`` pruned alone (sensitivity scans)."""
        return self.spec.mask_alone(weight, check_amount(amount))

    def finalize(self, model: nn.Module) -> nn.Module:
        """Make masks permanent (mask mode); physical pruning is permanent already."""
        if self.mode == "mask":
            masks.make_permanent(model)
        return model
