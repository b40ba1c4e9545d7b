"""Pruning engines in plain PyTorch (no Lightning, no Hydra): how to prune, not when.

- :class:`Pruner` (``pruner.py``): every method and mode behind one object.
- ``methods.py``: the methods, one class each (structured or not, mask, importance, LSTM unit
  scores); a new one is a subclass anywhere plus its ``conf/prune/<name>.yaml``.
- ``mask.py``: ``torch.nn.utils.prune`` masks, non-compounding.
- ``structured.py``: physical Conv/Linear channel pruning on torch-pruning's dependency graph.
- ``lstm.py``: physical ``nn.LSTM`` hidden-unit (and embedding) pruning.
- ``schedule.py``: the amount at each step of a schedule, and the reductions pruning gave.
- ``sensitivity.py``: each weight alone pruned to each amount, the model judged.
- ``io.py``: save and reload pruned models with their architecture.

When to prune during training is :class:`hpml.callbacks.prune.Prune`'s business.
"""

from hpml.optimize.prune.methods import MODES, Method, Structured, Unstructured, named
from hpml.optimize.prune.pruner import Pruner, PruneReport
from hpml.optimize.prune.targets import DEFAULT_EXCLUDE, DEFAULT_TARGETS, OUTPUT_LAYER

__all__ = [
    "DEFAULT_EXCLUDE",
    "DEFAULT_TARGETS",
    "MODES",
    "OUTPUT_LAYER",
    "Method",
    "PruneReport",
    "Pruner",
    "Structured",
    "Unstructured",
    "named",
]
