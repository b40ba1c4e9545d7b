"""Experiments are created once even when two jobs or sweeps race to create them."""

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
