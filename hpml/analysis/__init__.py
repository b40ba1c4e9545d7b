"""Measurements usable from plain PyTorch: model statistics, memory, step timing."""
