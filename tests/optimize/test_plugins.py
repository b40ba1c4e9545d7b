"""Plug-ins by config: a pruning method, a quantiser and a compile method, each added as one YAML
and one class in files this test writes outside the project (an extra config search path, a
module on sys.path), are listed by ``--help``, validated (a bad knob refused in one line, the net
checked by the object itself) and run to a finished MLflow run, with no file of the project
edited."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpml.errors import HpmlError
from tests.conftest import QUICK, REPO, pythonpath, run_cli

MODULE = "hpml_plugin_example"
CODE = '''
"""A pruning method, a quantiser and a compile method from outside hpml."""

import torch
from torch import nn

from hpml.errors import ConfigError, IncompatibleError
from hpml.optimize.compile import Compiler
from hpml.optimize.prune import Structured
from hpml.optimize.quant import Quantizer


class Largest(Structured):
    """Whole rows whose largest |weight| (to a power) is smallest go first."""

    def __init__(self, power: float = 1.0) -> None:
        if not power > 0:
            raise ConfigError("power", power, "a number > 0")
        self.power = power

    def scores(self, rows):
        return rows.abs().amax(1) ** self.power


class LinearInt8(Quantizer):
    """Dynamic int8 of the Linear layers with at least ``min_features`` inputs."""

    backend = "plugin"  # named linear_int8, by its class
    supported = (nn.Linear,)

    def __init__(self, min_features: int = 1) -> None:
        if isinstance(min_features, bool) or not isinstance(min_features, int) or min_features < 1:
            raise ConfigError("min_features", min_features, "a positive integer")
        self.min_features = min_features

    def wide(self, net):
        return {n for n, m in net.named_modules() if isinstance(m, nn.Linear)
                and m.in_features >= self.min_features}

    def check_net(self, build_net, example, model="the model"):
        if not self.wide(build_net()):
            raise IncompatibleError(
                f"quant=linear_int8 quantises Linear layers of {self.min_features} or more "
                f"inputs, and model {model} has none: lower quant.method.min_features"
            )

    def quantize(self, net, calibration=()):
        return torch.ao.quantization.quantize_dynamic(
            net.cpu().eval(), self.wide(net), dtype=torch.qint8
        )


class Traced(Compiler):
    """torch.jit.trace on the largest example, nothing frozen or saved."""

    def __init__(self, check_trace: bool = True) -> None:
        self.check_trace = check_trace

    def compile(self, net, examples, workdir):
        return torch.jit.trace(net, examples[-1], check_trace=self.check_trace), None
'''
PRUNE_YAML = f"""
# Prune the rows whose largest |weight| is smallest (a plug-in).
defaults:
  - /base/prune@_here_
  - _self_

method:
  _target_: {MODULE}.Largest
  power: 1.0
"""
QUANT_YAML = f"""
# Dynamic int8 of the wide Linear layers (a plug-in).
defaults:
  - /base/quant@_here_
  - _self_

method:
  _target_: {MODULE}.LinearInt8
  min_features: 1
"""
COMPILE_YAML = f"""
# torch.jit.trace after fit (a plug-in).
defaults:
  - /base/compile@_here_
  - _self_

method:
  _target_: {MODULE}.Traced
  check_trace: true
force: true
"""
FAST = [
    *QUICK,
    "prune.latency_rounds=2",
    "prune.latency_min_run_time_s=0.002",
    "prune.latency_budget_s=0",
    "quant.latency_rounds=2",
    "quant.latency_min_run_time_s=0.002",
    "quant.latency_budget_s=0",
]


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The config folder holding the three new options; their module importable."""
    conf, code = tmp_path / "plugin_conf", tmp_path / "plugin_code"
    for group, name, text in (
        ("prune", "largest", PRUNE_YAML),
        ("quant", "linear_int8", QUANT_YAML),
        ("compile", "traced", COMPILE_YAML),
    ):
        (conf / group).mkdir(parents=True)
        (conf / group / f"{name}.yaml").write_text(textwrap.dedent(text).lstrip())
    code.mkdir()
    (code / f"{MODULE}.py").write_text(CODE)
    monkeypatch.syspath_prepend(str(code))
    yield conf
    sys.modules.pop(MODULE, None)


