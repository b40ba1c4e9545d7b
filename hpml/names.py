"""Metric names, built in one place as ``<stage>/<quantity>_<unit>``: every number says its unit;
how a unit reads (its label, its decimal prefix); the keys of the tags hpml writes and reads."""

from __future__ import annotations

import math
from collections.abc import Sequence

SAMPLES_PER_S = "samples_per_s"
MS = "ms"
S = "s"
BYTES = "bytes"
PCT = "pct"
COUNT = "count"
FLOPS_PER_SAMPLE = "flops_per_sample"  # FLOPs: 2 x multiply-accumulate, see hpml.analysis.flops
FLOPS = "flops"  # a count of FLOPs (2 x multiply-accumulate), e.g. of the kernels a GPU counted
FLOPS_PER_S = "flops_per_s"
FLOP_PER_BYTE = "flop_per_byte"  # arithmetic intensity
BYTES_PER_S = "bytes_per_s"
NATS = "nats"  # cross-entropy and KL divergence, natural log
X = "x"  # a ratio of two like quantities: before / after
J = "j"  # joules: whole-board energy of a device, see hpml.analysis.energy
J_PER_SAMPLE = "j_per_sample"
W = "w"  # watts: joules over the seconds they were used in


def metric(stage: str, quantity: str, unit: str) -> str:
    """``metric("train", "throughput", SAMPLES_PER_S)`` -> ``"train/throughput_samples_per_s"``."""
    return f"{stage}/{quantity}_{unit}"


# how each unit reads on an axis or in a table heading, with its convention
UNIT_LABELS = {
    SAMPLES_PER_S: "samples/s",
    MS: "ms",
    S: "s",
    BYTES: "bytes",
    PCT: "%",
    COUNT: "count",
    FLOPS_PER_SAMPLE: "FLOPs/sample, 2 x MAC",
    FLOPS: "FLOPs, 2 x MAC",
    FLOPS_PER_S: "FLOP/s, 2 x MAC",
    FLOP_PER_BYTE: "FLOP/byte",
    BYTES_PER_S: "bytes/s",
    NATS: "nats",
    X: "x, before/after",
    J: "J",
    J_PER_SAMPLE: "J/sample",
    W: "W",
}


def unit_of(name: str) -> str | None:
    """The unit a metric's name ends in (:data:`UNIT_LABELS` keys), None for names outside the
    convention (a model's own ``val/loss`` or ``val/acc``)."""
    quantity = name.rsplit("/", 1)[-1]
    units = sorted(UNIT_LABELS, key=len, reverse=True)  # samples_per_s before s
    return next((unit for unit in units if quantity.endswith(f"_{unit}")), None)


def label(name: str) -> str:
    """``train/throughput_samples_per_s`` -> ``train/throughput (samples/s)``: a metric as a
    heading; names outside the convention stay as they are."""
    unit = unit_of(name)
    if unit is None:
        return name
    return f"{name[: -len(unit) - 1]} ({UNIT_LABELS[unit]})"


# decimal prefixes, as datasheets and disks count (1 MB = 10^6 bytes)
PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def prefixed(values: Sequence[float], counted: str) -> tuple[float, str]:
    """The divisor and unit (``1e6, "MB"``) showing ``values`` of ``counted`` (``B``, ``FLOP``)
    with the largest decimal prefix that keeps their largest magnitude at 1 or more."""
    top = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    factor, prefix = next(((f, p) for f, p in PREFIXES if top >= f), PREFIXES[-1])
    if counted == "B" and not prefix:
        return 1.0, "bytes"
    return factor, f"{prefix}{counted}"


def human(value: float, counted: str = "B") -> str:
    """``2614821`` -> ``2.61 MB``: one number for a tooltip."""
    factor, unit = prefixed([value], counted)
    return f"{value / factor:.3g} {unit}"


