"""hpml's basic sweeper for Hydra: ``hydra/sweeper=hpml_basic``, hpml's default sweeper.

Hydra's basic sweeper with a sweep's repeats (``replicate``) interleaved; conf/hydra/default.yaml
selects it. Hydra finds it by importing every module under the ``hydra_plugins`` namespace
package.
"""
