"""Experiments are created once even when two jobs or sweeps race to create them; what MLflow
refuses at a run's end is named, not raised."""

from __future__ import annotations

from mlflow import MlflowClient

from hpml.tracking.store import experiment_id


class LateClient(MlflowClient):
    """Sees no experiment on its first look, as a job does when another one is creating it."""

    looked = False

    def get_experiment_by_name(self, name):
        if not self.looked:
            self.looked = True
            MlflowClient(self.tracking_uri).create_experiment(name)  # the other job wins
            return None
        return super().get_experiment_by_name(name)


def test_losing_the_creation_race_returns_the_winners_experiment(store_template, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    (tmp_path / "mlflow.db").write_bytes(store_template.read_bytes())
    found = experiment_id(LateClient(uri), "hpml", str(tmp_path))
    assert found == MlflowClient(uri).get_experiment_by_name("hpml").experiment_id


def test_local_store_puts_artifacts_beside_it(store_template, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    (tmp_path / "mlflow.db").write_bytes(store_template.read_bytes())
    client = MlflowClient(uri)
    exp = client.get_experiment(experiment_id(client, "study", str(tmp_path / "art")))
    assert exp.artifact_location == (tmp_path / "art" / "study").as_uri()


def test_what_mlflow_refuses_at_a_runs_end_is_named_not_raised(root, caplog):
    """What MLflow refuses while a run ends (here a tag name it does not take) is one warning
    naming what was not recorded, in the user's words; the run's end goes on."""
    from hpml.tracking.tracked import best_effort

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    run = client.create_run(client.create_experiment("ending"))
    with caplog.at_level("WARNING", logger="hpml.tracking.tracked"):
        best_effort("tag bad!name", client.set_tag, run.info.run_id, "bad!name", "value")
    client.set_terminated(run.info.run_id)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "hpml.tracking.tracked"]
    assert line.startswith("could not record tag bad!name in MLflow: "), line
    assert "set_tag" not in line
    assert client.get_run(run.info.run_id).info.status == "FINISHED"
