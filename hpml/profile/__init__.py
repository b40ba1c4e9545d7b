"""Runs under an outside profiler, read back into their MLflow runs: ``python -m
hpml.profile.ncu`` counts a training run's kernels with Nsight Compute."""
