"""Physical channel pruning of Conv and Linear layers through torch-pruning's dependency graph.

torch-pruning groups the layers whose channels go together; each group is ranked by the method's
group importance and its lowest channels cut. hpml plans the cut itself rather than calling
``MetaPruner.step``: counts round as a user expects, no layer drops below ``min_channels``, kept
widths are multiples of ``round_to`` (as torch-pruning's), a gradual schedule never compounds,
and ``coupled`` layers (a VAE's ``mu`` and ``logvar`` heads) lose the same channels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch_pruning as tp
from torch import Tensor, nn

from hpml.analysis.compare import evaluating
from hpml.errors import IncompatibleError
from hpml.optimize.prune.amount import units_to_keep
from hpml.optimize.prune.targets import LAYER_TYPES
from hpml.tensors import tensors_in


class ChannelPruner:
    """Remove output channels of the Conv/Linear ``layers`` of ``model``, in place.

    Build it on the unpruned model: ``amount`` is of its widths. ``importance`` builds the
    torch-pruning importance that ranks the groups; each layer keeps a multiple of ``round_to``
    channels (:func:`~hpml.optimize.prune.amount.units_to_keep`).
    """

    def __init__(
        self,
        model: nn.Module,
        example: Any,
        layers: Sequence[str],
        importance: Callable[[], Any],
        min_channels: int = 1,
        coupled: Sequence[Sequence[str]] | None = None,
        round_to: int = 1,
    ) -> None:
        self.model, self.example = model, example
        self.layers = list(layers)
        self.importance = importance()
        self.min_channels, self.round_to = min_channels, round_to
        # by default the layers the model declares in ``prune_coupled``: outputs it combines
        # element-wise where tracing in eval mode cannot see it
        coupled = getattr(model, "prune_coupled", ()) if coupled is None else coupled
        self.coupled = [tuple(group) for group in coupled]
        self.names = {module: name for name, module in model.named_modules()}
        self.ignored = [
            m
            for n, m in model.named_modules()
            if (isinstance(m, LAYER_TYPES) and n not in self.layers) or isinstance(m, nn.RNNBase)
        ]
        self.graph = self._trace()
        roots = [g[0].dep.target.module for g in self._groups()]
        self.original = {self.names[m]: self.graph.get_out_channels(m) for m in roots}
        if not self.original:
            raise IncompatibleError(
                f"physical pruning found no channels it can remove in {type(model).__name__}: "
                f"the trace shows none of {', '.join(self.layers)} feeding a prunable layer; "
                f"use prune.mode=mask"
            )

    def _trace(self) -> tp.DependencyGraph:
        try:
            with evaluating([self.model]), torch.enable_grad():
                return tp.DependencyGraph().build_dependency(self.model, self.example)
        except Exception as exc:
            raise IncompatibleError(
                f"physical pruning cannot trace {type(self.model).__name__} "
                f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
                f"use prune.mode=mask"
            ) from exc

    def _groups(self) -> list[Any]:
        groups = self.graph.get_all_groups(
            ignored_layers=self.ignored, root_module_types=list(LAYER_TYPES)
        )
        return [g for g in groups if self.names.get(g[0].dep.target.module) in self.layers]

    def prune(self, model: nn.Module, amount: float) -> dict[str, tuple[int, int]]:
        """Cut each group to ``amount`` of its original width; ``{root: (before, after)}``.
        ``model`` must be the one traced at construction."""
        if model is not self.model:
            raise ValueError("ChannelPruner.prune got another model than the one it traced")
        scored: dict[str, tuple[Any, Tensor]] = {}
        for group in self._groups():
            imp = self.importance(group)
            if imp is not None:
                scored[self.names[group[0].dep.target.module]] = (group, imp.float().cpu())
        sets: list[tuple[str, ...]] = []
        for names in self.coupled:
            present = tuple(n for n in names if n in scored)
            widths = {len(scored[n][1]) for n in present}
            if len(present) > 1 and len(widths) == 1:
                sets.append(present)
        sets += [(n,) for n in scored if not any(n in s for s in sets)]
        plan: list[tuple[nn.Module, Any, list[int]]] = []
        widths: dict[str, tuple[int, int]] = {}
        for names in sets:
            imp = sum(scored[n][1] / scored[n][1].abs().mean().clamp_min(1e-12) for n in names)
            current = len(imp)
            original = self.original[names[0]]
            keep = units_to_keep(original, amount, self.min_channels, self.round_to)
            n_cut = max(0, current - keep)
            drop = torch.argsort(imp)[:n_cut].tolist()
            for name in names:
                widths[name] = (current, current - n_cut)
                if drop:
                    group = scored[name][0]
                    plan.append((group[0].dep.target.module, group[0].dep.handler, drop))
        for module, handler, drop in plan:
            self.graph.get_pruning_group(module, handler, drop).prune()
        return widths


def check_runs(model: nn.Module, example: Any, reference: Sequence[torch.Size]) -> None:
    """Fail in one line if the pruned model no longer runs or its first output changed shape
    (a VAE's other outputs, ``mu`` and ``logvar``, shrink on purpose)."""
    try:
        shapes = output_shapes(model, example)
    except Exception as exc:
        raise IncompatibleError(
            f"{type(model).__name__} no longer runs after physical pruning "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}): it hard-codes a width "
            f"the pruner changed; exclude that layer or use prune.mode=mask"
        ) from exc
    if shapes[:1] != list(reference)[:1]:
        raise IncompatibleError(
            f"physical pruning changed {type(model).__name__}'s output shape from "
            f"{tuple(reference[0])} to {tuple(shapes[0])}; exclude the output layer "
            f"(prune.exclude=[output_layer])"
        )


def output_shapes(model: nn.Module, example: Any) -> list[torch.Size]:
    with evaluating([model]), torch.no_grad():
        return [t.shape for t in tensors_in(model(example))]
