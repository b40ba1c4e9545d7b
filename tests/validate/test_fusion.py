"""Which jobs of a sweep fuse (``hpml.fused.plan``), on real configs composed from ``conf/``.

The configs are composed as the fused launcher gets them (Hydra's node included: a refusal names
the option of a config group from ``hydra.runtime.choices``). A sweep that cannot fuse runs one
by one after one line naming what kept it apart; a refused member of an array fails every
member, each as a FAILED run of the sweep in a real MLflow store. Each callback's class says how
it runs in an array (``in_array``), and the array builds it so.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, open_dict

from hpml.build import build_callbacks
from hpml.callbacks.bound import BoundMonitor
from hpml.callbacks.canary import Canary
from hpml.callbacks.model_stats import MemberStats
from hpml.callbacks.perf import PerformanceMonitor
from hpml.callbacks.target import MemberTimeToTarget
from hpml.fused.launch import placed, task_config
from hpml.fused.members import array_callbacks
from hpml.fused.plan import FUSED_LAUNCHER, UnfusedNote, plan, unfused_note
from hydra_plugins.hpml_fused_launcher.launcher import FusedLauncher
from tests.conftest import CONF
from tests.helpers import EachMember, FailAtEpoch

FUSED = ["model=vae", "fuse=array"]  # VAE: Adam, synthetic MNIST


@pytest.fixture(autouse=True)
def conf() -> Iterator[None]:
    """Hydra initialised on ``conf/`` for the test's compositions; its globals cleared after."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield
    HydraConfig.instance().cfg = None


@cache
def composed(*overrides: str) -> DictConfig:
    """Composing is most of this file's time: each set of overrides is composed once."""
    return compose("train", overrides=list(overrides), return_hydra_config=True)


def job(*overrides: str) -> DictConfig:
    """One job's config as the launcher composes it, Hydra's node included."""
    return copy.deepcopy(composed(*overrides))


def sweep(values: list[str], *shared: str) -> list[DictConfig]:
    """One job per entry of ``values`` (an override each), all with ``shared``."""
    return [job(*shared, value) for value in values]


class Calls:
    """A capacity that counts how often plan() asks for it."""

    def __init__(self, size: int | None) -> None:
        self.size, self.count = size, 0

    def __call__(self) -> int | None:
        self.count += 1
        return self.size


@pytest.mark.parametrize(
    ("values", "shared"),
    [
        (["model.optimizer.lr=0.1", "model.optimizer.lr=0.01", "model.optimizer.lr=3e-4"], []),
        (["seed=1", "seed=2"], []),
        (["replicate=0", "replicate=1", "replicate=2"], []),
        (["+model.optimizer.betas=[0.9,0.99]", "+model.optimizer.betas=[0.8,0.9]"], []),
        (
            ["model.scheduler.gamma=0.5", "model.scheduler.gamma=0.9"],
            ["model/scheduler=step", "model.scheduler.step_size=2"],
        ),
        (
            ["model.scheduler.gamma=0.5", "model.scheduler.step_size=3"],
            ["model/scheduler=step"],
        ),
        (["model/scheduler=step", "model/scheduler=cosine", "model.optimizer.lr=1e-3"], []),
    ],
    ids=[
        "lr",
        "seed",
        "replicate",
        "betas",
        "scheduler-gamma",
        "scheduler-options",
        "step-cosine-none",
    ],
)
def test_jobs_differing_in_shape_preserving_values_fuse_into_one_array(
    values: list[str], shared: list[str]
) -> None:
    """A scheduler of another kind, or none, fuses too: each member steps its own."""
    configs = sweep(values, *FUSED, *shared)
    capacity = Calls(None)
    decided = plan(configs, on_cpu=False, capacity=capacity)
    assert decided.arrays == [list(range(len(values)))]
    assert decided.serial == []
    assert decided.reason is None
    assert capacity.count == 1


def test_a_swept_shape_runs_every_job_alone_naming_the_key() -> None:
    configs = sweep(["model.net.hidden=400", "model.net.hidden=200"], *FUSED)
    capacity = Calls(8)
    decided = plan(configs, on_cpu=False, capacity=capacity)
    assert (decided.arrays, decided.serial) == ([], [0, 1])
    assert decided.reason.startswith("fuse=array: not fusing: model.net.hidden differs")
    assert "running the 2 jobs one by one" in decided.reason
    assert capacity.count == 0  # no model is built to measure jobs that run alone