# What hpml's models log themselves, outside the convention: a model's own loss and accuracy.
VAL_LOSS, VAL_ACC, TEST_LOSS, TEST_ACC = "val/loss", "val/acc", "test/loss", "test/acc"
# Names read back by the report and the bench, built as their callbacks build them.
THROUGHPUT = metric("train", "throughput", SAMPLES_PER_S)
STEP_TIME = metric("train", "step_time_p50", MS)
STEP_CPU_TIME = metric("train", "step_cpu_time_p50", MS)
EPOCH_TIME = metric("train", "epoch_time", S)
PEAK_MEMORY = metric("train", "peak_memory", BYTES)
MFU_MEASURED = metric("train", "mfu_measured", PCT)
MODEL_FWD_FLOPS = metric("model", "fwd", FLOPS_PER_SAMPLE)
OTHER_CPU = metric("noise", "other_cpu", PCT)
MEMORY_PEAK = metric("memory", "peak", BYTES)
MEMORY_TOTAL = metric("memory", "training_total", BYTES)
FLOPS_REDUCTION = metric("prune", "flops_reduction", X)
# the measured sides of an optimisation step (hpml.callbacks.measure): ``prune_before``, ...
SIDES = BEFORE, AFTER = "before", "after"


def side(step: str, when: str) -> str:
    """The stage a step's side logs under: ``side("prune", AFTER)`` -> ``"prune_after"``."""
    return f"{step}_{when}"


def size(stage: str) -> str:
    """Bytes of the saved state dict a side measured: ``prune_after/size_bytes``."""
    return metric(stage, "size", BYTES)


def latency(stage: str, batch: int = 1, part: str = "") -> str:
    """Median forward time at ``batch``, or ``part`` of it (``_iqr``):
    ``prune_after/latency_b1_ms``."""
    return metric(stage, f"latency_b{batch}{part}", MS)


def fwd_flops(stage: str) -> str:
    """Forward FLOPs per sample: ``prune_after/fwd_flops_per_sample``."""
    return metric(stage, "fwd", FLOPS_PER_SAMPLE)


def mfu_peak(kind: str) -> str:
    """The peak (FLOP/s) MFU of ``kind`` is against: ``mfu/peak_table_flops_per_s``."""
    return metric("mfu", f"peak_{kind}", FLOPS_PER_S)


# the dtype the measured peak (``mfu_peak("measured")``) was taken in: ``bf16``, or for fp32 also
# its matmuls' and convolutions' settings, ``fp32 (matmul tf32, conv tf32)``
MFU_PEAK_DTYPE_TAG = "hpml.mfu.peak_measured_dtype"


def val_loss(stage: str) -> str:
    """A side's validation loss: ``prune_after/val_loss_nats``."""
    return metric(stage, "val_loss", NATS)


def val_acc(stage: str) -> str:
    """A side's validation accuracy: ``quant_after/val_acc_pct``."""
    return metric(stage, "val_acc", PCT)


def speedup(step: str, batch: int, part: str = "", unit: str = X) -> str:
    """A step's before / after speed-up at ``batch``, or ``part`` of it (``_ci_low``,
    ``_rounds`` with :data:`COUNT`): ``prune/speedup_b1_ci_low_x``."""
    return metric(step, f"speedup_b{batch}{part}", unit)


def verdict_tag(step: str, batch: int) -> str:
    """The tag holding the verdict on a step's speed-up at ``batch`` (faster, slower, within
    noise): ``hpml.verdict.compile.speedup_b1``."""
    return f"hpml.verdict.{step}.speedup_b{batch}"


# What bounds a stage of a run (hpml.analysis.bound): its class, the tag that holds it, the line
# that says why; the report reads them back to gate its verdicts.
BOUNDS = INPUT, HOST, DEVICE, MEMORY, COMPUTE, SLOW_MACHINE = (
    "input",
    "host",
    "device",
    "memory",
    "compute",
    "slow machine",
)
STAGES = ("train", "val", "test")
DATA_WAIT, HOST_ISSUE = "data_wait", "host_issue"  # the evidence, as <stage>/<quantity>_pct


