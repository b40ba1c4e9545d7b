"""What goes into a run and what comes out, as MLflow users look for them: the dataset input
(name, source, digest) and, with ``logger.log_model=true``, the trained net as an MLflow model."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import mlflow
import pytest
import torch

from hpml.data.base import files_digest
from hpml.data.image_folder import ImageFolderDataModule
from hpml.data.synthetic import SyntheticDataModule
from hpml.models.nets.lstm import LSTMClassifier
from hpml.models.nets.vgg import vgg
from hpml.tracking.model import export_problem
from hpml.tracking.resume import LAST_TAG
from tests.conftest import QUICK, QUICK_SAMPLES, run_cli
from tests.real_data import write_imagenet, write_real_data

# a few batches of each split: enough to train, test and log a model
FEW_BATCHES = [
    "++trainer.limit_train_batches=2",
    "++trainer.limit_val_batches=1",
    "++trainer.limit_test_batches=1",
]
NO_STEPS = ["fit=false", "test=false", "trainer.enable_progress_bar=false"]  # the run, no training


@pytest.fixture
def store_uri(root: Path) -> Iterator[str]:
    """The test's store as this process's tracking URI, where ``runs:/`` model URIs resolve."""
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{root}/mlflow.db")
    yield mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(previous)


def runs_oldest_first(client) -> list:
    experiment = client.get_experiment_by_name("hpml")
    return client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])


def only_input(client, run_id: str):
    inputs = client.get_run(run_id).inputs.dataset_inputs
    assert len(inputs) == 1, inputs
    return inputs[0]


def test_synthetic_digest_follows_the_knobs_that_make_the_samples() -> None:
    base = {"train_samples": 128, "val_samples": 64, "test_samples": 64, "seed": 1}
    digest = SyntheticDataModule(**base).description().digest
    # how the data is read changes no sample
    assert SyntheticDataModule(**base, batch_size=7, limit=10).description().digest == digest
    for change in ({"seed": 2}, {"train_samples": 96}, {"image_size": 28}, {"noise": 0.5}):
        assert SyntheticDataModule(**base | change).description().digest != digest, change
    # a knob of the other modality changes none of these images
    assert SyntheticDataModule(**base, seq_len=8).description().digest == digest
    tokens = SyntheticDataModule(modality="tokens", num_classes=2, **base).description()
    assert tokens.name == "synthetic_tokens" and tokens.digest != digest
    assert tokens.config["seq_len"] == 64 and tokens.path is None


def test_files_digest_follows_content_not_place_or_time(tmp_path: Path) -> None:
    write_imagenet(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # new mtimes, another path
    first = ImageFolderDataModule(data_dir=tmp_path / "a" / "imagenet").description()
    copy = ImageFolderDataModule(data_dir=tmp_path / "b" / "imagenet").description()
    assert (first.name, first.path) == ("imagenet", (tmp_path / "a" / "imagenet").resolve())
    assert copy.digest == first.digest
    root = tmp_path / "b" / "imagenet"
    (root / "train" / "README.txt").write_text("not an image")  # ImageFolder ignores it too
    assert ImageFolderDataModule(data_dir=root).description().digest == first.digest
    image = root / "val" / "n02" / "n02_0.JPEG"
    data = bytearray(image.read_bytes())
    data[-3] ^= 0xFF  # same name, same size, other content
    image.write_bytes(bytes(data))
    assert ImageFolderDataModule(data_dir=root).description().digest != first.digest
    # past the content budget only names and sizes count
    files = sorted(root.rglob("*.JPEG"))
    unchanged = sorted((tmp_path / "a" / "imagenet").rglob("*.JPEG"))
    assert files_digest(root, files, 0) == files_digest(tmp_path / "a" / "imagenet", unchanged, 0)


def change_content(path: Path) -> None:
    """Other content, still valid: one more review in the CSV, else a byte of the data flipped
    in the middle of the file (a pixel), which keeps its size."""
    if path.suffix == ".csv":
        with open(path, "a", encoding="utf-8") as f:
            f.write("One more review.,positive\n")
        return
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("option", "overrides", "name", "source", "changed"),
    [
        ("cifar10", ["model=vgg11"], "cifar10", "cifar-10-batches-py", "data_batch_3"),
        ("mnist", ["model=vae"], "mnist", "MNIST/raw", "train-images-idx3-ubyte"),
        (
            "imagenet",
            ["model=vgg11", "data.image_size=32"],
            "imagenet",
            "imagenet",
            "val/n01/n01_0.JPEG",
        ),
        ("imdb", ["model=lstm"], "imdb", "imdb/IMDB Dataset.csv", ""),
    ],
)
def test_real_data_is_the_runs_input_with_a_digest_of_its_files(
    root: Path,
    client,
    composed,
    option: str,
    overrides: list[str],
    name: str,
    source: str,
    changed: str,
) -> None:
    from hpml.train import train

    data_dir = root / "data"
    args = [*overrides, f"data={option}", *(write_real_data(option, data_dir) or []), *NO_STEPS]
    train(composed(args))
    train(composed([*args, "data.batch_size=16", "data.limit=8"]))  # the same files
    change_content(data_dir / source / changed)
    train(composed(args))

    inputs = [only_input(client, run.info.run_id) for run in runs_oldest_first(client)]
    datasets = [i.dataset for i in inputs]
    assert {d.name for d in datasets} == {name}
    assert {d.source_type for d in datasets} == {"local"}
    assert {json.loads(d.source)["uri"] for d in datasets} == {str((data_dir / source).resolve())}
    assert {(t.key, t.value) for t in inputs[0].tags} == {("mlflow.data.context", "train")}
    assert datasets[0].digest == datasets[1].digest != datasets[2].digest
    schema = json.loads(datasets[0].schema)["mlflow_colspec"]
    assert [column["name"] for column in schema] == [
        "tokens" if option == "imdb" else "image",
        "label",
    ]


@pytest.mark.slow
def test_vgg_is_logged_as_pt2_and_loads_back_as_the_trained_net(
    root: Path, client, store_uri: str
) -> None:
    args = ["model=vgg11", *QUICK, *FEW_BATCHES, "logger.log_model=true"]
    result = run_cli(args, root)
    assert result.returncode == 0, result.stderr[-3000:]
    run = runs_oldest_first(client)[-1]
    assert run.info.status == "FINISHED"
    assert run.data.tags["hpml.model_format"] == "pt2"
    assert "hpml.model_error" not in run.data.tags
    models = client.search_logged_models([run.info.experiment_id])
    assert [(m.name, m.source_run_id, str(m.status)) for m in models] == [
        ("model", run.info.run_id, "READY")
    ]

    # the synthetic data: a code source, described by the config that generates it
    dataset = only_input(client, run.info.run_id).dataset
    assert (dataset.name, dataset.source_type) == ("synthetic_image", "code")
    source = json.loads(dataset.source)["tags"]
    assert source["mlflow.source.name"] == "hpml.data.synthetic.SyntheticDataModule"
    assert (source["train_samples"], source["seed"]) == (QUICK_SAMPLES, 42)
    assert dataset.digest == SyntheticDataModule(**source_knobs(source)).description().digest

    logged = mlflow.pytorch.load_model(f"runs:/{run.info.run_id}/model")
    checkpoint = torch.load(run.data.tags[LAST_TAG], map_location="cpu", weights_only=False)
    net = vgg(depth=11, layout="cifar", batch_norm=True, num_classes=10)
    state = checkpoint["state_dict"]
    net.load_state_dict({key[4:]: value for key, value in state.items() if key.startswith("net.")})
    batch = torch.rand(5, 3, 32, 32)  # not the example's batch size: the batch is dynamic
    with torch.no_grad():
        torch.testing.assert_close(logged(batch), net.eval()(batch), rtol=1e-4, atol=1e-5)


def source_knobs(source: dict) -> dict:
    """The data module's arguments among a code source's tags."""
    return {key: value for key, value in source.items() if not key.startswith("mlflow.")}


def test_torch_export_takes_the_lstm_but_not_its_dynamic_int8_version() -> None:
    net = LSTMClassifier(vocab_size=50, embedding_dim=8, hidden_size=8).eval()
    tokens = torch.randint(1, 50, (2, 6))
    assert export_problem(net, tokens) is None
    quantised = torch.ao.quantization.quantize_dynamic(net, {torch.nn.LSTM}, dtype=torch.qint8)
    assert export_problem(quantised, tokens) is not None


@pytest.mark.slow
def test_a_net_torch_export_cannot_take_is_logged_as_pickle_and_loads(
    root: Path, client, composed, store_uri: str
) -> None:
    from hpml.train import train

    args = ["model=lstm", "quant=dynamic_int8", *QUICK, *FEW_BATCHES, "data.seq_len=16"]
    args += ["quant.latency_budget_s=0"]  # the 9 rounds: latency is not what this test checks
    train(composed([*args, "logger.log_model=true"]))
    run = runs_oldest_first(client)[-1]
    assert run.info.status == "FINISHED"
    assert run.data.tags["hpml.model_format"] == "pickle"
    logged = mlflow.pytorch.load_model(f"runs:/{run.info.run_id}/model")
    assert type(logged.lstm).__module__.startswith("torch.ao.nn.quantized.dynamic")
    tokens = torch.randint(1, 2000, (5, 16))
    with torch.no_grad():
        output = logged(tokens)
    assert output.shape == (5, 2) and torch.isfinite(output).all()


@pytest.mark.slow
def test_a_model_that_cannot_be_logged_warns_and_the_run_keeps_its_result(
    root: Path, client, composed, caplog: pytest.LogCaptureFixture
) -> None:
    from hpml.train import train

    swap = "+callbacks.swap._target_=tests.tracking.model_helpers.SwapInUnserialisable"
    metrics = train(composed(["model=vae", *QUICK, *FEW_BATCHES, "logger.log_model=true", swap]))
    assert "test/loss" in metrics
    run = runs_oldest_first(client)[-1]
    assert run.info.status == "FINISHED"
    assert "Unserialisable cannot be pickled" in run.data.tags["hpml.model_error"]
    assert "hpml.model_format" not in run.data.tags
    assert {"train/loss", "test/loss"} <= set(run.data.metrics)
    assert "could not log the model to MLflow" in caplog.text
    models = client.search_logged_models([run.info.experiment_id])
    assert all(str(m.status) != "READY" for m in models)
