"""Secrets never reach MLflow: URI credentials and secret-named values are masked."""

from __future__ import annotations

from pathlib import Path

from hpml.tracking.redact import MASK, redact_config, redact_text
from tests.conftest import QUICK


def test_uri_credentials_are_masked_anywhere_in_text():
    assert (
        redact_text("to http://alice:s3cret@host:5000/x and sqlite:///a.db")
        == "to http://***@host:5000/x and sqlite:///a.db"
    )
    assert redact_text("postgresql://bob@db/mlflow") == "postgresql://***@db/mlflow"
    assert redact_text("mail me: a@b.org") == "mail me: a@b.org"


def test_secret_names_and_values_from_secret_env_vars_are_masked():
    resolved = {
        "db_password": "hunter2",
        "logger": {"tracking_uri": "https://u:p@h/", "experiment_name": "tok"},
        "extra": {"from_env": "abc123", "home": "/root", "list": ["x", "http://u:p@h"]},
    }
    raw = {
        "db_password": "hunter2",
        "logger": {"tracking_uri": "https://u:p@h/", "experiment_name": "tok"},
        "extra": {
            "from_env": "${oc.env:HF_TOKEN}",
            "home": "${oc.env:HOME}",
            "list": ["x", "http://u:p@h"],
        },
    }
    assert redact_config(resolved, raw) == {
        "db_password": MASK,
        "logger": {"tracking_uri": "https://***@h/", "experiment_name": "tok"},
        "extra": {"from_env": MASK, "home": "/root", "list": ["x", "http://***@h"]},
    }


def test_a_run_logs_no_secret(composed, client, monkeypatch):
    from hpml.train import train

    monkeypatch.setenv("HPML_TEST_API_TOKEN", "tok-abc123")
    cfg = composed(
        [
            "model=vae",
            *QUICK,
            "+extra.token_from_env=${oc.env:HPML_TEST_API_TOKEN}",
            "+extra.mirror=http://alice:s3cret@example.org/x",
            "+extra.password=hunter2",
        ]
    )
    train(cfg)
    run = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]
    params = run.data.params
    assert params["extra.token_from_env"] == MASK
    assert params["extra.password"] == MASK
    assert params["extra.mirror"] == "http://***@example.org/x"
    content = Path(
        client.download_artifacts(run.info.run_id, "config/config_resolved.yaml")
    ).read_text()
    for secret in ("tok-abc123", "s3cret", "hunter2"):
        assert secret not in content
        assert all(secret not in v for v in params.values())
