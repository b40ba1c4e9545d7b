"""Where samples live (``data.placement``): the same batches under every placement without
augmentation, augmentation done per batch where the batch lives, the ``auto`` rules, DDP shards,
and the refusals, each in one line."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from torch.utils.data import DistributedSampler
from torchvision import transforms as T

from hpml.data.batch_transforms import BatchImages, batch_images
from hpml.data.image_folder import ImageFolderDataModule
from hpml.data.imdb import IMDBDataModule
from hpml.data.placement import (
    CPU_CHOICE,
    MAX_AUTO_WORKERS,
    DeviceBatches,
    auto_workers,
    choose,
    shard,
)
from hpml.data.synthetic import SyntheticDataModule
from hpml.data.vision import CIFAR10DataModule, MNISTDataModule
from hpml.errors import ConfigError
from tests.conftest import NO_CUDA, QUICK
from tests.real_data import write_cifar10, write_imdb, write_mnist

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def batches(datamodule, split: str, epochs: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every batch of ``epochs`` passes over ``split``'s loader, on the CPU."""
    loader = getattr(datamodule, f"{split}_dataloader")()
    return [(x.cpu(), y.cpu()) for _ in range(epochs) for x, y in loader]


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        torch.equal(xa, xb) and torch.equal(ya, yb) for (xa, ya), (xb, yb) in zip(a, b, strict=True)
    )


@pytest.mark.parametrize(
    "knobs",
    [
        {"modality": "image", "train_samples": 70, "batch_size": 16},
        {"modality": "image", "channels": 1, "image_size": 28, "noise": 0.0, "limit": 40},
        {"modality": "tokens", "num_classes": 2, "train_samples": 50, "batch_size": 8},
    ],
    ids=["images", "mnist_like_limited", "tokens"],
)
def test_synthetic_batches_are_bit_for_bit_the_same_on_every_placement(knobs: dict) -> None:
    """Two epochs of every split, shuffled train included: the device placement's batches are
    the loader's, in the same order, each epoch its own."""
    knobs = {"val_samples": 24, "test_samples": 24, "seed": 3, **knobs}
    read = {}
    for placement in ("loader", "device"):
        datamodule = SyntheticDataModule(placement=placement, **knobs)
        datamodule.setup("fit")
        datamodule.setup("test")
        assert datamodule.loading().placement == placement
        read[placement] = {split: batches(datamodule, split) for split in ("train", "val", "test")}
    for split in ("train", "val", "test"):
        assert same(read["loader"][split], read["device"][split]), split
    train = read["device"]["train"]
    half = len(train) // 2
    assert not torch.equal(train[0][1], train[half][1])  # epoch 2 has its own order


def test_samples_are_rendered_once() -> None:
    """Setup renders a split's samples as tensors; reading them again draws nothing."""
    datamodule = SyntheticDataModule(train_samples=32, limit=20)
    datamodule.setup("fit")
    assert datamodule.test_set is None  # fit renders train and val only
    inputs, labels = datamodule.train_set.tensors
    assert inputs.shape == (20, 3, 32, 32) and labels.shape == (20,)
    again = SyntheticDataModule(train_samples=32)
    again.setup("fit")
    first, label = again.train_set[7]
    assert torch.equal(first, inputs[7]) and int(label) == int(labels[7])


def test_imdb_token_ids_are_the_same_on_both_placements(tmp_path: Path) -> None:
    write_imdb(tmp_path)
    read = []
    for placement in ("loader", "device"):
        datamodule = IMDBDataModule(
            data_dir=tmp_path / "imdb", seq_len=24, batch_size=8, placement=placement
        )
        datamodule.setup("fit")
        read.append(batches(datamodule, "train"))
    assert same(*read)


def cifar(tmp_path: Path, placement: str, **knobs) -> CIFAR10DataModule:
    write_cifar10(tmp_path, per_batch=8)
    datamodule = CIFAR10DataModule(
        data_dir=tmp_path, verify=False, batch_size=8, placement=placement, **knobs
    )
    datamodule.setup("fit")
    datamodule.setup("test")
    return datamodule