def test_a_lr_and_a_shape_swept_together_do_not_fuse() -> None:
    configs = [
        job(*FUSED, f"model.optimizer.lr={lr}", f"model.net.hidden={hidden}")
        for lr in (0.1, 0.2)
        for hidden in (400, 200)
    ]
    decided = plan(configs, on_cpu=False)
    assert decided.serial == [0, 1, 2, 3]
    assert "not fusing: model.net.hidden" in decided.reason


def test_on_cpu_the_jobs_run_alone_unless_forced() -> None:
    values = ["model.optimizer.lr=0.1", "model.optimizer.lr=0.2"]
    decided = plan(sweep(values, *FUSED), on_cpu=True)
    assert (decided.arrays, decided.serial) == ([], [0, 1])
    assert "on CPU" in decided.reason and "fuse.force=true fuses anyway" in decided.reason
    forced = plan(sweep(values, *FUSED, "fuse.force=true"), on_cpu=True)
    assert (forced.arrays, forced.serial, forced.reason) == ([[0, 1]], [], None)


def test_the_default_callbacks_fuse_but_an_extra_one_does_not() -> None:
    values = ["model.optimizer.lr=0.1", "model.optimizer.lr=0.2"]
    defaults = sweep(values, *FUSED)
    assert set(defaults[0].callbacks) == {
        "model_stats",
        "perf",
        "bound",
        "target",
        "memory",
        "checkpoint",
        "canary",
    }
    assert plan(defaults, on_cpu=False).arrays == [[0, 1]]
    # one whose class does not say how it runs in an array (in_array): a line names it
    extra = "+callbacks.extra._target_=tests.helpers.Undeclared"
    decided = plan(sweep(values, *FUSED, extra), on_cpu=False)
    assert (decided.arrays, decided.serial) == ([], [0, 1])
    assert decided.reason.startswith("fuse=array: not fusing: callbacks.extra is set")
    assert decided.reason == (
        "fuse=array: not fusing: callbacks.extra is set, and tests.helpers.Undeclared does not "
        "say how it runs in an array (in_array: per member, once, not in arrays or serial); "
        "running the 2 jobs one by one"
    )


@pytest.mark.parametrize(
    "extra",
    [
        "+callbacks.extra._target_=tests.helpers.FailAtEpoch",  # once
        "+callbacks.extra._target_=tests.helpers.EachMember",  # per member
        "+callbacks.extra._target_=hpml.callbacks.epoch_summary.EpochSummary",  # once
    ],
    ids=["once", "per-member", "hpml-once"],
)
def test_a_callback_whose_class_says_it_runs_in_an_array_fuses(extra: str) -> None:
    values = ["model.optimizer.lr=0.1", "model.optimizer.lr=0.2"]
    decided = plan(sweep(values, *FUSED, extra), on_cpu=False)
    assert (decided.arrays, decided.serial, decided.reason) == ([[0, 1]], [], None)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (
            "callbacks=analysis",
            "callbacks.roofline is set, and hpml.callbacks.roofline.RooflineCallback runs only in "
            "a job of its own (its in_array: serial)",
        ),
        (
            "+callbacks.extra._target_=lightning.pytorch.callbacks.EarlyStopping",
            "callbacks.extra is set, and lightning.pytorch.callbacks.early_stopping.EarlyStopping "
            "does not say how it runs in an array",
        ),
        (
            "+callbacks.extra._target_=tests.helpers.no_such_callback",
            "callbacks.extra is set, and its _target_ tests.helpers.no_such_callback cannot be "
            "imported",
        ),
    ],
    ids=["serial", "lightning", "missing"],
)
def test_a_callback_that_runs_only_alone_or_says_nothing_runs_every_job_alone(
    extra: str, named: str
) -> None:
    values = ["model.optimizer.lr=0.1", "model.optimizer.lr=0.2"]
    capacity = Calls(8)
    decided = plan(sweep(values, *FUSED, extra), on_cpu=False, capacity=capacity)
    assert (decided.arrays, decided.serial) == ([], [0, 1])
    assert decided.reason.startswith(f"fuse=array: not fusing: {named}"), decided.reason
    assert decided.reason.endswith("; running the 2 jobs one by one")
    assert capacity.count == 0


