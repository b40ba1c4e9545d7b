"""When to trade activation memory for time: around every training step, from the first one on.

How is up to :mod:`hpml.optimize.activations`. It applies inside the module's ``training_step``
(one of its ``step_contexts`` for the fit, then removed), so ``memory/activations_bytes``
measures it and validation, test and the after-fit steps run the model as built. Tags:
``hpml.activations.method`` and ``hpml.activations.modules``.
"""

from __future__ import annotations

import functools
from typing import Any

import lightning as L
from torch import nn

from hpml.callbacks.base import HpmlCallback
from hpml.callbacks.logging import set_step_tags
from hpml.errors import ConfigError, one_of
from hpml.models.base import HpmlModule
from hpml.optimize.activations import Bf16SavedTensors, Stage, checkpointed, resolve


class Activations(HpmlCallback):
    """Apply ``method`` to every training step of the fit (see the module)."""

    def __init__(self, method: str, modules: list[str] | None = None) -> None:
        one_of("method", method, ("checkpoint", "bf16"))
        if method != "checkpoint" and modules is not None:
            raise ConfigError("modules", modules, "null: only method=checkpoint takes modules")
        self.method = method
        self.modules = None if modules is None else [str(m) for m in modules]
        self._module: HpmlModule | None = None
        self._entered: Any = None

    recomputes_stages = property(lambda self: self.method == "checkpoint")

    def stages(self, model: nn.Module) -> list[Stage]:
        """The stages checkpointed in ``model`` (none for bf16); unknown names raise here."""
        return resolve(model, self.modules) if self.recomputes_stages else []

    def check_model(self, pl_module: L.LightningModule, *_: Any) -> None:
        """Every ``modules`` entry names a submodule (or a Sequential's slice) of the model."""
        try:
            self.stages(pl_module)
        except ConfigError as exc:
            raise exc.under("activations") from None

    def on_fit_start(self, trainer: L.Trainer, pl_module: HpmlModule) -> None:
        stages = self.stages(pl_module)
        if self.method == "checkpoint":
            self._entered = functools.partial(checkpointed, pl_module, stages)
        else:
            self._entered = functools.partial(Bf16SavedTensors, pl_module)
        pl_module.step_contexts.append(self._entered)
        self._module = pl_module
        modules = ",".join(map(str, stages)) or "-"
        set_step_tags(trainer, "activations", {"method": self.method, "modules": modules})

    def on_fit_end(self, *_: Any) -> None:
        if self._module is not None:
            self._module.step_contexts.remove(self._entered)
            self._module = None

    on_exception = on_fit_end  # a failed fit takes the context off too
