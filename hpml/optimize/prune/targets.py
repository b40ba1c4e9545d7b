"""Which weights a pruner touches: ``targets`` minus ``exclude``, named as users name them.

An entry is a module type name (``Linear``), a module or parameter name or glob (``features.*``,
``lstm.weight_hh_l*``), or ``output_layer`` (``exclude`` only: the last Linear or Conv layer).
Only weights are pruned, never biases.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor, nn

from hpml.errors import ConfigError

OUTPUT_LAYER = "output_layer"
DEFAULT_TARGETS: tuple[str, ...] = ("Linear", "Conv1d", "Conv2d", "Conv3d", "LSTM")
DEFAULT_EXCLUDE: tuple[str, ...] = (OUTPUT_LAYER,)
LAYER_TYPES = (nn.Linear, nn.modules.conv._ConvNd)


@dataclass(frozen=True)
class Target:
    """One weight to prune: ``module_name.param_name`` (``module_name`` is ``""`` at the root)."""

    module_name: str
    param_name: str

    @property
    def name(self) -> str:
        return f"{self.module_name}.{self.param_name}" if self.module_name else self.param_name

    def module(self, model: nn.Module) -> nn.Module:
        return model.get_submodule(self.module_name)

    def tensor(self, model: nn.Module) -> Tensor:
        """The weight as the forward pass sees it (with any mask applied)."""
        return getattr(self.module(model), self.param_name)


def weight_names(module: nn.Module) -> list[str]:
    """The prunable weights a module owns directly: RNN weight matrices, else ``weight``."""
    if isinstance(module, nn.RNNBase):
        return [n for n in module._flat_weights_names if n.startswith("weight")]
    params = dict(module.named_parameters(recurse=False))
    if "weight" in params or "weight_orig" in params:
        return ["weight"]
    return []


def output_layer(model: nn.Module) -> str | None:
    """Name of the last Linear or Conv layer registered: the model's output/classifier layer."""
    layers = [name for name, module in model.named_modules() if isinstance(module, LAYER_TYPES)]
    return layers[-1] if layers else None


def _matches(entry: str, target: Target, model: nn.Module) -> bool:
    module = target.module(model)
    if any(cls.__name__ == entry for cls in type(module).__mro__[:-1]):
        return True
    return fnmatch.fnmatchcase(target.name, entry) or fnmatch.fnmatchcase(target.module_name, entry)


def _select(
    model: nn.Module, entries: Sequence[str], key: str, candidates: list[Target]
) -> list[Target]:
    chosen: dict[Target, None] = {}
    types = sorted({type(model.get_submodule(t.module_name)).__name__ for t in candidates})
    for entry in entries:
        if not isinstance(entry, str):
            raise ConfigError(key, entry, "a list of module types, module or parameter names")
        if entry == OUTPUT_LAYER:
            name = output_layer(model)
            hits = [t for t in candidates if t.module_name == name] if name is not None else []
            if key == "targets" and not hits:
                raise ConfigError(key, entry, f"{OUTPUT_LAYER} in exclude only")
        else:
            hits = [t for t in candidates if _matches(entry, t, model)]
            if not hits:
                examples = ", ".join(t.name for t in candidates[:4])
                raise ConfigError(
                    key,
                    entry,
                    f"a module type ({', '.join(types)}) or a layer or weight name of "
                    f"{type(model).__name__} (e.g. {examples}); it matches nothing",
                )
        chosen.update(dict.fromkeys(hits))
    return list(chosen)


def resolve(model: nn.Module, targets: Sequence[str], exclude: Sequence[str]) -> list[Target]:
    """The weights to prune, in registration order; raises ConfigError naming the bad key."""
    candidates = [Target(n, p) for n, m in model.named_modules() for p in weight_names(m)]
    if not candidates:
        raise ConfigError(
            "targets", list(targets), f"a model with weights; {type(model).__name__} has none"
        )
    defaults = list(targets) == list(DEFAULT_TARGETS)
    if defaults:  # the defaults name types a model may lack: keep the ones present
        present = {
            cls.__name__
            for t in candidates
            for cls in type(model.get_submodule(t.module_name)).__mro__
        }
        targets = [t for t in targets if t in present] or targets
    chosen = _select(model, targets, "targets", candidates)
    dropped = set(_select(model, list(exclude or []), "exclude", candidates))
    kept = [t for t in chosen if t not in dropped]
    if not kept:
        raise ConfigError(
            "exclude",
            list(exclude or []),
            f"to leave something to prune: it removes every targeted weight "
            f"({', '.join(t.name for t in chosen)})",
        )
    return kept
