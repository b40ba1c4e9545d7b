"""The compile callback: eager vs compiled metrics, compile time apart, the export artifact."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from torch import nn

from hpml.callbacks.compile import Compile
from hpml.errors import ConfigError
from hpml.optimize import Applied
from hpml.optimize.compile import Compiled
from hpml.optimize.compile.export import Export
from hpml.optimize.compile.torchscript import Torchscript
from tests.callbacks.comparisons import assert_side_by_side
from tests.conftest import QUICK, QUICK_BATCH


def latest_run(client):
    return client.search_runs([client.get_experiment_by_name("hpml").experiment_id])[0]


def test_compile_run_logs_eager_and_compiled_variants(composed, client):
    from hpml.train import train

    method = "export"  # torchscript and torch.compile: tests/optimize/compile, and the CLI

    fast = ["compile.latency_rounds=3", "compile.latency_min_run_time_s=0.002"]
    fast += ["compile.latency_budget_s=0"]  # exactly 3 rounds
    cfg = composed(["model=lstm", f"compile={method}", *QUICK, *fast])
    metrics = train(cfg)
    assert "test/acc" in metrics
    run = latest_run(client)
    m = run.data.metrics
    for stage in ("compile_before", "compile_after"):
        for name in (
            "size_bytes",
            "latency_b1_ms",
            f"latency_b{QUICK_BATCH}_ms",
            "val_acc_pct",
            "val_loss_nats",
        ):
            assert f"{stage}/{name}" in m, f"{stage}/{name}"
    assert m["compile/time_s"] > 0
    assert m["compile/output_diff_max_abs"] < 1e-3
    assert m["compile_after/val_acc_pct"] == pytest.approx(m["compile_before/val_acc_pct"])
    assert run.data.tags["hpml.compile.method"] == method
    assert run.data.tags["hpml.compile.device"] == "cpu"
    assert_side_by_side(run, "compile", (1, QUICK_BATCH), rounds=3)
    if method == "export":
        names = [a.path for a in client.list_artifacts(run.info.run_id, "compile")]
        assert names == ["compile/model.pt2"]


def test_unknown_compile_mode_is_a_config_error(composed):
    from hpml.build import build

    cfg = composed(["compile=torch_compile", "compile.mode=fastest"])
    with pytest.raises(ConfigError, match=r"compile\.mode='fastest' is invalid"):
        build("compile", cfg.compile)


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        (["compile=export", "compile.method._target_=torch.nn.Identity"], r"compile\.method="),
        (["compile=auto", "compile.candidates=[]"], r"compile\.candidates=\[\] is invalid"),
        (
            ["compile=auto", "compile.candidates=[{_target_:torch.nn.Identity,_partial_:true}]"],
            r"compile\.candidates='Identity' is invalid: expected a Compiler class",
        ),
    ],
)
def test_a_method_that_is_not_a_compiler_is_a_config_error(overrides, refusal, composed):
    """A method is found by its `_target_`, as prune's and quant's are: one that names no
    Compiler class, or an auto with no candidate, is refused naming the key."""
    from hpml.build import build

    with pytest.raises(ConfigError, match=refusal):
        build("compile", composed(overrides).compile)


def test_every_compile_option_names_its_method_by_target(composed):
    """Each option's method is the class its `_target_` names, and its tag is that class's name
    (the option's file name)."""
    from hpml.build import build
    from tests.conftest import options

    for option in options("compile"):
        if option == "none":
            continue
        callback = build("compile", composed([f"compile={option}"]).compile)
        assert callback.method_name == option
    auto = build("compile", composed(["compile=auto"]).compile)
    assert list(auto.candidates) == [
        "eager",
        "torchscript",
        "export",
        "aot_inductor",
        "torch_compile",
    ]


def test_a_knob_on_the_method_node_wins_over_the_callbacks(composed):
    """The callback hands its knobs to the method's constructor, but not one the `method:` node
    sets itself: `compile.method.freezing=false` stays false beside `compile.freezing=true`."""
    from hpml.build import build
    from hpml.optimize.compile import compiler

    callback = build("compile", composed(["compile=torch_compile"]).compile)
    assert callback.freezing is True
    assert compiler(callback.method, **callback.options).freezing is True
    overrides = ["compile=torch_compile", "+compile.method.freezing=false"]
    callback = build("compile", composed(overrides).compile)
    method = compiler(callback.method, **callback.options)
    assert (callback.freezing, method.freezing, method.channels_last) == (True, False, True)


@pytest.mark.slow
def test_compiled_training_follows_eager_and_logs_compile_time_apart(
    composed, client, inductor_cache
):
    """compile.train on the synthetic-text LSTM at batch 4: the loss curve of eager training,
    compile time as its own metric, and FLOPs, memory and throughput all still logged. The LSTM
    (no dropout) compiles in seconds where VGG's training graph takes a minute on 2 cores."""
    from hpml.train import train

    # a small learning rate: a run that moves fast turns float rounding (compiled kernels sum in
    # another order) into a drifting curve
    small = [*QUICK, "model=lstm", "data.batch_size=4", "data.train_samples=16"]
    small += ["trainer.max_epochs=2", "model.optimizer.lr=0.0001"]
    small += ["data.val_samples=8", "data.test_samples=8", "trainer.enable_checkpointing=false"]
    train(composed(small))
    eager = latest_run(client)
    # torchscript after fit keeps the test short; the training step is torch.compile'd
    compile_train = [
        "compile=torch_compile",
        f"compile.method._target_={Torchscript.__module__}.Torchscript",
        "compile.train=true",
    ]
    # force: this test checks the compiled step's curve, whatever it measured against eager
    compile_train += ["compile.force=true", f"compile.cache_dir={inductor_cache}"]
    compile_train += ["compile.latency_budget_s=0"]  # the 9 rounds, no more
    train(composed([*small, *compile_train]))
    compiled = latest_run(client)
    assert compiled.info.run_id != eager.info.run_id

    def history(run, key):
        return [m.value for m in client.get_metric_history(run.info.run_id, key)]

    for key in ("train/loss", "val/loss"):
        assert history(compiled, key) == pytest.approx(history(eager, key), rel=1e-3, abs=1e-4)
    m, e = compiled.data.metrics, eager.data.metrics
    assert m["train/compile_time_s"] > 0
    assert len(history(compiled, "train/compile_time_s")) == 1  # once, before the epochs
    assert "train/compile_time_s" not in e
    assert m["train/throughput_samples_per_s"] > 0
    assert m["model/fwd_bwd_flops_per_sample"] == e["model/fwd_bwd_flops_per_sample"]
    assert m["memory/activations_bytes"] > 0
    assert m["memory/weights_bytes"] == e["memory/weights_bytes"]
    assert compiled.data.tags["hpml.compile.train"] == "compiled"
    assert m["compile/train_speedup_x"] > 0 and m["compile/train_speedup_rounds_count"] == 9


class Sleepy(nn.Module):
    """``net`` that then spins 19 times as long as each call took, in its thread's CPU time:
    about 20x slower than itself on the thread's clock and the wall's, a margin no neighbour's
    burst on a shared 2-core machine closes (one round's eager time here swung 23-127 ms at
    load 8). A sleep would not do: one torch thread's rounds run on the thread's clock."""

    def __init__(self, net: nn.Module, factor: float = 19.0) -> None:
        super().__init__()
        self.net, self.factor = net, factor

    def forward(self, *args: Any) -> Any:
        start = time.thread_time()
        output = self.net(*args)
        end = time.thread_time() + self.factor * (time.thread_time() - start)
        while time.thread_time() < end:
            pass
        return output


class SlowCompile(Compile):
    """A test-only plug-in (``compile._target_``): the real compiled variant of method ``slow``
    (``+compile.slow=...``), made slow."""

    def __init__(self, slow: str, **options: Any) -> None:
        super().__init__(**options)
        self.slow = slow

    def variant(self, eager, examples, workdir, method=None) -> Applied[Compiled]:
        compiled = super().variant(eager, examples, workdir, method)
        if compiled.report.method == self.slow:
            compiled.module = Sleepy(compiled.module)
        return compiled


SLOW = f"compile._target_={SlowCompile.__module__}.SlowCompile"
# 5 rounds at batch 4: the slow side costs 20x its calls
FAST = ["compile.latency_rounds=5", "compile.latency_min_run_time_s=0.002"]
FAST += ["compile.latency_batch_size=4", "compile.latency_budget_s=0"]


@pytest.mark.parametrize(("force", "method"), [(False, "export"), (True, "torchscript")])
def test_a_compiled_model_slower_than_eager_is_not_deployed_unless_forced(
    force, method, composed, client, caplog
):
    """Also: TorchScript's size is its saved file's, the frozen module with its weights."""
    from hpml.train import train

    slow = [SLOW, f"+compile.slow={method}", f"compile.force={force}"]
    cfg = composed(["model=lstm", f"compile={method}", *QUICK, *FAST, *slow])
    with caplog.at_level(logging.WARNING, "hpml.callbacks.compile"):
        metrics = train(cfg)
    assert "test/acc" in metrics
    run = latest_run(client)
    tags, m = run.data.tags, run.data.metrics
    assert tags["hpml.verdict.compile.speedup_b4"] == "slower"
    assert m["compile/speedup_b4_x"] < 1
    assert tags["hpml.compile.deployed"] == (method if force else "eager")
    assert tags["hpml.compile.conv_kernel"] == "none"  # an LSTM has no convolution
    if method == "torchscript":  # the saved file, not code without its weights
        assert m["compile_after/size_bytes"] == pytest.approx(
            m["compile_before/size_bytes"], rel=0.01
        )
        names = [a.path for a in client.list_artifacts(run.info.run_id, "compile")]
        assert names == ["compile/model.ts"]
    said = [r.getMessage() for r in caplog.records if "slower than eager" in r.getMessage()]
    assert len(said) == (0 if force else 1)
    if not force:
        assert "keeping the eager model" in said[0] and "\n" not in said[0]


def test_auto_deploys_the_fastest_candidate_not_the_slowed_one(composed, client, caplog):
    """compile=auto over TorchScript and export with TorchScript made slow: every candidate's
    latency logged with its spread, export chosen, said in one line, and deployed."""
    from hpml.train import train

    candidates = ",".join(
        f"{{_target_:{c.__module__}.{c.__name__},_partial_:true}}" for c in (Torchscript, Export)
    )
    auto = ["compile=auto", f"compile.candidates=[{candidates}]", "compile.force=true"]
    cfg = composed(["model=lstm", *auto, SLOW, "+compile.slow=torchscript", *QUICK, *FAST])
    with caplog.at_level(logging.INFO, "hpml.callbacks.compile"):
        train(cfg)
    run = latest_run(client)
    tags, m = run.data.tags, run.data.metrics
    for name in ("torchscript", "export"):
        assert m[f"compile_auto/{name}_latency_b4_ms"] > 0
        assert m[f"compile_auto/{name}_latency_b4_iqr_ms"] >= 0
    assert m["compile_auto/torchscript_latency_b4_ms"] > m["compile_auto/export_latency_b4_ms"]
    assert tags["hpml.compile.auto.choice"] == "export"
    assert tags["hpml.compile.auto.candidates"] == "torchscript,export"
    assert tags["hpml.compile.method"] == "auto"
    assert tags["hpml.compile.deployed"] == "export"
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("compile=auto")]
    assert len(said) == 1 and "deploying export" in said[0] and "torchscript" in said[0]
