"""hpml.tensors: the tensors inside nested batches, examples and model outputs."""

from __future__ import annotations

import pytest
import torch

from hpml.tensors import batch_size, first_tensor, tensors_in


def test_tensors_are_found_in_order_through_tuples_lists_and_dicts() -> None:
    a, b, c, d = (torch.zeros(n) for n in (1, 2, 3, 4))
    value = ({"x": a, "skip": 3, "y": [b, (c,)]}, "text", d)
    assert [t.numel() for t in tensors_in(value)] == [1, 2, 3, 4]
    assert first_tensor(value) is a
    assert first_tensor(("no", [1, 2], {})) is None


def test_batch_size_is_the_first_tensors_leading_size() -> None:
    images, labels = torch.zeros(5, 3, 8, 8), torch.zeros(5, dtype=torch.long)
    assert batch_size((images, labels)) == 5
    assert batch_size({"tokens": torch.zeros(7, 12), "label": torch.zeros(7)}) == 7
    assert batch_size([["not a tensor"], torch.zeros(2, 1)]) == 2
    with pytest.raises(TypeError, match="a batch of list holds no tensor"):
        batch_size([1, 2, 3])
