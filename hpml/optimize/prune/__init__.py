"""Pruning engines in plain PyTorch (no Lightning, no Hydra): how to prune, not when.

- :class:`Pruner` (``pruner.py``): every method and mode behind one object.
- ``mask.py``: ``torch.nn.utils.prune`` masks, non-compounding, FPGM as a mask method.
- ``structured.py``: physical Conv/Linear channel pruning on torch-pruning's dependency graph.
- ``lstm.py``: physical ``nn.LSTM`` hidden-unit (and embedding) pruning.
- ``io.py``: save and reload pruned models with their architecture.

When to prune during training is :class:`hpml.callbacks.prune.Prune`'s business.
"""

from hpml.optimize.prune.pruner import METHODS, MODES, Pruner, PruneReport, default_mode
from hpml.optimize.prune.targets import DEFAULT_EXCLUDE, DEFAULT_TARGETS, OUTPUT_LAYER

__all__ = [
    "DEFAULT_EXCLUDE",
    "DEFAULT_TARGETS",
    "METHODS",
    "MODES",
    "OUTPUT_LAYER",
    "PruneReport",
    "Pruner",
    "default_mode",
]
