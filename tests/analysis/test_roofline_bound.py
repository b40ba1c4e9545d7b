"""The roof drawn beside a model's layers bounds every one of them: VGG11-CIFAR's even from a
stale measured record; on CUDA, the VAE's against the device's datasheet roof."""

from __future__ import annotations

import csv
import json
from functools import partial

import lightning as L
import pytest
import torch

from hpml.analysis.devices import match_device_name
from hpml.analysis.measured_peak import measure_peak
from hpml.callbacks.roofline import RooflineCallback
from hpml.data.synthetic import SyntheticDataModule
from hpml.models.classifier import ImageClassifier
from hpml.models.nets.vgg import vgg
from hpml.names import FORWARD_ACHIEVED, PEAK_BANDWIDTH, PEAK_FP32, PEAK_TAG
from hpml.tracking.logger import AttachedMLFlowLogger
from hpml.tracking.store import experiment_id
from hpml.train import train
from tests.conftest import QUICK

STALE = 1e6  # FLOP/s and bytes/s of a planted record: a roof every layer beats


def test_no_vgg11_layer_is_above_the_roof_drawn_beside_it(root, client, tmp_path):
    cache = tmp_path / "peaks"
    measure_peak(torch.device("cpu"), cache, seconds=0.05)
    (record_path,) = cache.glob("*.json")
    record = json.loads(record_path.read_text())
    record |= {"flops_per_s": STALE, "memory_bytes_per_s": STALE}
    record["load_avg_1m_5m_15m"] = [0.0, 0.0, 0.0]  # taken on a quiet machine: it is reused
    record_path.write_text(json.dumps(record))

    run_id = client.create_run(experiment_id(client, "hpml", str(root / "mlartifacts"))).info.run_id
    data = SyntheticDataModule(train_samples=8, val_samples=4, test_samples=4, batch_size=4)
    model = ImageClassifier(partial(vgg, depth=11), data.spec, partial(torch.optim.SGD, lr=0.01))
    callback = RooflineCallback(cache_dir=cache, timing_passes=1, batch_size=4, peak_seconds=0.3)
    trainer = L.Trainer(
        max_epochs=1,
        limit_train_batches=1,
        limit_val_batches=0,
        logger=AttachedMLFlowLogger(tracking_uri=client.tracking_uri, run_id=run_id),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    trainer.fit(model, datamodule=data)

    retaken = json.loads(record_path.read_text())["flops_per_s"]
    assert retaken > STALE  # beaten, so measured again and the cache replaced
    run = client.get_run(run_id)
    compute, bandwidth = run.data.metrics[PEAK_FP32], run.data.metrics[PEAK_BANDWIDTH]
    assert compute >= retaken  # the re-measured roof, or higher if raised to a point
    assert "(measured)" in run.data.tags[PEAK_TAG]
    assert run.data.metrics[FORWARD_ACHIEVED] <= compute
    with open(client.download_artifacts(run_id, "roofline/layers.csv", str(tmp_path))) as file:
        rows = [r for r in csv.DictReader(file) if r["flops_per_s"] and float(r["flops"]) > 0]
    assert {r["type"] for r in rows} >= {"Conv2d", "Linear"}
    for row in rows:
        roof = min(compute, bandwidth * float(row["intensity_flop_per_byte"]))
        assert float(row["flops_per_s"]) <= roof * (1 + 1e-5), row  # CSV keeps 6 digits


@pytest.mark.gpu
def test_no_vae_layer_is_above_the_cuda_datasheet_roof(composed, client, tmp_path):
    # at batch 4096 fc1 and fc4 are 2.6 GFLOP GEMMs: timed without waiting for the GPU (a
    # launch, microseconds) they would sit far above any roof
    batch = 4096
    overrides = ["trainer=gpu", "model=vae", *QUICK, "callbacks=analysis"]
    train(composed([*overrides, f"callbacks.roofline.batch_size={batch}"]))
    run = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]
    name = torch.cuda.get_device_name(0)
    peak = match_device_name(name)
    assert peak is not None, f"{name!r} has no entry in KNOWN_DEVICES"
    assert run.data.tags[PEAK_TAG] == peak.name  # the datasheet's roof, not a measured one
    assert run.data.metrics[PEAK_FP32] == peak.fp32_flops_per_s
    assert run.data.metrics[PEAK_BANDWIDTH] == peak.memory_bytes_per_s
    compute, bandwidth = peak.peak_for_precision("32-true"), peak.memory_bytes_per_s
    path = client.download_artifacts(run.info.run_id, "roofline/layers.csv", str(tmp_path))
    with open(path) as file:
        rows = {row["layer"]: row for row in csv.DictReader(file)}
    layers = {f"net.{name}" for name in ("fc1", "fc21", "fc22", "fc3", "fc4")}
    assert set(rows) == {*layers, "model (forward)"}
    assert float(rows["net.fc1"]["flops"]) == 2 * batch * 784 * 400  # 2 x MAC, by hand
    for row in rows.values():
        roof = min(compute, bandwidth * float(row["intensity_flop_per_byte"]))
        assert 0 < float(row["flops_per_s"]) <= roof * (1 + 1e-5), row  # CSV keeps 6 digits
    assert run.data.metrics[FORWARD_ACHIEVED] <= compute
