"""``hparams_search=<name>``: an Optuna study run by hpml's own sweeper plugin, every trial a
child run of the search's parent, failed trials recorded, the study resumed from its storage."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mlflow import MlflowClient

from tests.conftest import QUICK, run_cli
from tests.report.test_report import report

# the search needs optuna (the sweeper's own dependency): without it, skipped, not a collection
# error that stops every other test of a run (a GPU host's `pytest -m gpu` among them)
optuna = pytest.importorskip("optuna")
TrialState = optuna.trial.TrialState

pytestmark = pytest.mark.slow
SEARCH = ["-m", "hparams_search=vae_optuna", "hydra.sweeper.n_jobs=2", *QUICK]
BEST = re.compile(r"^hpml: search (\S+): best val/loss=(\S+) \(trial (\d+)\): (.*)$", re.M)


def study(root: Path, name: str = "vae_optuna") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{root}/optuna.db")


def searches(client: MlflowClient) -> dict[str, list]:
    """Each parent run's id -> its child runs."""
    runs = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    parents = [r.info.run_id for r in runs if r.data.tags.get("hpml.sweep_parent") == "true"]
    return {p: [r for r in runs if r.data.tags.get("mlflow.parentRunId") == p] for p in parents}


PRUNE_ALL = "callbacks.optuna_pruning.pruner={_target_:optuna.pruners.ThresholdPruner,upper:0}"


def test_search_of_four_trials_logs_four_children_and_prints_the_best(root, client):
    # the pruner would prune every trial (any loss is above 0), but a trial's one epoch is its
    # last, and one that ran to its end is complete
    result = run_cli([*SEARCH, "hydra.sweeper.n_trials=4", PRUNE_ALL], root)
    assert result.returncode == 0, result.stderr[-3000:]
    ((parent, children),) = searches(client).items()
    assert len(children) == 4
    assert {r.info.status for r in children} == {"FINISHED"}
    best = BEST.search(result.stderr)
    assert best, result.stderr[-3000:]
    assert best.group(1) == "vae_optuna"
    losses = {int(r.data.tags["hpml.optuna.trial"]): r.data.metrics["val/loss"] for r in children}
    assert sorted(losses) == [0, 1, 2, 3]
    assert float(best.group(2)) == pytest.approx(min(losses.values()), abs=1e-6)
    assert losses[int(best.group(3))] == min(losses.values())
    # QUICK's data.batch_size=32 on the command line fixes what the config would sample
    assert best.group(4).split(" ")[0].startswith("model.optimizer.lr=")
    assert "model.net.latent=" in best.group(4) and "data.batch_size" not in best.group(4)
    trials = study(root).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    assert {t.user_attrs["mlflow_run_id"] for t in trials} == {r.info.run_id for r in children}
    tags = client.get_run(parent).data.tags
    assert tags["hpml.optuna.study"] == "vae_optuna"
    assert tags["hpml.optuna.best_trial"] == best.group(3)
    sweep_dir = Path(tags["hpml.sweep_dir"])
    assert "best_params:" in (sweep_dir / "optimization_results.yaml").read_text()
    # each sampled parameter's importance, as Optuna computes it from the stored study
    expected = optuna.importance.get_param_importances(study(root))
    tagged = {
        key.removeprefix("hpml.optuna.importance."): float(value)
        for key, value in tags.items()
        if key.startswith("hpml.optuna.importance.")
    }
    assert tagged == pytest.approx(expected) and sum(tagged.values()) == pytest.approx(1)
    assert set(tagged) == {"model.optimizer.lr", "model.net.latent"}
    page = report(root, "--last")
    assert page.returncode == 0, page.stderr[-3000:]
    md = Path(page.stdout.split()[5]).read_text()
    assert "## Parameter importances" in md and "## Swept keys against the optimised metric" in md


