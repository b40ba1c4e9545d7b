"""``python -m hpml.train``: compose the config, instantiate the pieces, hand them to Lightning.

Everything heavy is imported inside ``train`` so ``--help`` and config errors answer at once.
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from omegaconf import DictConfig

from hpml.cli import check_args, hoist_flags, report_failure

GROUPS_OF_ONE_CALLBACK = ("prune", "quant", "compile", "profile")


def build(group: str, node: DictConfig, **kwargs: Any) -> Any:
    """Instantiate config group ``group``, passing live objects (data spec, callbacks) as-is.

    The config becomes a partial first, so ``kwargs`` never pass through OmegaConf; errors come
    back with the group's name in their keys.
    """
    from hpml.errors import ConfigError

    try:
        return hydra.utils.instantiate(node, _partial_=True)(**kwargs)
    except InstantiationException as exc:
        cause = exc.__cause__ or exc
        if isinstance(cause, ConfigError):
            raise cause.under(group) from cause
        raise cause from exc
    except ConfigError as exc:
        raise exc.under(group) from exc


def build_callbacks(cfg: DictConfig) -> list[Any]:
    """The ``callbacks`` group (a dict of callbacks) and the one-callback optimisation groups."""
    callbacks = [build("callbacks", node) for node in (cfg.get("callbacks") or {}).values()
                 if node and "_target_" in node]
    for group in GROUPS_OF_ONE_CALLBACK:
        node = cfg.get(group)
        if node and "_target_" in node:
            callbacks.append(build(group, node))
    return callbacks


def train(cfg: DictConfig) -> dict[str, float]:
    """Fit and test the configured model inside one MLflow run; return the final metrics."""
    import lightning as L

    # `import lightning` adds its own console handler; Hydra's job logging already prints and
    # files every record, so without this each Lightning message shows twice.
    logging.getLogger("lightning").handlers.clear()
    tracker = build("logger", cfg.logger)
    with tracker.run(cfg) as run:
        L.seed_everything(cfg.seed, workers=True, verbose=False)
        datamodule = build("data", cfg.data)
        datamodule.prepare_data()
        model = build("model", cfg.model, data=datamodule.spec)
        trainer = build("trainer", cfg.trainer, callbacks=build_callbacks(cfg),
                        logger=run.lightning_logger())
        run.set_device(trainer.strategy.root_device)
        metrics: dict[str, float] = {}
        if cfg.fit:
            trainer.fit(model, datamodule=datamodule)
            metrics |= {name: float(value) for name, value in trainer.callback_metrics.items()}
        if cfg.test:  # test starts callback_metrics afresh: keep what fit left
            trainer.test(model, datamodule=datamodule, verbose=False)
            metrics |= {name: float(value) for name, value in trainer.callback_metrics.items()}
    uri = tracker.tracking_uri
    print(f"hpml: run {run.run_id} finished in {uri}\n"
          f"hpml: compare runs with `make ui` (or `mlflow ui --backend-store-uri {uri}`), "
          f"then open http://127.0.0.1:5000/{run.ui_path}")
    return metrics


def compose_job(overrides: list[str], output_dir: Path) -> DictConfig:
    """The job config ``@hydra.main`` would hand ``main``, composed in-process (tests, benches).

    ``compose`` leaves the runtime fields a launched job gets unset; ``train`` reads the output
    dir, job name and mode from them, so they are filled in, and HydraConfig is set for the
    ``${hydra:...}`` interpolations.
    """
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from hpml.cli import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    output_dir.mkdir(parents=True, exist_ok=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(output_dir)
        cfg.hydra.job.name = "train"
        cfg.hydra.mode = RunMode.RUN
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Hydra task: a failed job prints one line; a sweep records it and goes on to the next job."""
    hc = HydraConfig.get()
    try:
        metrics = train(cfg)
    except Exception as exc:
        report_failure(exc, Path(hc.runtime.output_dir) / f"{hc.job.name}.log")
        if hc.mode == RunMode.MULTIRUN:
            return math.nan
        raise SystemExit(1) from None
    return metrics.get(cfg.optimized_metric) if cfg.optimized_metric else None


if __name__ == "__main__":
    sys.argv[1:] = hoist_flags(sys.argv[1:])
    check_args(sys.argv[1:])
    main()
