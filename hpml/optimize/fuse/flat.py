"""The members' parameters of a fused array as rows of one tensor: what an array trains in place.

:class:`FlatParams` copies each member's parameters into row ``i`` of one ``[N, D]`` tensor per
kind (dtype, trained or not) and makes member ``i``'s parameters views of that row, so the
members' own modules stay current. Its ``leaves`` view the same storage as ``[N, *shape]``: the
vmapped forward takes them as they are (no stack per step), autograd gives each one gradient for
all members, and an optimiser updates a whole ``[N, D]`` tensor with per-member ``[N, 1]``
hyper-parameters (:mod:`hpml.optimize.fuse.optim`). The ops a step launches do not grow with N.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class FlatGroup:
    """Parameters of one dtype, all trained or all not: ``data`` is ``[N, D]``; name ``k``'s
    leaf views columns ``spans[k]`` as ``[N, *shape]``."""

    names: tuple[str, ...]
    data: Tensor
    spans: tuple[tuple[int, int], ...]
    leaves: tuple[Tensor, ...]

    @property
    def trained(self) -> bool:
        return self.leaves[0].requires_grad


class FlatParams:
    """``params`` (name -> each member's parameter of that name, same shapes) in flat rows.

    While it lives, writing ``data`` writes the members' parameters and the reverse; :meth:`unlink`
    gives the members storage of their own again (a member's view would otherwise save, pickle
    or copy every member's row with it).
    """

    def __init__(self, params: Mapping[str, Sequence[nn.Parameter]]) -> None:
        self.params = params
        self.formats = {name: memory_format(members[0]) for name, members in params.items()}
        kinds: dict[tuple[torch.dtype, bool], list[str]] = {}
        for name, members in params.items():
            kinds.setdefault((members[0].dtype, members[0].requires_grad), []).append(name)
        self.groups = tuple(self._group(names) for names in kinds.values())
        self.leaves = {
            name: leaf
            for group in self.groups
            for name, leaf in zip(group.names, group.leaves, strict=True)
        }

    def _group(self, names: Sequence[str]) -> FlatGroup:
        columns = [torch.stack([p.detach().reshape(-1) for p in self.params[n]]) for n in names]
        data = torch.cat(columns, dim=1)
        spans, leaves, start = [], [], 0
        for name, column in zip(names, columns, strict=True):
            members = self.params[name]
            span, shape = (start, start + column.shape[1]), members[0].shape
            leaf = data[:, span[0] : span[1]].view(len(members), *shape).detach()
            leaves.append(leaf.requires_grad_(members[0].requires_grad))
            for index, param in enumerate(members):
                param.data = data[index, span[0] : span[1]].view(shape)
            spans.append(span)
            start = span[1]
        return FlatGroup(tuple(names), data, tuple(spans), tuple(leaves))

    @property
    def trained(self) -> tuple[FlatGroup, ...]:
        return tuple(group for group in self.groups if group.trained)

    def missing_grads(self) -> list[str]:
        """The trained parameters the last backward gave no gradient (no part in any loss)."""
        return [
            name for name, leaf in self.leaves.items() if leaf.requires_grad and leaf.grad is None
        ]

    def gradient(self, group: FlatGroup) -> Tensor:
        """``group``'s gradients as one ``[N, D]`` tensor (one ``cat``; zeros where none)."""
        rows = len(group.data)
        parts = [
            torch.zeros(rows, end - start, dtype=group.data.dtype, device=group.data.device)
            if leaf.grad is None
            else leaf.grad.reshape(rows, -1)
            for leaf, (start, end) in zip(group.leaves, group.spans, strict=True)
        ]
        return torch.cat(parts, dim=1)

    def zero_grad(self) -> None:
        for leaf in self.leaves.values():
            leaf.grad = None

    def share_grads(self) -> None:
        """Each member's parameters their slices of the leaves' gradients (views), for
        optimisers that step the members one by one."""
        for name, leaf in self.leaves.items():
            grads = leaf.grad.unbind() if leaf.grad is not None else [None] * len(leaf)
            for param, grad in zip(self.params[name], grads, strict=True):
                param.grad = grad

    def unlink(self) -> None:
        """The members' parameters in storage of their own (values and memory format kept)."""
        for name, members in self.params.items():
            for param in members:
                param.data = param.detach().clone(memory_format=self.formats[name])
                param.grad = None


def memory_format(tensor: Tensor) -> torch.memory_format:
    """``channels_last`` for a 4-d tensor stored so, else ``contiguous_format``."""
    nhwc = tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last)
    return torch.channels_last if nhwc and not tensor.is_contiguous() else torch.contiguous_format
