"""Reading Nsight Compute's raw-page CSV: the kernels of the fixture export (tests/analysis/ncu/,
written by hand in NVIDIA's documented layout), their NVTX ranges, steps and counted work,
checked against sums this file computes from the fixture's rows on its own."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from hpml.analysis.ncu import NcuExportError, load, nvtx_ranges, parse
from hpml.analysis.ncu_work import (
    READ,
    TENSOR_INST,
    check,
    counters,
    groups,
    groups_csv,
    step_metrics,
    work,
)

FIXTURE = Path(__file__).parent / "ncu" / "raw_page.csv"
NVTX = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"


def fixture_rows() -> list[dict[str, str]]:
    """The fixture's kernel rows, read with the csv module alone (the header is the first line
    that starts with "ID"; the units row follows it)."""
    lines = FIXTURE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    return rows[1:]


def value(row: dict[str, str], name: str) -> float:
    return float(row[name].replace(",", ""))


def own_steps() -> list[dict[str, list[dict[str, str]]]]:
    """The fixture's steps by region: a forward row after a backward one starts a step."""
    steps: list[dict[str, list[dict[str, str]]]] = []
    previous = None
    for row in fixture_rows():
        region = "fwd" if ":hpml/forward:" in row[NVTX] else "bwd"
        if region == "fwd" and previous != "fwd":
            steps.append({"fwd": [], "bwd": []})
        steps[-1][region].append(row)
        previous = region
    return steps


def op(precision: str, name: str) -> str:
    return f"sm__sass_thread_inst_executed_op_{precision}{name}_pred_on.sum"


def test_every_kernel_is_read_in_launch_order_with_its_ranges():
    export = load(FIXTURE, READ)
    rows = fixture_rows()
    assert [k.id for k in export.kernels] == [int(r["ID"]) for r in rows] == list(range(18))
    assert [k.name for k in export.kernels] == [r["Kernel Name"] for r in rows]
    assert export.nvtx and {k.cc for k in export.kernels} == {"9.0"}
    # a library's own NVTX domain inside the step's range is not one of hpml's ranges
    assert export.kernels[3].ranges == ("hpml/forward", "features.3")
    assert export.kernels[0].ranges == ("hpml/forward",)
    assert "launch__registers_per_thread" not in export.units  # not a counter hpml reads
    first = export.kernels[0].values
    assert first["dram__bytes_read.sum"] == value(rows[0], "dram__bytes_read.sum")
    assert first["gpu__time_duration.sum"] == pytest.approx(
        value(rows[0], "gpu__time_duration.sum") * 1e-9  # nsecond -> seconds
    )


def test_a_step_sums_its_kernels_counters_by_region():
    export = load(FIXTURE, READ)
    found = check(export)
    mine = own_steps()
    assert len(found) == len(mine) == 2
    metrics = step_metrics(found[-1])
    for short, region in (("fwd", "hpml/forward"), ("bwd", "hpml/backward")):
        rows = mine[-1][short]
        read = sum(value(r, "dram__bytes_read.sum") for r in rows)
        written = sum(value(r, "dram__bytes_write.sum") for r in rows)
        flops = sum(
            value(r, op(p, "add")) + value(r, op(p, "mul")) + 2 * value(r, op(p, "fma"))
            for r in rows
            for p in "hfd"
        )
        tf32 = sum(value(r, "sm__ops_path_tensor_src_tf32_dst_fp32.sum") for r in rows)
        seconds = sum(value(r, "gpu__time_duration.sum") for r in rows) * 1e-9
        assert len(found[-1][region]) == len(rows)
        assert metrics[f"ncu/{short}_dram_bytes"] == read + written
        assert metrics[f"ncu/{short}_dram_read_bytes"] == read
        # tf32 tensor work on CC 9.0 has no known FLOPs per operation: the CUDA cores' alone
        assert metrics[f"ncu/{short}_flops"] == flops == metrics[f"ncu/{short}_fp32_flops"]
        assert metrics[f"ncu/{short}_intensity_flop_per_byte"] == pytest.approx(
            flops / (read + written)
        )
        assert metrics[f"ncu/{short}_tensor_ops_count"] == tf32 > 0
        assert metrics[f"ncu/{short}_kernel_time_s"] == pytest.approx(seconds)
        assert metrics[f"ncu/{short}_kernels_count"] == len(rows)
        assert f"ncu/{short}_tensor_flops" not in metrics
    forward = work(found[-1]["hpml/forward"])
    assert forward.unknown == ("sm__ops_path_tensor_src_tf32_dst_fp32.sum",)
    # the second step's counts are its own: its kernels read less than the first's
    assert step_metrics(found[0])["ncu/fwd_dram_read_bytes"] > metrics["ncu/fwd_dram_read_bytes"]


