"""Quantisation engines behind one interface, :class:`Quantizer`; no Lightning, no Hydra.

- ``base.py``: the interface (check, quantise or prepare/convert, where the kernels run) and
  :class:`OnDevice`;
- ``methods.py``: hpml's methods (``dynamic_int8``, ``static_int8``, ``qat``,
  ``weight_only_int8``), one function each, the ``_target_`` of their ``conf/quant/`` options;
- ``torch_ao.py``, ``pt2e.py``, ``torchao_backend.py``, ``auto.py``: the backends.

A config option builds its quantiser from its ``quantizer`` node, so a new quantiser is one class
(anywhere importable) plus one ``conf/quant/<name>.yaml``; :func:`make_quantizer` is plain-PyTorch
shorthand for hpml's own methods.
"""

from __future__ import annotations

from typing import Any

from hpml.errors import ConfigError
from hpml.optimize.quant.base import OnDevice, Quantizer, notice_once

__all__ = ["OnDevice", "Quantizer", "make_quantizer", "notice_once"]


def make_quantizer(method: str, backend: str = "auto", **knobs: Any) -> Quantizer:
    """hpml's quantiser for ``method`` on ``backend``: ``methods.<method>(...)`` (see there)."""
    from hpml.optimize.quant import methods

    if method not in methods.__all__:
        raise ConfigError("method", method, f"one of {', '.join(methods.__all__)}")
    return getattr(methods, method)(method=method, backend=backend, **knobs)