def test_run_from_the_command_line(plugins: Path, root: Path, client) -> None:
    code = str(plugins.parent / "plugin_code")
    args = ["--config-dir", str(plugins), "model=vae", "prune=largest", "quant=linear_int8"]
    result = run_cli([*args, *FAST], root, env={"PYTHONPATH": pythonpath(str(REPO), code)})
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["prune.method"] == "largest"
    assert run.data.tags["hpml.quant.backend"] == "plugin"
    bad = run_cli([*args, "prune=larges"], root)  # a typo is named with the options it has
    assert bad.returncode == 2
    assert "unknown prune 'larges' for prune= (valid: fpgm, " in bad.stderr
    assert "largest" in bad.stderr.split("valid: ")[1]


def with_plugins(conf: Path, *overrides: str) -> list[str]:
    return [f"hydra.searchpath=[file://{conf}]", "model=vae", *overrides]


def test_listed_by_help(plugins: Path, root: Path) -> None:
    result = run_cli(["--config-dir", str(plugins), "--help"], root)
    assert result.returncode == 0, result.stderr[-2000:]
    listing = result.stdout.split("== Configuration groups ==")[1].split("== Config ==")[0]
    groups = dict(line.split(": ", 1) for line in listing.splitlines() if ": " in line)
    assert "largest" in groups["prune"].split(", ") and "fpgm" in groups["prune"].split(", ")
    assert "linear_int8" in groups["quant"].split(", ")
    assert "traced" in groups["compile"].split(", ")
    # base/ holds what options inherit: Hydra lists it as a group, the footer says it is none
    assert groups["base"] == "compile, data, measure, prune, quant"
    assert (
        "(base: the knobs compile, data, prune and quant options inherit; not a group to choose.)"
        in (result.stdout.split("== Config ==")[1])
    )


@pytest.mark.parametrize(
    "override,line",
    [
        (
            "prune.method.power=-1",
            "prune.method.power=-1 is invalid: expected a number > 0",
        ),
        (
            "prune.method.power=abc",
            "prune.method.power='abc' is invalid: expected a number",
        ),
        (
            "quant.method.min_features=0",
            "quant.method.min_features=0 is invalid: expected a positive integer",
        ),
        (
            "quant.method.min_features=100000",
            "quant=linear_int8 quantises Linear layers of 100000 or more inputs, and model vae",
        ),
    ],
)
def test_a_bad_knob_is_refused_in_one_line_before_any_run(
    plugins: Path, composed, client, override: str, line: str
) -> None:
    from hpml.train import train

    cfg = composed(with_plugins(plugins, "prune=largest", "quant=linear_int8", override, *FAST))
    with pytest.raises(HpmlError) as info:
        train(cfg)
    assert str(info.value).startswith(line)
    assert "\n" not in str(info.value)
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []


def test_a_run_with_all_three_finishes_in_mlflow(plugins: Path, composed, client) -> None:
    from hpml.train import train

    steps = ["prune=largest", "prune.amount=0.5", "quant=linear_int8", "compile=traced"]
    fast = ["compile.latency_rounds=2", "compile.latency_min_run_time_s=0.002"]
    cfg = composed(with_plugins(plugins, *steps, *FAST, *fast, "compile.latency_budget_s=0"))
    train(cfg)
    (run,) = client.search_runs([client.get_experiment_by_name("hpml").experiment_id])
    assert run.info.status == "FINISHED"
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    assert params["prune.method"] == "largest" and params["quant.method"] == "linear_int8"
    assert abs(metrics["prune_after/row_sparsity_pct"] - 50) < 1
    assert metrics["prune_after/params_count"] < metrics["prune_before/params_count"]
    assert metrics["quant_after/size_bytes"] < metrics["quant_before/size_bytes"]
    assert tags["hpml.quant.method"] == "linear_int8" and tags["hpml.quant.backend"] == "plugin"
    assert tags["hpml.compile.method"] == "traced" == tags["hpml.compile.deployed"]
    assert "compile/speedup_b1_x" in metrics
    assert "test/loss" in metrics  # tested as quantised and traced
