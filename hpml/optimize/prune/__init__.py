"""Pruning engines in plain PyTorch (no Lightning, no Hydra): how to prune, not when.

- :class:`Pruner` (``pruner.py``): every method and mode behind one object.
- ``methods.py``: the table of methods (structured or not, mask, importance, LSTM unit scores).
- ``mask.py``: ``torch.nn.utils.prune`` masks, non-compounding.
- ``structured.py``: physical Conv/Linear channel pruning on torch-pruning's dependency graph.
- ``lstm.py``: physical ``nn.LSTM`` hidden-unit (and embedding) pruning.
- ``io.py``: save and reload pruned models with their architecture.

When to prune during training is :class:`hpml.callbacks.prune.Prune`'s business.
"""

from hpml.optimize.prune.methods import METHODS, Method
from hpml.optimize.prune.pruner import MODES, Pruner, PruneReport
from hpml.optimize.prune.targets import DEFAULT_EXCLUDE, DEFAULT_TARGETS, OUTPUT_LAYER

__all__ = [
    "DEFAULT_EXCLUDE",
    "DEFAULT_TARGETS",
    "METHODS",
    "MODES",
    "OUTPUT_LAYER",
    "Method",
    "PruneReport",
    "Pruner",
]
