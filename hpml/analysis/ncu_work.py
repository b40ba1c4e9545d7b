"""The work Nsight Compute counted in a run's kernels: FLOPs, DRAM bytes and tensor-core work,
per training step and step region (the NVTX ranges of ``profile=nvtx``), per kernel or range.

- DRAM bytes: ``dram__bytes_read.sum`` + ``dram__bytes_write.sum``, what the kernels moved to and
  from device memory (under ``--cache-control all``, with caches flushed before each kernel).
- CUDA-core FLOPs, per precision (``h``, ``f``, ``d``): the predicated-on thread instructions
  ``sm__sass_thread_inst_executed_op_<p>{add,mul,fma}_pred_on.sum``, an FMA counted as 2 FLOPs
  (as Nsight Compute's own roofline sections count them).
- Tensor-core work: ``sm__ops_path_tensor_src_{fp16,bf16,tf32}_dst_fp32.sum`` (operations) and
  ``sm__inst_executed_pipe_tensor.sum`` (instructions). How many FLOPs one unit is depends on the
  counter and the architecture: :data:`TENSOR_FLOPS_PER_UNIT` holds the factors known, each to be
  checked against a GEMM of known size; work on a counter without one is named, never guessed,
  and the FLOPs are then those of the CUDA cores alone, a lower bound.

A step starts where the kernels' region goes back to an earlier one in step order (data,
forward, zero_grad, backward, optimizer_step): forward kernels after backward ones begin a new
step, so a step is only told apart with its forward kernels profiled.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hpml.analysis.ncu import Export, Kernel, NcuExportError
from hpml.analysis.profile_summary import DATA_REGION, STEP_REGIONS
from hpml.names import BYTES, COUNT, FLOP_PER_BYTE, FLOPS, NCU_REGIONS, S, ncu

DRAM = ("dram__bytes_read.sum", "dram__bytes_write.sum")
KERNEL_TIME = "gpu__time_duration.sum"
# CUDA-core instruction counters by precision, each with its FLOPs: add, mul 1, fma 2
CUDA_CORES = {
    precision: tuple(
        (f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum", flops)
        for op, flops in (("add", 1.0), ("mul", 1.0), ("fma", 2.0))
    )
    for precision, p in (("fp16", "h"), ("fp32", "f"), ("fp64", "d"))
}
SASS = tuple(c for pairs in CUDA_CORES.values() for c, _ in pairs)
TENSOR_OPS = {s: f"sm__ops_path_tensor_src_{s}_dst_fp32.sum" for s in ("fp16", "bf16", "tf32")}
TENSOR_INST = "sm__inst_executed_pipe_tensor.sum"
# FLOPs per unit of a tensor counter, by (counter, compute capability). CC 7.0: Nsight Compute's
# tensor roofline section of its Volta-era releases counts 512 FLOPs per tensor-pipe instruction.
# Others are unknown until a GEMM of known size is counted on that architecture.
TENSOR_FLOPS_PER_UNIT: dict[tuple[str, str], float] = {(TENSOR_INST, "7.0"): 512.0}
READ = (*DRAM, KERNEL_TIME, *SASS, *TENSOR_OPS.values(), TENSOR_INST)
ORDER = (DATA_REGION, *STEP_REGIONS)


def counters(cc: str) -> list[str]:
    """The counters to ask ncu for on a device of compute capability ``cc`` (``"9.0"``): only
    those it has (ncu stops at a name the device lacks): tensor operations from 7.0 (bf16 and
    tf32 from 8.0), the tensor-pipe instruction count where its factor is known."""
    major = int(cc.split(".")[0])
    tensor = [] if major < 7 else [TENSOR_OPS["fp16"]]
    tensor += [TENSOR_OPS["bf16"], TENSOR_OPS["tf32"]] if major >= 8 else []
    tensor += [c for c, on in TENSOR_FLOPS_PER_UNIT if on == cc]
    return [*DRAM, KERNEL_TIME, *SASS, *tensor]


@dataclass(frozen=True)
class Work:
    """What some kernels did, as counted.

    Args:
        tensor: each tensor counter read, summed in its own unit (operations, instructions).
        tensor_flops: FLOPs of the tensor counters whose factor is known on the kernels' device.
        unknown: tensor counters that counted work without a known factor (not in ``flops``).
        seconds: summed ``gpu__time_duration.sum`` (under ncu's clock and cache control), None
            when not read.
    """

    kernels: int
    dram_read_bytes: float
    dram_write_bytes: float
    cuda_core_flops: Mapping[str, float]
    tensor: Mapping[str, float]
    tensor_flops: float
    unknown: tuple[str, ...]
    seconds: float | None

    @property
    def dram_bytes(self) -> float:
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def flops(self) -> float:
        """CUDA-core FLOPs of every precision, plus the tensor FLOPs whose factor is known."""
        return sum(self.cuda_core_flops.values()) + self.tensor_flops

    @property
    def intensity(self) -> float:
        """Counted FLOP per DRAM byte; 0 for kernels that moved no DRAM bytes."""
        return self.flops / self.dram_bytes if self.dram_bytes else 0.0


def work(kernels: Sequence[Kernel]) -> Work:
    """The counters of ``kernels`` summed into FLOPs and bytes."""
    cuda = {
        precision: sum(k.values.get(c, 0.0) * n for k in kernels for c, n in pairs)
        for precision, pairs in CUDA_CORES.items()
        if any(c in k.values for k in kernels for c, _ in pairs)
    }
    tensor: dict[str, float] = {}
    tensor_flops, unknown = 0.0, set()
    for k in kernels:
        for counter in (*TENSOR_OPS.values(), TENSOR_INST):
            if counter not in k.values:
                continue
            tensor[counter] = tensor.get(counter, 0.0) + k.values[counter]
            factor = TENSOR_FLOPS_PER_UNIT.get((counter, k.cc))
            if factor is not None:
                tensor_flops += k.values[counter] * factor
            elif k.values[counter] > 0:
                unknown.add(counter)
    times = [k.values[KERNEL_TIME] for k in kernels if KERNEL_TIME in k.values]
    return Work(
        len(kernels),
        sum(k.values.get(DRAM[0], 0.0) for k in kernels),
        sum(k.values.get(DRAM[1], 0.0) for k in kernels),
        cuda,
        tensor,
        tensor_flops,
        tuple(sorted(unknown)),
        sum(times) if times else None,
    )


def region_of(kernel: Kernel) -> str | None:
    """The hpml step region a kernel ran in (``hpml/forward``), None outside them."""
    return next((r for r in kernel.ranges if r in ORDER), None)


def steps(kernels: Sequence[Kernel]) -> list[dict[str, list[Kernel]]]:
    """The training steps' kernels by region, in launch order; kernels outside hpml's step
    regions are left out."""
    found: list[dict[str, list[Kernel]]] = []
    previous = len(ORDER)
    for kernel in kernels:
        region = region_of(kernel)
        if region is None:
            continue
        at = ORDER.index(region)
        if at < previous:
            found.append({})
        found[-1].setdefault(region, []).append(kernel)
        previous = at
    return found


def check(export: Export) -> list[dict[str, list[Kernel]]]:
    """The export's steps, or one line saying why it cannot give a step's counts."""
    if not export.nvtx:
        raise NcuExportError(
            "the export has no NVTX column: profile a profile=nvtx run with ncu --nvtx "
            "--nvtx-include regex:hpml.forward/"
        )
    lacking = [c for c in DRAM if c not in export.units]
    if lacking or not any(c in export.units for c in SASS):
        needed = ", ".join(lacking or [CUDA_CORES["fp32"][2][0]])
        raise NcuExportError(
            f"the export lacks {needed}: count with python -m hpml.profile.ncu, or give ncu "
            f"--metrics {','.join((*DRAM, *SASS))}"
        )
    found = steps(export.kernels)
    if not found:
        raise NcuExportError(
            f"none of its {len(export.kernels)} kernels ran inside an hpml step range "
            "(hpml/forward, ...): was the run profile=nvtx?"
        )
    return found


def region_metrics(region: str, done: Work) -> dict[str, float]:
    """The metrics of one region's work (names: :func:`hpml.names.ncu`)."""
    short = NCU_REGIONS[region]
    metrics = {
        ncu(short, "", FLOPS): done.flops,
        ncu(short, "dram", BYTES): done.dram_bytes,
        ncu(short, "dram_read", BYTES): done.dram_read_bytes,
        ncu(short, "dram_write", BYTES): done.dram_write_bytes,
        ncu(short, "intensity", FLOP_PER_BYTE): done.intensity,
        ncu(short, "kernels", COUNT): float(done.kernels),
    }
    metrics.update({ncu(short, p, FLOPS): f for p, f in done.cuda_core_flops.items()})
    if any(counter in done.tensor for counter, _ in TENSOR_FLOPS_PER_UNIT):
        metrics[ncu(short, "tensor", FLOPS)] = done.tensor_flops
    if ops := [v for c, v in done.tensor.items() if c in TENSOR_OPS.values()]:
        metrics[ncu(short, "tensor_ops", COUNT)] = sum(ops)
    if TENSOR_INST in done.tensor:
        metrics[ncu(short, "tensor_inst", COUNT)] = done.tensor[TENSOR_INST]
    if done.seconds is not None:
        metrics[ncu(short, "kernel_time", S)] = done.seconds
    return metrics


def step_metrics(step: Mapping[str, Sequence[Kernel]]) -> dict[str, float]:
    """The metrics of a step's forward and backward regions, where it has them."""
    found: dict[str, float] = {}
    for region in NCU_REGIONS:
        if region in step:
            found.update(region_metrics(region, work(step[region])))
    return found


def groups(kernels: Sequence[Kernel], region: str) -> dict[str, list[Kernel]]:
    """A region's kernels by the NVTX ranges open inside it (a layer's, where a run pushes
    them), else by kernel name; in order of first launch."""
    found: dict[str, list[Kernel]] = {}
    for kernel in kernels:
        inner = kernel.ranges[kernel.ranges.index(region) + 1 :]
        found.setdefault("/".join(inner) or kernel.name, []).append(kernel)
    return found


GROUP_COLUMNS = (
    "region",
    "group",
    "kernels",
    "flops",
    "dram_bytes",
    "intensity_flop_per_byte",
    "kernel_time_s",
    "tensor_unknown",
)


def groups_csv(step: Mapping[str, Sequence[Kernel]]) -> str:
    """One row per group of each region of ``step`` (:func:`groups`), units in the header."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(GROUP_COLUMNS)
    for region, kernels in step.items():
        for group, members in groups(kernels, region).items():
            done = work(members)
            writer.writerow(
                [
                    region,
                    group,
                    done.kernels,
                    f"{done.flops:.0f}",
                    f"{done.dram_bytes:.0f}",
                    f"{done.intensity:.6g}",
                    "" if done.seconds is None else f"{done.seconds:.6g}",
                    " ".join(done.unknown),
                ]
            )
    return out.getvalue()
