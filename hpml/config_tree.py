"""A config tree as dotted keys: the one flattener of hpml's configs, for MLflow's params, the
range checks and the fusion planner's key diff, each turning the raw leaves into what it needs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def leaves(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` of every leaf, in the tree's order: ``{"a": {"b": 1}}`` ->
    ``("a.b", 1)``. Lists are leaves; an empty mapping has none."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from leaves(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), tree
