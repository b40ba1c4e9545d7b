"""Backend ``torch_ao``: ``torch.ao.quantization`` in eager mode, int8 kernels for x86/ARM CPUs:
dynamic int8, static int8 (fused, calibrated, wrapped in quant/dequant stubs) and QAT.
Deprecated upstream in favour of torchao, it still gives int8 conv kernels on CPU.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.ao.quantization as tq
from torch import nn

from hpml.console import notice_once
from hpml.errors import ConfigError, IncompatibleError, one_of
from hpml.optimize.quant.base import Quantizer, no_calibration, to_device
from hpml.tensors import as_args

ENGINES = ("x86", "fbgemm", "onednn", "qnnpack")
CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
BNS = {nn.Conv1d: nn.BatchNorm1d, nn.Conv2d: nn.BatchNorm2d, nn.Conv3d: nn.BatchNorm3d}
STATIC_LAYERS = (*CONVS, nn.Linear)
NO_KERNEL = r"Could not run '([^']+)' with arguments from the '(\w+)' backend"
# Models whose every op eager-mode int8 covers (checked by tests/bad_inputs/test_validate.py).
EAGER_INT8_MODELS = ("vgg11", "vgg13", "vgg16", "vgg19", "alexnet")


def use_engine(engine: str) -> None:
    """Select the quantised kernel library (x86 = fbgemm + onednn; qnnpack for ARM)."""
    one_of("engine", engine, ENGINES)
    if engine not in torch.backends.quantized.supported_engines:
        raise ConfigError(
            "engine",
            engine,
            "an engine this torch build supports: "
            + ", ".join(torch.backends.quantized.supported_engines),
        )
    torch.backends.quantized.engine = engine
    notice_once(
        "torch.ao",
        "torch.ao.quantization is deprecated upstream (torchao replaces it); "
        "hpml uses it for CPU int8 kernels. quant.method.backend=torchao selects torchao.",
    )


def fusable_groups(net: nn.Module) -> list[list[str]]:
    """Qualified names of conv-bn-relu, conv-bn, conv-relu and linear-relu runs in Sequentials
    (where the data flow is known without tracing the model)."""
    groups: list[list[str]] = []
    for prefix, module in net.named_modules():
        if not isinstance(module, nn.Sequential):
            continue
        children = list(module.named_children())
        index = 0
        while index < len(children):
            _, child = children[index]
            kinds = [type(c) for _, c in children[index : index + 3]]
            size = 1
            if isinstance(child, CONVS):
                bn = BNS[type(child)]
                if kinds[1:3] == [bn, nn.ReLU]:
                    size = 3
                elif kinds[1:2] in ([bn], [nn.ReLU]):
                    size = 2
            elif isinstance(child, nn.Linear) and kinds[1:2] == [nn.ReLU]:
                size = 2
            if size > 1:
                base = f"{prefix}." if prefix else ""
                groups.append([base + n for n, _ in children[index : index + size]])
            index += size
    return groups


class Dynamic(Quantizer):
    name, backend = "dynamic_int8", "torch_ao"
    supported = (nn.Linear, nn.LSTM, nn.GRU, nn.Embedding)

    def __init__(self, engine: str = "x86", embeddings: bool = True) -> None:
        self.engine = engine
        if not embeddings:
            self.supported = (nn.Linear, nn.LSTM, nn.GRU)

    def check_net(
        self, build_net: Callable[[], nn.Module], example: torch.Tensor, model: str = "the model"
    ) -> None:
        use_engine(self.engine)

    def quantize(self, net: nn.Module, calibration: Iterable[Any] = ()) -> nn.Module:
        use_engine(self.engine)
        weight_only = {nn.Embedding: tq.float_qparams_weight_only_qconfig}
        spec = {
            layer: weight_only.get(layer, tq.default_dynamic_qconfig) for layer in self.supported
        }
        return tq.quantize_dynamic(net.cpu().eval(), spec, dtype=torch.qint8, inplace=False)


class Static(Quantizer):
    """Post-training static int8 in eager mode: fuse, observe, calibrate, convert."""

    name, backend = "static_int8", "torch_ao"
    needs_calibration = float_inputs = True
    supported = STATIC_LAYERS

    def __init__(self, engine: str = "x86", per_channel: bool = True, fuse: bool = True) -> None:
        self.engine, self.per_channel, self.fuse = engine, per_channel, fuse

    def check_net(
        self, build_net: Callable[[], nn.Module], example: torch.Tensor, model: str = "the model"
    ) -> None:
        """The engine exists, and eager int8 runs the net: quantised on one batch and run."""
        use_engine(self.engine)
        problem = eager_static_problem(self, build_net(), example)
        if problem is None:
            return
        fix = "quant.method.backend=pt2e" if self.name == "static_int8" else "quant=static_int8"
        raise IncompatibleError(
            f"quant={self.name} (eager-mode torch.ao) cannot quantise model {model}: "
            f"{problem}; use {fix} (PT2E int8 of the traced graph), quant=dynamic_int8, "
            f"or a model built of modules only (model={'|'.join(EAGER_INT8_MODELS)})"
        )

    def qconfig(self) -> tq.QConfig:
        if self.per_channel:
            return tq.get_default_qconfig(self.engine)  # per-channel weights for x86/fbgemm/onednn
        return tq.QConfig(
            activation=tq.HistogramObserver.with_args(reduce_range=False),
            weight=tq.default_weight_observer,
        )

    def wrap(self, net: nn.Module, train: bool) -> tq.QuantWrapper:
        use_engine(self.engine)
        wrapped = tq.QuantWrapper(net)
        wrapped.train(train)
        if self.fuse:
            groups = [[f"module.{n}" for n in g] for g in fusable_groups(net)]
            if groups:
                fuse = tq.fuse_modules_qat if train else tq.fuse_modules
                wrapped = fuse(wrapped, groups, inplace=True)
        return wrapped

    def quantize(self, net: nn.Module, calibration: Iterable[Any] = ()) -> nn.Module:
        wrapped = self.wrap(net.cpu().eval(), train=False)
        wrapped.qconfig = self.qconfig()
        tq.prepare(wrapped, inplace=True)
        seen = 0
        with torch.inference_mode():
            for batch in calibration:
                if seen == 0:
                    self.check_inputs(net, batch)
                wrapped(*as_args(to_device(batch, torch.device("cpu"))))
                seen += 1
        if seen == 0:
            raise no_calibration()
        return tq.convert(wrapped, inplace=True)


class QAT(Static):
    """Quantisation-aware training: fused layers with fake quantisation, trained, then converted."""

    name = "qat"
    needs_calibration = False
    trains = True

    def quantize(self, net: nn.Module, calibration: Iterable[Any] = ()) -> nn.Module:
        raise NotImplementedError("qat quantises by prepare_qat, training, then convert")

    def prepare_qat(self, net: nn.Module, example: Any = None) -> nn.Module:
        if example is not None:
            self.check_inputs(net, example)
        device = next((p.device for p in net.parameters()), torch.device("cpu"))
        wrapped = self.wrap(net, train=True)
        wrapped.qconfig = (
            tq.get_default_qat_qconfig(self.engine) if self.per_channel else tq.default_qat_qconfig
        )
        tq.prepare_qat(wrapped, inplace=True)
        return wrapped.to(device)

    def convert(self, net: nn.Module) -> nn.Module:
        return tq.convert(net.cpu().eval(), inplace=True)


_PROBED: dict[tuple[Any, ...], str | None] = {}


def eager_static_problem(engine: Static, net: nn.Module, example: torch.Tensor) -> str | None:
    """Why eager static int8 cannot run ``net`` (None when it can): a quantised copy run on
    ``example``, cached per architecture, input shape and settings."""
    key = (repr(net), tuple(example.shape[1:]), engine.engine, engine.per_channel, engine.fuse)
    if key not in _PROBED:
        _PROBED[key] = _probe(Static(engine.engine, engine.per_channel, engine.fuse), net, example)
    return _PROBED[key]


def _probe(engine: Static, net: nn.Module, example: torch.Tensor) -> str | None:
    try:
        with warnings.catch_warnings():  # the real run shows torch.ao's deprecation warnings
            warnings.simplefilter("ignore")
            qnet = engine.quantize(copy.deepcopy(net).cpu().eval(), [example.cpu()])
            with torch.inference_mode():
                qnet(example.cpu())
    except (ConfigError, IncompatibleError):
        raise
    except Exception as exc:
        op = re.search(NO_KERNEL, str(exc))
        if op:
            return (
                f"its forward calls {op.group(1)} on int8 tensors, which has no "
                f"{op.group(2)} kernel (a functional op such as a residual add, outside "
                f"the modules eager mode replaces)"
            )
        message = " ".join(str(exc).split())[:200]
        return f"the int8 model fails on one batch ({type(exc).__name__}: {message})"
    return None
