"""The device a bench case times a model on (``train_speed``, ``prune``): the GPU where torch
sees one, else the CPU; ``CUDA_VISIBLE_DEVICES=`` gives their CPU figures on a GPU host."""

from __future__ import annotations

import torch


def bench_device() -> torch.device:
    """``cuda`` (the current GPU) when torch sees one, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def device_name(device: torch.device) -> str:
    """``cpu``, or the GPU's name as CUDA gives it (``NVIDIA H100 80GB HBM3``)."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
