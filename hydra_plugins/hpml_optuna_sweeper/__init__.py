"""hpml's Optuna sweeper for Hydra: ``hydra/sweeper=hpml_optuna`` (``hparams_search=<name>``).

Hydra finds it by importing every module under the ``hydra_plugins`` namespace package; optuna
itself is imported only when a search starts, so ``--help`` and the CLI checks stay fast.
"""
