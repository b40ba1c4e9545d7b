"""Every member's optimiser step as one update of a fused array's flat parameters.

Each member of a fused array keeps its optimiser: its class and its ``param_groups``, where its
scheduler sets the learning rate. Stepped one by one they launch N times one member's ops.
:class:`FusedStep` applies SGD's or Adam's (AdamW's) update once to each ``[N, D]`` tensor of
:class:`~hpml.optimize.fuse.flat.FlatParams`, each member's hyper-parameters read from its own
optimiser into an ``[N, 1]`` column, as HFTA's fused optimisers do: a step launches the same ops
for 16 members as for 2. The arithmetic is that of torch's single-tensor SGD and Adam, so each
member's weights follow its own optimiser's path. :func:`unfused_reason` says why a set of
optimisers does not step so (another class, several parameter groups, differing switches, half
precision parameters).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import torch
from torch import Tensor, nn
from torch.optim import SGD, Adam, AdamW, Optimizer

from hpml.errors import IncompatibleError
from hpml.optimize.fuse.flat import FlatParams

Columns = dict[str, Tensor]  # name -> an [N, 1] column of the members' values
SGD_KEYS = ("lr", "momentum", "dampening", "weight_decay")
ADAM_KEYS = ("lr", "beta1", "beta2", "eps", "weight_decay")


def hyper(optimizer: Optimizer) -> tuple[float, ...]:
    """The optimiser's per-member values (:data:`SGD_KEYS` or :data:`ADAM_KEYS`) now."""
    group = optimizer.param_groups[0]
    if isinstance(optimizer, SGD):
        return tuple(float(group[key]) for key in SGD_KEYS)
    beta1, beta2 = group["betas"]
    return tuple(map(float, (group["lr"], beta1, beta2, group["eps"], group["weight_decay"])))


def rule(optimizer: Optimizer) -> tuple[object, ...]:
    """What must be equal across members to step as one: the update and its switches."""
    group = optimizer.param_groups[0]
    if isinstance(optimizer, SGD):
        return ("sgd", bool(group["nesterov"]), bool(group["maximize"]))
    decoupled = isinstance(optimizer, AdamW) or bool(group.get("decoupled_weight_decay"))
    return ("adam", bool(group["amsgrad"]), bool(group["maximize"]), decoupled)


def unfused_reason(
    optimizers: Sequence[Optimizer], params: Mapping[str, Sequence[nn.Parameter]]
) -> str | None:
    """Why ``optimizers`` (member i's is ``optimizers[i]``) cannot step as one :class:`FusedStep`
    over ``params`` (name -> each member's parameter), or None if they can."""
    kinds = sorted({type(o).__name__ for o in optimizers})
    if not all(type(o) in (SGD, Adam, AdamW) for o in optimizers):
        return f"the members' optimisers are {', '.join(kinds)}; SGD, Adam and AdamW fuse"
    if any(len(o.param_groups) != 1 for o in optimizers):
        return "a member's optimiser has several parameter groups"
    if any(o.param_groups[0].get("differentiable") for o in optimizers):
        return "a member's optimiser is differentiable"
    if len({rule(o) for o in optimizers}) > 1:
        return f"the members' optimisers differ in class or switches: {', '.join(kinds)}"
    dtypes = {ps[0].dtype for ps in params.values()} - {torch.float32, torch.float64}
    if dtypes:  # torch computes half types' updates in float: [N, 1] columns cannot
        return f"the members' parameters are {', '.join(sorted(map(str, dtypes)))}"
    for index, optimizer in enumerate(optimizers):
        held = {id(p) for p in optimizer.param_groups[0]["params"]}
        trained = {id(ps[index]) for ps in params.values() if ps[index].requires_grad}
        if held != trained:
            return f"member {index}'s optimiser does not hold exactly its net's trained parameters"
    return None