def test_the_array_builds_each_callback_as_its_class_says(root: Path) -> None:
    """model_stats and target per member, perf, bound and the canary once (perf without its FLOP
    count: its for_members), memory and checkpoint left out; a test's ONCE and PER_MEMBER callbacks
    likewise."""
    overrides = [
        *FUSED,
        f"paths.root_dir={root}",
        "callbacks.target.metric=val/loss",
        "callbacks.target.value=0.5",
        "+callbacks.fail._target_=tests.helpers.FailAtEpoch",
        "+callbacks.each._target_=tests.helpers.EachMember",
        "+callbacks.each.label=mine",
    ]
    cfg = task_config(placed(sweep_job(overrides, root / "multirun", 0)))
    built = array_callbacks(build_callbacks(cfg), 3)
    assert [type(callback) for callback in built] == [
        MemberStats,
        PerformanceMonitor,
        BoundMonitor,
        *[MemberTimeToTarget] * 3,
        Canary,
        FailAtEpoch,
        *[EachMember] * 3,
    ]
    perf = built[1]
    assert perf.count_flops is False and perf.warmup_steps == cfg.callbacks.perf.warmup_steps
    targets = built[3:6]
    assert [t.member for t in targets] == [0, 1, 2]
    assert {(t.metric, t.value, t.mode, t.stop) for t in targets} == {
        ("val/loss", 0.5, "min", False)
    }
    assert [(c.label, c.member) for c in built[8:]] == [("mine", 0), ("mine", 1), ("mine", 2)]
    # the same config trained alone: every callback as configured, perf counting FLOPs
    alone = build_callbacks(cfg)
    assert "MemoryBreakdown" in {type(c).__name__ for c in alone}
    assert next(c for c in alone if isinstance(c, PerformanceMonitor)).count_flops is True


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("prune=l1_unstructured", "prune=l1_unstructured is set"),
        ("trainer.precision=16-mixed", "trainer.precision=16-mixed is set"),
        ("+trainer.accumulate_grad_batches=2", "trainer.accumulate_grad_batches=2 is set"),
        ("+trainer.gradient_clip_val=1.0", "trainer.gradient_clip_val=1.0 is set"),
    ],
)
def test_a_setting_an_array_cannot_train_with_runs_every_job_alone(
    setting: str, named: str
) -> None:
    configs = sweep(["model.optimizer.lr=0.1", "model.optimizer.lr=0.2"], *FUSED, setting)
    capacity = Calls(8)
    decided = plan(configs, on_cpu=False, capacity=capacity)
    assert (decided.arrays, decided.serial) == ([], [0, 1])
    assert decided.reason.startswith(f"fuse=array: not fusing: {named}")
    assert capacity.count == 0


def test_without_fuse_array_every_job_runs_alone_silently() -> None:
    configs = sweep(["model.optimizer.lr=0.1", "model.optimizer.lr=0.2"], "model=vae", "fuse=none")
    capacity = Calls(8)
    decided = plan(configs, on_cpu=False, capacity=capacity)
    assert (decided.arrays, decided.serial, decided.reason) == ([], [0, 1], None)
    assert capacity.count == 0


def test_a_single_job_has_nothing_to_fuse_with() -> None:
    decided = plan([job(*FUSED)], on_cpu=False, capacity=Calls(8))
    assert (decided.arrays, decided.serial) == ([], [0])
    assert "single job" in decided.reason


def lrs(count: int, *shared: str) -> list[DictConfig]:
    return sweep([f"model.optimizer.lr={i + 1}e-3" for i in range(count)], *FUSED, *shared)


def test_the_capacity_splits_a_sweep_and_a_lone_remainder_runs_serially() -> None:
    decided = plan(lrs(5), on_cpu=False, capacity=lambda: 2)
    assert decided.arrays == [[0, 1], [2, 3]]
    assert decided.serial == [4]
    assert decided.reason is None


def test_max_members_caps_an_array_without_a_capacity() -> None:
    decided = plan(lrs(7, "fuse.max_members=3"), on_cpu=False)
    assert decided.arrays == [[0, 1, 2], [3, 4, 5]]
    assert decided.serial == [6]


