"""The ``hydra/launcher: hpml_fused`` config, registered in Hydra's ConfigStore on import."""

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore


@dataclass
class FusedLauncherConf:
    _target_: str = "hydra_plugins.hpml_fused_launcher.launcher.FusedLauncher"


ConfigStore.instance().store(
    group="hydra/launcher", name="hpml_fused", node=FusedLauncherConf, provider="hpml"
)
