"""Tensors inside the nested values models take and return: batches, examples and outputs.

Batches are tensors or (nested) tuples, lists and dicts of them: ``(images, labels)``, a VAE's
``(reconstruction, mu, logvar)``. Plain PyTorch, so analysis, optimisation and callbacks share it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_leaves


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor in ``value`` (a tensor, or nested tuples, lists and dicts of them), in order."""
    return [leaf for leaf in tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def as_args(example: Any) -> tuple[Any, ...]:
    """``example`` as a model's positional arguments: a tuple is several, anything else one."""
    return example if isinstance(example, tuple) else (example,)


def first_tensor(value: Any) -> torch.Tensor | None:
    """The first tensor in ``value``, None when there is none."""
    return next(iter(tensors_in(value)), None)


def batch_size(batch: Any) -> int:
    """Samples in a batch: the leading size of its first tensor."""
    tensor = first_tensor(batch)
    if tensor is None:
        raise TypeError(f"a batch of {type(batch).__name__} holds no tensor to count samples in")
    return int(tensor.shape[0])


def as_inference(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with each tensor that is not an inference tensor copied into one (call inside
    ``torch.inference_mode``): a compiled graph guards on its inputs' dispatch keys, so one
    compiled on a batch a loader made would compile again for the inference tensors of
    Lightning's validation and test stages."""
    return tuple(
        a.clone() if isinstance(a, torch.Tensor) and not a.is_inference() else a for a in args
    )
