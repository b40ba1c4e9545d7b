"""The trained net as an MLflow model (``logger.log_model=true``).

The LightningModule's ``net`` as the run leaves it (pruned, quantised, compiled), in MLflow's
``pt2`` format when torch.export can take it, else ``pickle``; the tag ``hpml.model_format``
says which.
"""

from __future__ import annotations

import logging

import mlflow
import torch
from mlflow.models import infer_signature
from torch import Tensor, nn
from torch.export import Dim

from hpml.data.base import HpmlDataModule
from hpml.errors import one_line
from hpml.names import MODEL_FORMAT_TAG
from hpml.tensors import first_tensor

NAME = "model"
EXAMPLE_SAMPLES = 2  # more than 1, or torch.export fixes the batch size at it

log = logging.getLogger(__name__)


def example_input(datamodule: HpmlDataModule) -> Tensor:
    """The first samples of the test split, as the model takes them wherever they are placed:
    real inputs, the same on every run."""
    datamodule.setup("test")
    inputs: list[Tensor] = []
    for batch in datamodule.test_dataloader():
        inputs.append(first_tensor(batch).cpu())  # type: ignore[union-attr]
        if sum(map(len, inputs)) >= EXAMPLE_SAMPLES:
            break
    return torch.cat(inputs)[:EXAMPLE_SAMPLES]


def export_problem(net: nn.Module, example: Tensor) -> str | None:
    """Why torch.export cannot take ``net`` as MLflow's ``pt2`` format exports it (the batch
    dimension dynamic), or None when it can: tried first, as a failed ``pt2`` log would leave a
    FAILED model in the run beside the ``pickle`` one, for the cost of one more export."""
    try:
        torch.export.export(net, (example,), dynamic_shapes=[{0: Dim.AUTO}])
    except Exception as exc:  # torch.export fails in many ways: every one means pickle
        return one_line(exc)
    return None


def log_model(net: nn.Module, example: Tensor) -> None:
    """Log ``net`` to the active run, on the CPU in eval mode, with ``example`` as its input
    example. Nets with several outputs get the example as a tensor, so MLflow gives them no
    pyfunc flavour (which serves one output only)."""
    net = net.cpu().eval()
    problem = export_problem(net, example)
    serialization_format = "pt2" if problem is None else "pickle"
    if problem is not None:
        log.info("torch.export cannot take %s (%s): logged as pickle", type(net).__name__, problem)
    with torch.no_grad():
        output = net(example)
    single = isinstance(output, Tensor)
    info = mlflow.pytorch.log_model(
        net,
        name=NAME,
        input_example=example.numpy() if single else example,
        signature=infer_signature(example.numpy(), output.numpy() if single else None),
        serialization_format=serialization_format,
        # what MLflow would infer, without loading the model in a subprocess to find out
        pip_requirements=mlflow.pytorch.get_default_pip_requirements(),
    )
    mlflow.set_tag(MODEL_FORMAT_TAG, serialization_format)
    log.info("logged the net as %s (%s)", info.model_uri, serialization_format)
