"""The ``hydra/sweeper: hpml_optuna`` config, registered in Hydra's ConfigStore on import."""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.hpml_optuna_sweeper.sweeper.OptunaSweeper"
    _recursive_: bool = False  # the sampler is built when the study is known (its seed)
    # the study holds this many finished trials (complete or failed) when the search ends
    n_trials: int = 8
    # trials asked for and handed to the launcher at once (run in parallel by joblib/submitit)
    n_jobs: int = 1
    # null: minimize, or maximize when the optimized_metric's name ends in "acc"
    direction: str | None = None
    # null: the hparams_search option's name (or "hpml_search" without one)
    study_name: str | None = None
    # where the study lives: resumed from there when run again with the same study name
    storage: str | None = "sqlite:///${paths.root_dir}/optuna.db"
    # seed: the search's first trials; a resumed search adds the trials the study holds
    sampler: dict[str, Any] = field(
        default_factory=lambda: {"_target_": "optuna.samplers.TPESampler", "seed": 42}
    )
    # stops unpromising trials early (callbacks.optuna_pruning reports each validation); the
    # run ends FINISHED, tagged hpml.optuna.state=PRUNED; null: every trial runs to the end
    pruner: dict[str, Any] | None = field(
        default_factory=lambda: {
            "_target_": "optuna.pruners.MedianPruner",
            "n_startup_trials": 4,  # trials that finish before any is pruned
            "n_warmup_steps": 0,  # epochs of a trial never pruned (0: from its first)
        }
    )
    # search space, key -> Hydra sweep (choice(...), range(...), interval(...), tag(log, ...));
    # a plain value fixes the key; sweeps on the command line join the space
    params: dict[str, str] | None = None


ConfigStore.instance().store(
    group="hydra/sweeper", name="hpml_optuna", node=OptunaSweeperConf, provider="hpml"
)
