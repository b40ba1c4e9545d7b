"""hpml's fused launcher for Hydra: ``fuse=array`` selects it (``hydra/launcher=hpml_fused``).

Hydra finds it by importing every module under the ``hydra_plugins`` namespace package; torch
and Lightning are imported only when an array trains.
"""
