"""Fused training arrays (``fuse=array``, HFTA): a sweep's same-shaped jobs trained as one.

One folder for the feature, in the manner of a Composer algorithm: :mod:`~hpml.fused.plan`
decides which jobs fuse (and says why others do not), :mod:`~hpml.fused.launch` is the Hydra
launcher that runs them, :mod:`~hpml.fused.array` the LightningModule of N members,
:mod:`~hpml.fused.data` their data, :mod:`~hpml.fused.members` what an array's job needs on top
of a serial job's (its callbacks, each member's metrics, tags and log). The plain-torch engine
(vmapped nets, GateLSTM, memory guard) is :mod:`hpml.optimize.fuse`. Importing this package is
cheap: torch and Lightning load with the array.
"""
