"""Model optimisations in plain PyTorch: pruning, quantisation, compilation (no Lightning here)."""