def test_a_failed_trial_leaves_the_search_going(root, client):
    # job 0 (the first trial) raises when its first epoch starts, whatever the sampler drew;
    # the other jobs never reach the epoch their number names (one epoch each)
    fail = [
        "+callbacks.fail._target_=tests.helpers.FailAtEpoch",
        "+callbacks.fail.epoch=${hydra:job.num}",
    ]
    result = run_cli([*SEARCH, "hydra.sweeper.n_trials=4", *fail], root)
    assert result.returncode == 1, result.stderr[-3000:]  # a failed job fails the sweep
    assert "4 runs, 1 failed" in result.stderr
    assert BEST.search(result.stderr), result.stderr[-3000:]
    trials = study(root).trials
    assert [t.state for t in trials] == [TrialState.FAIL, *[TrialState.COMPLETE] * 3]
    assert "failed" in trials[0].user_attrs["error"]
    ((_, children),) = searches(client).items()
    states = {r.data.tags["hpml.optuna.trial"]: r.data.tags["hpml.optuna.state"] for r in children}
    assert states == {"0": "FAIL", "1": "COMPLETE", "2": "COMPLETE", "3": "COMPLETE"}
    status = {r.data.tags["hpml.optuna.trial"]: r.info.status for r in children}
    assert status == {"0": "FAILED", "1": "FINISHED", "2": "FINISHED", "3": "FINISHED"}
    (failed,) = [r for r in children if r.info.status == "FAILED"]
    assert "injected failure at epoch 0" in failed.data.tags["hpml.error"]


def test_a_second_invocation_resumes_the_study(root, client):
    first = run_cli([*SEARCH, "hydra.sweeper.n_trials=2"], root)
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_cli([*SEARCH, "hydra.sweeper.n_trials=4"], root)
    assert second.returncode == 0, second.stderr[-3000:]
    trials = study(root).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    parents = searches(client)
    assert sorted(len(children) for children in parents.values()) == [2, 2]
    numbers = sorted(
        sorted(int(r.data.tags["hpml.optuna.trial"]) for r in children)
        for children in parents.values()
    )
    assert numbers == [[0, 1], [2, 3]]
    # the resumed sampler does not start over: no trial repeats an earlier one's values
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 4


def test_pruned_trials_stop_early_and_are_marked_in_mlflow(root, client):
    # the pruner prunes any loss above zero: every trial after its first of three epochs
    args = [*SEARCH, "hydra.sweeper.n_trials=2", "trainer.max_epochs=3", PRUNE_ALL]
    result = run_cli(args, root)
    assert result.returncode == 0, result.stderr[-3000:]  # pruning is no failure
    assert "no trial completed (2 PRUNED)" in result.stderr
    trials = study(root).trials
    assert [t.state for t in trials] == [TrialState.PRUNED] * 2
    assert [sorted(t.intermediate_values) for t in trials] == [[0], [0]]
    ((_, children),) = searches(client).items()
    assert {r.info.status for r in children} == {"FINISHED"}
    assert {r.data.tags["hpml.optuna.state"] for r in children} == {"PRUNED"}
    assert {r.data.tags["hpml.optuna.pruned_at_epoch"] for r in children} == {"0"}
    for run in children:  # one epoch trained of three, and its loss is what the trial holds
        (loss,) = client.get_metric_history(run.info.run_id, "val/loss")
        trial = trials[int(run.data.tags["hpml.optuna.trial"])]
        assert trial.intermediate_values[0] == pytest.approx(loss.value)


def test_a_study_of_fewer_than_two_trials_has_no_importances():
    """Optuna warns and shares importance equally below two trials: that is no figure."""
    import warnings

    from hydra_plugins.hpml_optuna_sweeper.study import param_importances

    one = optuna.create_study()
    one.optimize(lambda trial: trial.suggest_float("lr", 1e-4, 1e-1), n_trials=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Optuna's "too small to compute importances"
        assert param_importances(one, optuna) == {}
    one.optimize(lambda trial: trial.suggest_float("lr", 1e-4, 1e-1), n_trials=2)
    assert set(param_importances(one, optuna)) == {"lr"}