def test_cifar_eval_batches_are_the_loaders_and_train_batches_its_crops_and_flips(
    tmp_path: Path,
) -> None:
    """Without augmentation (val, test) the device batches are the DataLoader's bit for bit;
    each augmented training image is one of the 9 x 9 crops of its zero-padded image, flipped
    or not, standardised as torchvision standardises it."""
    loader, device = cifar(tmp_path, "loader"), cifar(tmp_path, "device")
    for split in ("val", "test"):
        assert same(batches(loader, split, 1), batches(device, split, 1)), split
    held = device.in_memory("train")
    assert held.inputs.dtype == torch.uint8 and isinstance(held.transform, BatchImages)
    pictures = batches(device, "train", 1)
    eval_form = batch_images(T.Compose(cifar10_standardise()), (3, 32, 32))
    padded = torch.nn.functional.pad(held.inputs, (4, 4, 4, 4))
    flips = 0
    for images, labels in pictures:
        for image, label in zip(images, labels, strict=True):
            sources = (held.targets == label).nonzero().flatten()
            windows = [
                padded[i, :, dy : dy + 32, dx : dx + 32]
                for i in sources
                for dy, dx in itertools.product(range(9), repeat=2)
            ]
            candidates = torch.stack(windows)
            plain = eval_form(candidates, torch.Generator())
            mirrored = plain.flip(-1)
            hit = (plain == image).flatten(1).all(1).any()
            flip = (mirrored == image).flatten(1).all(1).any()
            assert hit or flip
            flips += int(flip and not hit)
    assert 0 < flips < len(held)  # some flipped, some not


def cifar10_standardise() -> list:
    from hpml.data.vision import CIFAR10_MEAN, CIFAR10_STD

    return [T.ToTensor(), T.Normalize(CIFAR10_MEAN, CIFAR10_STD)]


def test_mnist_device_batches_are_the_loaders(tmp_path: Path) -> None:
    write_mnist(tmp_path, train=40, test=16)
    read = []
    for placement in ("loader", "device"):
        datamodule = MNISTDataModule(
            data_dir=tmp_path, batch_size=8, normalize=True, placement=placement
        )
        datamodule.setup("fit")
        read.append(batches(datamodule, "train"))
    assert same(*read)


@pytest.mark.parametrize(
    ("device", "in_memory", "knobs", "expected"),
    [
        (CUDA, True, {}, ("device", 7, True)),
        (CUDA, False, {}, ("loader", 7, True)),
        (CUDA, True, {"num_workers": 2}, ("loader", 2, True)),
        (CUDA, True, {"pin_memory": True}, ("loader", 7, True)),
        (CPU, True, {}, (CPU_CHOICE, 0, False)),
        (CPU, False, {}, ("loader", 0, False)),
        (CPU, True, {"placement": "loader"}, ("loader", 0, False)),
        (CUDA, True, {"placement": "pinned"}, ("pinned", 7, True)),
    ],
)
def test_auto_rules(device, in_memory: bool, knobs: dict, expected: tuple) -> None:
    """auto: the device for data held in memory on a GPU (on a CPU, the bench's choice), the
    loader for data read per sample or when a loader knob asks for one; 8 cores and 1 GPU give
    7 workers and pinned batches, a CPU none of either."""
    settings = {"placement": "auto", "num_workers": "auto", "pin_memory": "auto", **knobs}
    chosen = choose(
        settings["placement"],
        settings["num_workers"],
        settings["pin_memory"],
        2,
        in_memory,
        device,
        devices=1,
        cpus=8,
    )
    assert (chosen.placement, chosen.num_workers, chosen.pin_memory) == expected


@pytest.mark.parametrize(
    ("cpus", "devices", "workers"),
    [(16, 1, MAX_AUTO_WORKERS), (16, 4, 3), (8, 8, 1), (2, 1, 1), (64, 2, MAX_AUTO_WORKERS)],
)
def test_auto_workers_share_the_cores_among_the_devices(cpus: int, devices: int, workers: int):
    assert auto_workers(CUDA, cpus, devices) == workers
    assert auto_workers(CPU, cpus, devices) == 0