def bound_tag(stage: str, part: str = "") -> str:
    """The tag holding what bounds ``stage``: ``hpml.bound.train``; ``part`` ``why`` its reason,
    ``source`` what split device into memory or compute."""
    return f"hpml.bound.{stage}" + (f".{part}" if part else "")


# What the roofline callback logs and `python -m hpml.report.roofline` reads back.
STAGE = "roofline"
INTENSITY = metric(STAGE, "intensity", FLOP_PER_BYTE)
BYTES_PER_SAMPLE = metric(STAGE, "bytes_per_sample", BYTES)
FWD_FLOPS_PER_SAMPLE = metric(STAGE, "fwd", FLOPS_PER_SAMPLE)
FWD_BWD_FLOPS_PER_SAMPLE = metric(STAGE, "fwd_bwd", FLOPS_PER_SAMPLE)
FORWARD_ACHIEVED = metric(STAGE, "forward_achieved", FLOPS_PER_S)
PEAK_FP32 = metric(STAGE, "peak_fp32", FLOPS_PER_S)
PEAK_BANDWIDTH = metric(STAGE, "peak_memory_bandwidth", BYTES_PER_S)
RIDGE = metric(STAGE, "ridge", FLOP_PER_BYTE)
PEAK_TAG = "hpml.roofline.peak"
PEAK_SOURCE_TAG = "hpml.roofline.peak_source"


# What `python -m hpml.profile.ncu` logs: one training step's kernels as Nsight Compute counted
# them, by the step region (NVTX range) they ran in, each named by its short form.
NCU_REGIONS = {"hpml/forward": "fwd", "hpml/backward": "bwd"}
NCU_CACHE_TAG = "hpml.ncu.cache_control"  # ncu --cache-control: all (flushed per kernel) or none
NCU_CLOCK_TAG = "hpml.ncu.clock_control"  # ncu --clock-control: base (locked) or none
NCU_COUNTERS_TAG = "hpml.ncu.counters"  # the counters read, comma-separated
NCU_DEVICE_TAG = "hpml.ncu.device"  # the device the kernels ran on, and its compute capability
NCU_STEP_TAG = "hpml.ncu.step"  # which training step was counted: "2 of 2"
NCU_TENSOR_TAG = "hpml.ncu.tensor_unknown"  # tensor counters with work but no known FLOPs/unit


def ncu(region: str, quantity: str, unit: str) -> str:
    """A counted quantity of a step's region; an empty ``quantity`` is the region's total:
    ``ncu("fwd", "dram", BYTES)`` -> ``"ncu/fwd_dram_bytes"``, ``ncu("fwd", "", FLOPS)`` ->
    ``"ncu/fwd_flops"``."""
    return metric("ncu", f"{region}_{quantity}" if quantity else region, unit)


# What the canary (hpml.callbacks.canary) logs: a fixed reference workload timed at a run's start
# and end, ``canary/<workload>_<when>_<unit>``; the report reads the times back.
CANARY_WORKLOADS = ("cpu_gemm", "cpu_copy", "cuda_gemm", "h2d_copy")
CANARY_POINTS = ("start", "end")  # when a run times it
CANARY_PLAN_TAG = "hpml.canary.plan"  # the workloads, sizes and repeats: runs alike are comparable
CANARY_THRESHOLD_TAG = "hpml.canary.slow_above"  # the fraction slower the report calls slow
# the report's own figure, never logged: a run's canary time over the median of its peers'
CANARY_SLOWDOWN = metric("canary", "slowdown", X)


def canary(what: str, when: str, unit: str) -> str:
    """A canary figure at the run's ``when`` (start, end): ``canary("cpu_gemm", "start", MS)``
    -> ``"canary/cpu_gemm_start_ms"``."""
    return metric("canary", f"{what}_{when}", unit)


def canary_threads(when: str) -> str:
    """Torch's intra-op threads the canary ran at: ``canary/threads_start_count``."""
    return canary("threads", when, COUNT)