def test_kernels_group_by_a_nested_range_else_by_name():
    step = check(load(FIXTURE, READ))[-1]
    by = groups(step["hpml/forward"], "hpml/forward")
    rows = own_steps()[-1]["fwd"]
    assert "features.3" in by and len(by["features.3"]) == 1
    assert len(by) == len(rows)  # four kernels by name, one by its range
    table = list(csv.DictReader(io.StringIO(groups_csv(step))))
    assert len(table) == len(by) + len(groups(step["hpml/backward"], "hpml/backward"))
    (nested,) = [r for r in table if r["group"] == "features.3"]
    (row,) = [r for r in rows if ":features.3:" in r[NVTX]]
    assert int(nested["dram_bytes"]) == value(row, "dram__bytes_read.sum") + value(
        row, "dram__bytes_write.sum"
    )


def export_text(cc: str, metrics: dict[str, tuple[str, list[str]]], nvtx: bool = True) -> str:
    """A raw page of ``len(values)`` forward kernels: metric -> (unit, a value per kernel)."""
    header = ["ID", "Process ID", "Kernel Name", "Device", "CC", *([NVTX] if nvtx else [])]
    count = len(next(iter(metrics.values()))[1])
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL)
    writer.writerow([*header, *metrics])
    writer.writerow(["" for _ in header] + [unit for unit, _ in metrics.values()])
    cell = '7  "<default domain>:hpml/forward:none:none:none:none:none:none" '
    for i in range(count):
        ident = [str(i), "7", f"k{i}", "Tesla V100-SXM2-16GB", cc, *([cell] if nvtx else [])]
        writer.writerow(ident + [values[i] for _, values in metrics.values()])
    return out.getvalue()


def test_scaled_units_come_back_to_bytes_and_seconds():
    text = export_text(
        "8.0",
        {
            "dram__bytes_read.sum": ("Mbyte", ["1.5", "2"]),
            "dram__bytes_write.sum": ("Kbyte", ["250", "n/a"]),
            "gpu__time_duration.sum": ("usecond", ["3", "4.5"]),
            op("f", "fma"): ("inst", ["1,000", "0"]),
        },
    )
    done = work(parse(text, READ).kernels)
    assert done.dram_read_bytes == pytest.approx(3.5e6)
    assert done.dram_write_bytes == pytest.approx(2.5e5)  # n/a: not counted
    assert done.seconds == pytest.approx(7.5e-6)
    assert done.cuda_core_flops == {"fp32": 2000.0}


def test_the_tensor_pipe_factor_is_applied_where_it_is_known():
    metrics = {
        "dram__bytes_read.sum": ("byte", ["1000", "1000"]),
        "dram__bytes_write.sum": ("byte", ["0", "0"]),
        op("h", "fma"): ("inst", ["10", "0"]),
        TENSOR_INST: ("inst", ["3", "4"]),
    }
    volta = step_metrics(check(parse(export_text("7.0", metrics), READ))[-1])
    assert volta["ncu/fwd_tensor_flops"] == 7 * 512
    assert volta["ncu/fwd_flops"] == 7 * 512 + 2 * 10
    ampere = work(parse(export_text("8.0", metrics), READ).kernels)
    assert ampere.tensor_flops == 0 and ampere.unknown == (TENSOR_INST,)
    assert TENSOR_INST in counters("7.0") and TENSOR_INST not in counters("9.0")
    assert not any("bf16" in c for c in counters("7.5"))
    assert not any("tensor" in c for c in counters("6.0"))
    assert "sm__ops_path_tensor_src_tf32_dst_fp32.sum" in counters("9.0")


def test_nvtx_stack_cells():
    cell = (
        '12  "<default domain>:hpml/forward:none:none:none:none:none:none"  '
        '"<default domain>:block:layers.0:none:none:none:none:none:none"  '
        '"CCCL:cub::DeviceReduce::Reduce:none:none:none:none:REGISTERED:x" '
    )
    assert nvtx_ranges(cell) == ("hpml/forward", "block:layers.0")
    assert nvtx_ranges("") == ()


def test_exports_hpml_cannot_read_say_why_in_one_line():
    bytes_only = {"dram__bytes_read.sum": ("byte", ["1"]), "dram__bytes_write.sum": ("byte", ["1"])}
    flops = {op("f", "fma"): ("inst", ["1"])}
    with pytest.raises(NcuExportError, match="no NVTX column: profile a profile=nvtx run"):
        check(parse(export_text("9.0", {**bytes_only, **flops}, nvtx=False), READ))
    with pytest.raises(NcuExportError, match="lacks sm__sass_thread_inst_executed_op_ffma"):
        check(parse(export_text("9.0", bytes_only), READ))
    with pytest.raises(NcuExportError, match=r"lacks dram__bytes_write\.sum"):
        check(parse(export_text("9.0", {"dram__bytes_read.sum": ("byte", ["1"]), **flops}), READ))
    with pytest.raises(NcuExportError, match=r"unit 'furlong' of dram__bytes_read\.sum"):
        parse(export_text("9.0", {"dram__bytes_read.sum": ("furlong", ["1"])}), READ)
    with pytest.raises(NcuExportError, match="no Nsight Compute raw page in it"):
        parse("==PROF== Connected to process 7\n==ERROR== no kernels were profiled\n")
    outside = export_text("9.0", {**bytes_only, **flops}).replace("hpml/forward", "warmup")
    with pytest.raises(NcuExportError, match="none of its 1 kernels ran inside an hpml step"):
        check(parse(outside, READ))
