"""Optuna trial pruning from inside a job: report each validation, stop when the pruner says.

optuna-integration's callback needs the live ``Trial`` (only in the sweeper's process) and would
end the run FAILED. Here the trial is reopened from the study's storage, and a pruned trial stops
like an early stop: the run ends FINISHED, tagged ``hpml.optuna.state=PRUNED``, and the trial
records ``pruned_at_epoch`` for the sweeper.
"""

from __future__ import annotations

from typing import Any

import lightning as L

from hpml.callbacks.base import HpmlCallback
from hpml.callbacks.logging import set_step_tags

PRUNED_ATTR = "pruned_at_epoch"


class OptunaPruning(HpmlCallback):
    """Reports ``monitor`` to trial ``trial`` of Optuna study ``study_name`` after every
    validation epoch and stops training when ``pruner`` (an Optuna pruner, the sweeper's) prunes
    it before its last epoch. With no ``trial`` (a run outside a search) it does nothing."""

    def __init__(
        self,
        monitor: str,
        storage: str | None = None,
        study_name: str | None = None,
        trial: int | None = None,
        pruner: Any = None,
    ) -> None:
        self.monitor, self.storage = monitor, storage
        self.study_name, self.trial = study_name, trial
        self.study_pruner = pruner  # not `pruner`: that names hpml's model pruning
        self._trial: Any = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.trial is None or not trainer.is_global_zero or self._trial is not None:
            return
        if self.storage is None or self.study_name is None:
            raise ValueError("callbacks.optuna_pruning: a trial needs its study's storage and name")
        import optuna

        store = optuna.storages.get_storage(self.storage)
        # None: Optuna's default
        pruner = self.study_pruner if self.study_pruner is not None else optuna.pruners.NopPruner()
        study = optuna.load_study(study_name=self.study_name, storage=store, pruner=pruner)
        study_id = store.get_study_id_from_name(self.study_name)
        trial_id = store.get_trial_id_from_study_id_trial_number(study_id, int(self.trial))
        self._trial = optuna.trial.Trial(study, trial_id)

    def on_validation_end(self, trainer: L.Trainer, *_: Any) -> None:
        if self.trial is None or trainer.sanity_checking:
            return
        prune = False
        if trainer.is_global_zero:  # one rank talks to the study; all stop together
            value = trainer.callback_metrics.get(self.monitor)
            if value is None:
                raise KeyError(
                    f"callbacks.optuna_pruning.monitor={self.monitor!r}: not logged; one of "
                    f"{', '.join(sorted(trainer.callback_metrics)) or 'none yet'}"
                )
            self._trial.report(float(value), step=trainer.current_epoch)  # NaN too: pruned
            last = trainer.current_epoch + 1 >= (trainer.max_epochs or 0) > 0
            prune = not last and self._trial.should_prune()  # one that ran to its end is not
        prune = trainer.strategy.reduce_boolean_decision(prune, all=False)
        if not prune:
            return
        trainer.should_stop = True
        if trainer.is_global_zero:
            self._trial.set_user_attr(PRUNED_ATTR, trainer.current_epoch)
            tags = {"state": "PRUNED", "pruned_at_epoch": str(trainer.current_epoch)}
            set_step_tags(trainer, "optuna", tags)