# Run tags: the machine a run ran on and its code (hpml.tracking.tags), read back by the report.
DEVICE_TAG, DEVICE_MEMORY_TAG = "hpml.device", "hpml.device_memory_bytes"
HOST_TAG, OS_TAG, CPU_MODEL_TAG = "hpml.host", "hpml.os", "hpml.cpu_model"
CPU_COUNT_TAG, CPU_THREADS_TAG = "hpml.cpu_count", "hpml.cpu_threads"
PROCESSES_TAG, LOAD_TAG = "hpml.processes", "hpml.load_avg_1m_5m_15m"
PYTHON_TAG, TORCH_TAG = "hpml.python_version", "hpml.torch_version"
CUDA_TAG, CUDA_AVAILABLE_TAG = "hpml.cuda_version", "hpml.cuda_available"
COMMIT_TAG, DIRTY_TAG = "hpml.git_commit", "hpml.git_dirty"
# the job: its command, folder and options, its place in a sweep, how it failed
COMMAND_TAG, OUTPUT_DIR_TAG, ERROR_TAG = "hpml.command", "hpml.output_dir", "hpml.error"
SWEEP_DIR_TAG, SWEEP_COMMAND_TAG = "hpml.sweep_dir", "hpml.sweep_command"
SWEEP_PARENT_TAG, JOB_NUM_TAG = "hpml.sweep_parent", "hpml.job_num"
CHOICE_TAG = "hpml.choice."  # + a config group: the option the job chose
PATH_TAG = "hpml.path."  # + a config key: a path the config held (hpml.tracking.records)
MODEL_FORMAT_TAG, MODEL_ERROR_TAG = "hpml.model_format", "hpml.model_error"
# a run's checkpoints (hpml.tracking.resume): their paths on disk, and the writer's host:pid
LAST_TAG, BEST_TAG = "hpml.checkpoint.last", "hpml.checkpoint.best"
WRITER_TAG = "hpml.checkpoint.writer"
# a member of a fused array: its index, the array's size and the leader's job folder (which the
# members of one array share), the step its loss stopped being finite
FUSED_TAG, ARRAY_SIZE_TAG = "hpml.fused", "hpml.fused.array_size"
MEMBER_TAG, ARRAY_TAG = "hpml.fused.member", "hpml.fused.array"
DIVERGED_TAG = "hpml.fused.diverged_at_step"
# what a run measured under (hpml.callbacks.perf): load that made it noisy, whose peak memory
NOISY_TAG, NOISY_REASON_TAG = "hpml.noisy", "hpml.noisy.reason"
PEAK_MEMORY_SOURCE_TAG = "hpml.peak_memory_source"
TARGET_TAG, TARGET_MET_TAG = "hpml.target", "hpml.target.met"  # hpml.callbacks.target
STORE_TAG = "hpml.report.store"  # the store the report read a run from: set as read, never logged


def choice_tag(group: str) -> str:
    """The option a job chose for a config group: ``hpml.choice.model``."""
    return f"{CHOICE_TAG}{group}"


def step_tag(step: str, key: str) -> str:
    """What a step's callback says of how it ran: ``step_tag("compile", "mode")`` ->
    ``hpml.compile.mode``; also a side-by-side comparison's (``compare``, ``prune.clock``) and
    the search's (``optuna``), on a trial or the search's parent run."""
    return f"hpml.{step}.{key}"


MEMBER_PREFIX = "fused"


def member_prefix(index: int) -> str:
    """What member ``index`` of a fused array prefixes its metric names with: ``fused3/``. The
    member's own run (:func:`hpml.fused.members.member_metrics`) stores them without it."""
    return f"{MEMBER_PREFIX}{index}/"


def member_named(metrics: dict[str, float], index: int) -> dict[str, float]:
    """``metrics`` named for member ``index`` of a fused array (:func:`member_prefix`)."""
    return {f"{member_prefix(index)}{name}": value for name, value in metrics.items()}