class FusedStep:
    """One step of every live member's optimiser, as one update of ``flat``'s trained groups.

    ``optimizers`` stay the members' own: their ``param_groups`` are read at each step (a
    scheduler's change holds from the next), their ``state`` stays empty; the moments live here,
    ``[N, D]`` like the parameters.
    """

    def __init__(self, optimizers: Sequence[Optimizer], flat: FlatParams) -> None:
        reason = unfused_reason(optimizers, flat.params)
        if reason is not None:
            raise IncompatibleError(f"the members' optimisers cannot step as one: {reason}")
        self.optimizers = list(optimizers)
        self.flat = flat
        self.kind, *self.switches = rule(optimizers[0])
        self.state: list[dict[str, Tensor]] = [{} for _ in flat.trained]
        self.steps = 0
        self._key: tuple[object, ...] | None = None
        self._columns: Columns = {}
        self._cast: dict[torch.dtype, Columns] = {}
        self._live = torch.ones(0, 1, dtype=torch.bool)
        # which terms this step computes, from the members' values on the host (no sync)
        self.decayed = self.momentum = self.damped = False

    def step(self, frozen: Collection[int] = ()) -> None:
        """Update every member not in ``frozen``; a frozen member's parameters stay bit for bit.

        Raises:
            IncompatibleError: a trained parameter has no gradient (it took no part in the loss):
                its member optimisers would skip it and keep their per-parameter step counts.
        """
        missing = self.flat.missing_grads()
        if missing:
            raise IncompatibleError(
                f"parameter {missing[0]} got no gradient; a fused optimiser step updates every "
                "trained parameter of the members, so each must take part in the loss"
            )
        with torch.no_grad():
            self._refresh(frozen)
            self.steps += 1
            for group, state in zip(self.flat.trained, self.state, strict=True):
                columns = self._columns_in(group.data.dtype)
                update = self._sgd if self.kind == "sgd" else self._adam
                update(group.data, self.flat.gradient(group), state, columns, bool(frozen))

    def _refresh(self, frozen: Collection[int]) -> None:
        """The ``[N, 1]`` float64 columns of the members' values, rebuilt when one changes (one
        host-to-device copy: at the first step, and when a scheduler or a freeze changes one)."""
        rows = [hyper(optimizer) for optimizer in self.optimizers]
        key = (tuple(rows), tuple(sorted(frozen)))
        if key == self._key:
            return
        self._key, self._cast = key, {}
        names = SGD_KEYS if self.kind == "sgd" else ADAM_KEYS
        values = {name: [row[k] for row in rows] for k, name in enumerate(names)}
        self.decayed = any(values["weight_decay"])
        device = self.flat.groups[0].data.device
        table = torch.tensor(rows, dtype=torch.float64, device=device)
        live = torch.tensor([i not in frozen for i in range(len(rows))], device=device)[:, None]
        c = {name: table[:, k : k + 1] for k, name in enumerate(names)}
        lr = torch.where(live, c["lr"], 0.0)  # a frozen member moves by nothing, decay included
        if self.kind == "sgd":
            self.momentum = any(values["momentum"])
            # torch dampens a momentum buffer only: without momentum, the gradient is the step
            pairs = zip(values["momentum"], values["dampening"], strict=True)
            self.damped = any(m != 0 and d != 0 for m, d in pairs)
            factor = torch.where(c["momentum"] != 0, 1 - c["dampening"], 1.0)
            self._columns = {
                "neg_lr": -lr,
                "momentum": c["momentum"],
                "damped": factor,
                "weight_decay": c["weight_decay"],
            }
        else:
            self._columns = {
                "lr": lr,
                "beta1": c["beta1"],
                "beta2": c["beta2"],
                "decay": 1 - lr * c["weight_decay"],
                "weight_decay": c["weight_decay"],
                "one_minus_beta1": 1 - c["beta1"],
                "one_minus_beta2": 1 - c["beta2"],
                "eps": c["eps"],
            }
        self._live = live

    def _columns_in(self, dtype: torch.dtype) -> Columns:
        """The columns in the parameters' dtype, as torch casts its scalars; Adam's bias
        corrections for this step computed in float64, as torch computes them on the host."""
        if dtype not in self._cast:
            self._cast[dtype] = {k: v.to(dtype) for k, v in self._columns.items()}
        columns = {**self._cast[dtype], "live": self._live}
        if self.kind == "adam":
            c = self._columns
            columns["neg_step"] = (-c["lr"] / (1 - c["beta1"] ** self.steps)).to(dtype)
            columns["correction2_sqrt"] = (1 - c["beta2"] ** self.steps).sqrt().to(dtype)
        return columns

    def _sgd(
        self, param: Tensor, grad: Tensor, state: dict[str, Tensor], c: Columns, masked: bool
    ) -> None:
        nesterov, maximize = self.switches
        grad = -grad if maximize else grad
        if self.decayed:
            grad = torch.addcmul(grad, param, c["weight_decay"])
        if self.momentum:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = grad.clone()
            elif self.damped:
                buf.mul_(c["momentum"]).addcmul_(grad, c["damped"])
            else:
                buf.mul_(c["momentum"]).add_(grad)
            grad = torch.addcmul(grad, buf, c["momentum"]) if nesterov else buf
        if masked:
            param.add_(torch.where(c["live"], grad * c["neg_lr"], 0.0))
        else:
            param.addcmul_(grad, c["neg_lr"])

    def _adam(
        self, param: Tensor, grad: Tensor, state: dict[str, Tensor], c: Columns, masked: bool
    ) -> None:
        amsgrad, maximize, decoupled = self.switches
        grad = -grad if maximize else grad
        if self.decayed:
            if decoupled:
                param.mul_(c["decay"])
            else:
                grad = torch.addcmul(grad, param, c["weight_decay"])
        if not state:
            state.update(exp_avg=torch.zeros_like(param), exp_avg_sq=torch.zeros_like(param))
            if amsgrad:
                state["max_exp_avg_sq"] = torch.zeros_like(param)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, c["one_minus_beta1"])
        exp_avg_sq.mul_(c["beta2"]).addcmul_(grad, grad * c["one_minus_beta2"])
        second = exp_avg_sq
        if amsgrad:
            second = torch.maximum(state["max_exp_avg_sq"], exp_avg_sq, out=state["max_exp_avg_sq"])
        denom = (second.sqrt() / c["correction2_sqrt"]).add_(c["eps"])
        if masked:
            param.add_(torch.where(c["live"], exp_avg * c["neg_step"] / denom, 0.0))
        else:
            param.addcdiv_(exp_avg * c["neg_step"], denom)