@pytest.mark.parametrize(("capacity", "size"), [(2, 2), (5, 3), (None, 3)])
def test_an_array_holds_the_smaller_of_max_members_and_the_capacity(
    capacity: int | None, size: int
) -> None:
    """Both are a most per array (fuse.max_members in conf/fuse/array.yaml, capacity in
    plan()'s docstring), so the tighter one holds."""
    decided = plan(lrs(6, "fuse.max_members=3"), on_cpu=False, capacity=lambda: capacity)
    assert decided.arrays == [list(range(i, min(i + size, 6))) for i in range(0, 6, size)]
    assert decided.serial == []


def test_a_capacity_of_one_runs_every_job_alone() -> None:
    decided = plan(lrs(3), on_cpu=False, capacity=lambda: 1)
    assert (decided.arrays, decided.serial, decided.reason) == ([], [0, 1, 2], None)


def test_fuse_array_selects_the_fused_launcher_and_the_command_line_can_override_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    fused = job(*FUSED)
    assert fused.hydra.runtime.choices["hydra/launcher"] == FUSED_LAUNCHER
    assert unfused_note(fused, FUSED_LAUNCHER, multirun=True) is None
    basic = job(*FUSED, "hydra/launcher=basic")
    launcher = basic.hydra.runtime.choices["hydra/launcher"]
    assert launcher == "basic"
    note = unfused_note(basic, launcher, multirun=True)
    assert note.startswith("fuse=array: hydra/launcher=basic runs this sweep's jobs one by one")
    UnfusedNote().on_multirun_start(basic)  # the sweep's first callback says it as it starts
    assert capsys.readouterr().out == f"hpml: {note}\n"
    assert next(iter(basic.hydra.callbacks)) == "fuse_note"


def test_the_note_when_fuse_array_cannot_act() -> None:
    cfg = job(*FUSED)
    single = unfused_note(cfg, FUSED_LAUNCHER, multirun=False)
    assert single is not None and "single run" in single and " -m" in single
    joblib = unfused_note(cfg, "joblib", multirun=True)
    assert joblib is not None and "hydra/launcher=joblib" in joblib
    assert unfused_note(cfg, FUSED_LAUNCHER, multirun=True) is None
    plain = job("model=vae", "fuse=none")
    assert unfused_note(plain, "basic", multirun=True) is None
    assert unfused_note(plain, None, multirun=False) is None


def sweep_job(overrides: list[str], sweep_dir: Path, num: int) -> DictConfig:
    """A job of a multirun in ``sweep_dir``, as the fused launcher composes it."""
    config = job(*overrides)
    with open_dict(config):
        config.hydra.mode = RunMode.MULTIRUN
        config.hydra.sweep.dir = str(sweep_dir)
        config.hydra.job.num = config.hydra.job.id = num
        config.hydra.job.name = "train"
    return config


def test_the_launcher_admits_valid_jobs_and_leaves_a_refused_one_to_run_alone(
    root: Path,
) -> None:
    sweep_dir = root / "multirun" / "sweep"
    shared = [*FUSED, f"paths.root_dir={root}"]
    lrs = ("0.001", "-1", "0.01")
    configs = [
        sweep_job([*shared, f"model.optimizer.lr={lr}"], sweep_dir, num)
        for num, lr in enumerate(lrs)
    ]
    launcher = FusedLauncher()
    admitted = [launcher._admitted(config) for config in configs]
    assert admitted == [True, False, True]
    member = launcher.members[2]  # its parts built once, to train with
    task, member_job, parts = member.cfg, member.job, member.parts
    assert task.model.optimizer.lr == 0.01 and member_job.sweep.num == 2
    assert parts.datamodule is not None
    assert member_job.output_dir == (sweep_dir / "2").resolve()
    assert (member_job.output_dir / ".hydra" / "overrides.yaml").is_file()

    decided = plan(configs, on_cpu=False, capacity=Calls(None), admit=lambda i: admitted[i])
    assert (decided.arrays, decided.serial, decided.reason) == ([[0, 2]], [1], None)


def test_one_admitted_job_has_no_array_to_join() -> None:
    capacity = Calls(8)
    decided = plan(lrs(3), on_cpu=False, capacity=capacity, admit=lambda i: i == 0)
    assert (decided.arrays, decided.serial) == ([], [0, 1, 2])
    assert capacity.count == 0
