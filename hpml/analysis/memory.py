"""Peak memory of the process (host) and of the CUDA caching allocator (device)."""

from __future__ import annotations

import resource
import sys

import torch


def peak_rss_bytes() -> int:
    """Largest resident set size this process has reached (``ru_maxrss``; KiB on Linux)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def peak_memory_bytes(device: torch.device) -> tuple[int, str]:
    """The peak that matters on ``device`` and what it is: CUDA max allocated, or host peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "torch.cuda.max_memory_allocated"
    return peak_rss_bytes(), "process peak RSS"
