"""The pruning methods as the ``prune`` options of ``conf/`` build them, read from the files so
a new option is tested without editing a test."""

from __future__ import annotations

from hydra.utils import instantiate
from omegaconf import OmegaConf

from hpml.optimize.prune.methods import Method
from tests.conftest import CONF, options


def option_nodes() -> dict[str, dict]:
    """``{option: its own config}`` of every ``prune`` option that prunes (``none`` does not)."""
    nodes = {name: OmegaConf.load(CONF / "prune" / f"{name}.yaml") for name in options("prune")}
    return {name: node for name, node in nodes.items() if "method" in node}


def methods() -> dict[str, Method]:
    """``{option: the Method its method node builds}`` (a partial, called as the callback
    calls it)."""
    built = {name: instantiate(node.method) for name, node in option_nodes().items()}
    return {name: b if isinstance(b, Method) else b() for name, b in built.items()}


def names(structured: bool) -> list[str]:
    return [name for name, method in methods().items() if method.structured == structured]
