"""``aot_inductor``: the exported program compiled ahead of time by inductor into a shared
library packaged as ``workdir/model_aoti.pt2`` and loaded back: what a deployment without dynamo
runs. Its time is the export plus the C++ build."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hpml.optimize.compile import base
from hpml.optimize.compile.export import exported


class AotInductor(base.Compiler):
    """Args: ``freezing``: inductor's weight freezing; ``cache_dir``: inductor's cache
    (default: ``workdir/inductor_cache``)."""

    def __init__(self, freezing: bool = False, cache_dir: Path | None = None) -> None:
        self.freezing, self.cache_dir = freezing, cache_dir

    def compile(self, net: nn.Module, examples: Sequence[Any], workdir: Path) -> base.CompileOutput:
        from torch._inductor import aoti_compile_and_package, aoti_load_package

        base.use_cache_dir(self.cache_dir or workdir / "inductor_cache")
        with torch.no_grad():
            program = exported(net, examples, self.name)
            workdir.mkdir(parents=True, exist_ok=True)
            try:
                path = aoti_compile_and_package(
                    program,
                    package_path=str(workdir / "model_aoti.pt2"),
                    inductor_configs={"freezing": self.freezing},
                )
                runner = aoti_load_package(path)
                base.run_each(runner, examples)
            except Exception as exc:
                raise base.untraceable(net, self.name, exc) from exc
        return base.Program(runner, self.name), Path(path)
