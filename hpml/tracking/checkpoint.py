"""Whether a checkpoint file can be loaded, checked before a run resumes from it."""

from __future__ import annotations

import zipfile
from pathlib import Path

from hpml.errors import one_line


def unreadable_checkpoint(path: Path) -> str | None:
    """Why torch cannot load the checkpoint at ``path`` (a text file, truncated bytes), else
    None. Loaded memory-mapped, its tensors unread: the check costs little for a large
    checkpoint, which fit then loads for real."""
    import torch

    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive, whose index ends it
        return "it is not a zip archive as torch.save writes (a truncated copy, or another file)"
    try:
        torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except Exception as exc:
        return f"torch cannot load it ({one_line(exc)})"
    return None
