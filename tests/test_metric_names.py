"""Metric names and tag keys are built in one place (hpml.names) and read back through it: the
report and the bench spell at most ``ALLOWED`` metric names as string literals, hpml/ no tag key
outside names.py, and the names they read are the ones runs in existing stores carry."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from hpml import names

ROOT = Path(__file__).resolve().parents[1]
READERS = ("hpml/report", "hpml/bench")
ALLOWED = 2
# ``<stage>/<quantity>_<unit>``, the units a literal is most often spelt with
SHAPED = re.compile(r"^[a-z][a-z0-9_]*/[a-z][a-z0-9_]*_(ms|x|bytes|samples_per_s|count|pct|s)$")
# a tag key or the prefix of a family of them: ``hpml.device``, ``hpml.choice.``
TAG = re.compile(r"^hpml\.[a-z0-9_]+(\.[a-z0-9_]*)*$")
NOT_TAGS = {"hpml.trace", "hpml.verbose"}  # the job log's logger, the config's own node
# still spelling their tag keys: the GPU kit (names.py is standard library only, as its module
# level must be) and advise
SPELT_ELSEWHERE = ("hpml/names.py", "hpml/gpu/", "hpml/advise/")


def is_tag(text: str) -> bool:
    """Shaped like a tag key and naming no module or package of hpml (``hpml.train``)."""
    if not TAG.match(text) or text in NOT_TAGS:
        return False
    path = ROOT / text.rstrip(".").replace(".", "/")
    return not (path.with_suffix(".py").is_file() or path.is_dir())


def literals(
    folder: Path, root: Path = ROOT, shaped: Callable[[str], object] = SHAPED.match
) -> list[str]:
    """``path:line: name`` of each string constant of ``folder``'s modules ``shaped`` like a
    metric name; docstrings (expression statements) are not read."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and shaped(node.value)
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value}")
    return found


def test_report_and_bench_read_metric_names_through_hpml_names():
    spelt = [line for folder in READERS for line in literals(ROOT / folder)]
    assert len(spelt) <= ALLOWED, "metric names spelt as literals (use hpml.names):\n" + "\n".join(
        spelt
    )


def test_the_scan_finds_a_literal_and_skips_a_docstring(tmp_path):
    (tmp_path / "m.py").write_text(
        '"""Reads train/step_time_p50_ms."""\n\nNAME = "prune_after/size_bytes"\n'
    )
    assert [line.rsplit(": ", 1)[1] for line in literals(tmp_path, tmp_path)] == [
        "prune_after/size_bytes"
    ]


def test_hpml_spells_tag_keys_through_hpml_names():
    spelt = [
        line
        for line in literals(ROOT / "hpml", shaped=is_tag)
        if not line.startswith(SPELT_ELSEWHERE)
    ]
    assert not spelt, "tag keys spelt as literals (use hpml.names):\n" + "\n".join(spelt)


def test_the_tag_scan_finds_keys_and_prefixes_not_modules_or_loggers(tmp_path):
    (tmp_path / "m.py").write_text(
        '"""Reads hpml.device."""\n\nimport logging\n\n'
        'KEY = "hpml.noisy"\nCHOICE = f"hpml.choice.{1}"\nMODULE = "hpml.train"\n'
        'log = logging.getLogger("hpml.trace")\nCOMMAND = "python -m hpml.train"\n'
    )
    found = [line.rsplit(": ", 1)[1] for line in literals(tmp_path, tmp_path, is_tag)]
    assert found == ["hpml.noisy", "hpml.choice."]


@pytest.mark.parametrize(
    ("built", "logged"),
    [
        (names.THROUGHPUT, "train/throughput_samples_per_s"),
        (names.STEP_TIME, "train/step_time_p50_ms"),
        (names.STEP_CPU_TIME, "train/step_cpu_time_p50_ms"),
        (names.EPOCH_TIME, "train/epoch_time_s"),
        (names.PEAK_MEMORY, "train/peak_memory_bytes"),
        (names.MFU_MEASURED, "train/mfu_measured_pct"),
        (names.MODEL_FWD_FLOPS, "model/fwd_flops_per_sample"),
        (names.OTHER_CPU, "noise/other_cpu_pct"),
        (names.MEMORY_PEAK, "memory/peak_bytes"),
        (names.MEMORY_TOTAL, "memory/training_total_bytes"),
        (names.FLOPS_REDUCTION, "prune/flops_reduction_x"),
        (names.size(names.side("prune", names.BEFORE)), "prune_before/size_bytes"),
        (names.latency(names.side("quant", names.AFTER), 8), "quant_after/latency_b8_ms"),
        (names.latency("prune_after", part="_iqr"), "prune_after/latency_b1_iqr_ms"),
        (names.fwd_flops("prune_after"), "prune_after/fwd_flops_per_sample"),
        (names.val_loss("prune_final"), "prune_final/val_loss_nats"),
        (names.val_acc("compile_before"), "compile_before/val_acc_pct"),
        (names.speedup("prune", 1), "prune/speedup_b1_x"),
        (names.speedup("quant", 4, "_rounds", names.COUNT), "quant/speedup_b4_rounds_count"),
        (names.choice_tag("model"), "hpml.choice.model"),
        (names.step_tag("compare", "prune.clock"), "hpml.compare.prune.clock"),
    ],
)
def test_names_read_back_are_those_runs_carry(built, logged):
    """Stores written before these names were constants keep being read."""
    assert built == logged