def test_chosen_values_are_params() -> None:
    chosen = choose("auto", "auto", "auto", 4, False, CUDA, cpus=4)
    assert chosen.params() == {
        "data.chosen.placement": "loader",
        "data.chosen.num_workers": 3,
        "data.chosen.pin_memory": True,
        "data.chosen.prefetch_factor": 4,
    }
    assert choose("auto", "auto", "auto", 4, True, CUDA).params() == {
        "data.chosen.placement": "device"
    }


@pytest.mark.parametrize(("size", "world"), [(10, 3), (12, 4), (5, 8), (7, 1)])
def test_ddp_shards_are_the_distributed_samplers(size: int, world: int) -> None:
    """Each rank's share of an epoch's order, padded as Lightning's DistributedSampler pads."""
    order = torch.randperm(size, generator=torch.Generator().manual_seed(size))
    for rank in range(world):
        sampler = DistributedSampler(range(size), num_replicas=world, rank=rank, shuffle=False)
        expected = [int(order[i]) for i in sampler]
        assert shard(order, rank, world).tolist() == expected


def test_pinned_is_refused_without_cuda() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: pinned memory is allowed on it")
    problem = SyntheticDataModule(placement="pinned").placement_problem("cpu")
    assert isinstance(problem, ConfigError)
    assert str(problem.under("data")) == (
        "data.placement='pinned' is invalid: expected auto, device, loader: pinned memory "
        "serves copies to a CUDA device, and this machine has no CUDA device"
    )


def test_data_read_per_sample_is_refused_on_the_device(tmp_path: Path) -> None:
    folder = ImageFolderDataModule(data_dir=tmp_path, placement="device")
    assert "ImageFolderDataModule reads its samples one at a time" in str(
        folder.placement_problem("cpu")
    )
    jitter = [T.ColorJitter(0.1), T.ToTensor()]
    write_cifar10(tmp_path, per_batch=2)
    odd = CIFAR10DataModule(data_dir=tmp_path, placement="device", train_transforms=jitter)
    problem = str(odd.placement_problem("cpu"))
    assert "data.train_transforms: ColorJitter has no batch form" in problem
    assert (
        CIFAR10DataModule(data_dir=tmp_path, train_transforms=jitter).placement_problem("cpu")
        is None
    )  # auto: the loader
    workers = SyntheticDataModule(placement="device", num_workers=2).placement_problem("cpu")
    assert "data.num_workers=2 feeds a DataLoader" in str(workers)


@pytest.mark.gpu
def test_pinned_and_device_batches_are_the_loaders_on_cuda() -> None:
    """On CUDA the pinned and device placements give the loader's batches, on the device."""
    if not torch.cuda.is_available():
        pytest.skip(NO_CUDA)
    datamodule = SyntheticDataModule(placement="loader", train_samples=40, batch_size=16)
    datamodule.setup("fit")
    expected = batches(datamodule, "train")
    for pinned in (True, False):
        held = DeviceBatches(datamodule.in_memory("train"), 16, CUDA, True, pinned, seed=0)
        read = [batch for _ in range(2) for batch in held]
        assert all(x.device.type == "cuda" and y.device.type == "cuda" for x, y in read)
        assert same(expected, [(x.cpu(), y.cpu()) for x, y in read]), pinned


def test_a_device_placed_run_trains_as_the_loader_run_does(root: Path, composed, client) -> None:
    """End to end on the CPU: the device placement's run FINISHES with the params of its choice
    and the loss the loader's run reaches, to the last bit (same batches, same order, one
    thread)."""
    from hpml.train import train

    losses = {}
    for placement in ("device", "loader"):
        metrics = train(composed([*QUICK, "model=vae", f"data.placement={placement}"]))
        losses[placement] = metrics["val/loss"]
    runs = client.search_runs(
        [client.get_experiment_by_name("hpml").experiment_id], order_by=["start_time ASC"]
    )
    assert [run.info.status for run in runs] == ["FINISHED"] * 2
    device, loader = (run.data.params for run in runs)
    assert device["data.chosen.placement"] == "device" and "data.chosen.num_workers" not in device
    assert loader["data.chosen.placement"] == "loader"
    assert (loader["data.chosen.num_workers"], loader["data.chosen.pin_memory"]) == ("0", "False")
    assert float(runs[0].data.metrics["train/data_wait_pct"]) >= 0.0
    assert losses["device"] == losses["loader"]
