"""N same-shaped nets run as one vmapped call: the forward pass of a fused training array.

``vmap`` batches a Linear over the members as one ``bmm`` and a Conv2d as one grouped convolution
(what HFTA hand-wrote kernels for). Each member keeps its own parameters; a forward stacks them,
so autograd hands each member the gradient of its own loss. While training, :meth:`FusedNets.link`
keeps the parameters stacked for good (:class:`~hpml.optimize.fuse.flat.FlatParams`): no stack per
step, one gradient per name. BatchNorm's running statistics live stacked here, copied back by
:meth:`FusedNets.sync_buffers`; members told to ``keep`` (done training) keep theirs, as their
serial runs would.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from hpml.errors import IncompatibleError
from hpml.optimize.fuse.flat import FlatParams
from hpml.optimize.fuse.lstm import vmappable


class FusedNets(nn.Module):
    """``nets`` (same architecture, any values) as one module whose forward runs them all.

    ``forward(x, stacked, keep)``: ``x`` is one batch every member sees, or (``stacked``) a batch
    per member along dim 0; the output has the member as its leading dim. Random ops draw
    independently per member. In training mode, the members in ``keep`` keep their buffers.
    """

    def __init__(self, nets: Sequence[nn.Module]) -> None:
        super().__init__()
        self.nets = nn.ModuleList(vmappable(net) for net in nets)
        names = [[name for name, _ in net.named_parameters()] for net in self.nets]
        shapes = [[tuple(p.shape) for p in net.parameters()] for net in self.nets]
        for index in range(1, len(self.nets)):
            if names[index] != names[0] or shapes[index] != shapes[0]:
                raise IncompatibleError(
                    f"member {index} of the fused array differs in its parameters' names or "
                    "shapes from member 0; only same-shaped nets fuse"
                )
        # each name's parameter objects, member by member: looked up once, stacked every step
        self.member_params = {
            name: [net.get_parameter(name) for net in self.nets] for name in names[0]
        }
        self.buffer_names = [name for name, _ in self.nets[0].named_buffers()]
        for slot, name in enumerate(self.buffer_names):
            member_buffers = [net.get_buffer(name) for net in self.nets]
            self.register_buffer(f"stacked_{slot}", torch.stack(member_buffers).clone())
        # the skeleton functional_call runs with the stacked values: no storage of its own
        self.__dict__["skeleton"] = copy.deepcopy(self.nets[0]).to("meta")
        self.flat: FlatParams | None = None

    def __len__(self) -> int:
        return len(self.nets)

    def link(self) -> FlatParams:
        """Stack the members' parameters for good (:class:`FlatParams`), as training needs them:
        the members' parameters become views of its rows until :meth:`unlink`."""
        self.unlink()
        self.flat = FlatParams(self.member_params)
        return self.flat

    def unlink(self) -> None:
        """The members' parameters in storage of their own again, if linked."""
        if self.flat is not None:
            self.flat.unlink()
            self.flat = None

    def _apply(self, fn: Any, recurse: bool = True) -> FusedNets:
        """As ``nn.Module``'s (``to``, ``double``...); linked, the conversion gave the members'
        parameters storage of their own, so they are stacked again."""
        super()._apply(fn, recurse)
        if self.flat is not None:
            self.link()
        return self

    def stacked_parameters(self) -> dict[str, Tensor]:
        """Each parameter of every member along a new dim 0, differentiable to the members' (or,
        linked, to the flat leaves)."""
        if self.flat is not None:
            return dict(self.flat.leaves)
        return {name: torch.stack(params) for name, params in self.member_params.items()}

    def stacked_buffers(self) -> dict[str, Tensor]:
        return {name: self.get_buffer(f"stacked_{k}") for k, name in enumerate(self.buffer_names)}

    def forward(self, x: Any, stacked: bool = False, keep: Collection[int] = ()) -> Any:
        skeleton = self.skeleton.train(self.training)

        def one(params: dict[str, Tensor], buffers: dict[str, Tensor], inputs: Any) -> Any:
            return functional_call(skeleton, (params, buffers), (inputs,))

        in_dims = (0, 0, 0 if stacked else None)
        fused = vmap(one, in_dims=in_dims, randomness="different")
        buffers = self.stacked_buffers()
        if not (self.training and keep and buffers):
            return fused(self.stacked_parameters(), buffers, x)
        # BatchNorm's backward saves the running statistics it was given, so they must not be
        # written before it: the forward updates copies, the other members' slices come back
        scratch = {name: buffer.clone() for name, buffer in buffers.items()}
        output = fused(self.stacked_parameters(), scratch, x)
        updated = [index for index in range(len(self)) if index not in keep]
        with torch.no_grad():
            for name, buffer in buffers.items():
                buffer[updated] = scratch[name][updated]
        return output

    @torch.no_grad()
    def sync_buffers(self) -> None:
        """Copy the stacked running statistics into each member's own buffers."""
        for name, stacked in self.stacked_buffers().items():
            for index, net in enumerate(self.nets):
                net.get_buffer(name).copy_(stacked[index])


def member_output(output: Any, index: int) -> Any:
    """Member ``index``'s slice of a fused output (a tensor or a tuple of them)."""
    return tree_map(lambda t: t[index] if isinstance(t, Tensor) else t, output)


def member_outputs(output: Any) -> list[Any]:
    """Every member's slice of a fused output, from one ``unbind`` per tensor: its backward is
    one stack, where N slices' would be N scatters into zeros, summed."""
    leaves, spec = tree_flatten(output)
    parts = [leaf.unbind() if isinstance(leaf, Tensor) else None for leaf in leaves]
    count = len(next(part for part in parts if part is not None))
    return [
        tree_unflatten(
            [leaf if p is None else p[i] for p, leaf in zip(parts, leaves, strict=True)], spec
        )
        for i in range(count)
    ]
