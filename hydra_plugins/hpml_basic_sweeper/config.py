"""The ``hydra/sweeper: hpml_basic`` config, registered in Hydra's ConfigStore on import."""

from dataclasses import dataclass

from hydra._internal.core_plugins.basic_sweeper import BasicSweeperConf
from hydra.core.config_store import ConfigStore


@dataclass
class InterleavedSweeperConf(BasicSweeperConf):
    # max_batch_size and params as Hydra's basic sweeper's: params are an experiment's sweeps
    _target_: str = "hydra_plugins.hpml_basic_sweeper.sweeper.InterleavedSweeper"


ConfigStore.instance().store(
    group="hydra/sweeper", name="hpml_basic", node=InterleavedSweeperConf, provider="hpml"
)
