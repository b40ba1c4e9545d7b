"""The next step for each bound, as overrides a user can paste, each with the gain it predicts
and how: Daydream's question (USENIX ATC'20), what an optimisation would buy before it is tried.

A gain is a ratio of train throughput, proposal over original (> 1: faster). It is an upper
bound where one holds (a step that waits w of its time for data is at most 1/(1-w) faster
without the wait) and an estimate where none does (a compute-bound step against the ratio of
the peaks of the precision it would move to). Every rule reads only :class:`Evidence`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hpml.advise.evidence import Evidence
from hpml.analysis.devices import precision_dtype
from hpml.data.placement import MAX_AUTO_WORKERS
from hpml.names import COMPUTE, DEVICE, HOST, INPUT, MEMORY

AT_MOST, ABOUT = "at most", "about"  # an upper bound; an estimate
# the lower precisions a float32 run may move to: (dtype, trainer option, trainer.precision)
LOWER = (("bf16", "bf16", "bf16-mixed"), ("fp16", "fp16", "16-mixed"))


@dataclass(frozen=True)
class Proposal:
    """One next step: ``overrides`` to paste, the ``gain`` in train throughput it predicts
    (None: no figure), ``kind`` :data:`AT_MOST` or :data:`ABOUT`, and ``how`` it was worked out.
    ``untried`` says why ``--try`` cannot run it beside the original (empty: it can)."""

    bound: str
    overrides: tuple[str, ...]
    gain: float | None
    kind: str | None
    how: str
    untried: str = ""

    @property
    def text(self) -> str:
        return " ".join(self.overrides)

    def predicted(self) -> str:
        """``at most 2.86x``, ``about 1.54x`` or ``no estimate``."""
        return "no estimate" if self.gain is None else f"{self.kind} {self.gain:.3g}x"


def workers(cpus: int, devices: int = 1) -> int:
    """The loader's workers to try: each device's share of the host's cores less the one its
    training loop runs on, at least 1 and at most ``num_workers=auto``'s cap."""
    return max(1, min(MAX_AUTO_WORKERS, cpus // max(devices, 1) - 1))


def _lower(e: Evidence) -> list[tuple[str, str]]:
    """``(dtype, override)`` of each lower precision a float32 run may move to (fp16: CUDA
    only): the ``trainer`` option where the run used the default one, else the key."""
    if precision_dtype(e.precision) != "fp32":
        return []
    return [
        (dtype, f"trainer={option}" if e.trainer == "default" else f"trainer.precision={setting}")
        for dtype, option, setting in LOWER
        if dtype != "fp16" or e.device == "cuda"
    ]


def _ceiling(e: Evidence, what: str) -> tuple[float | None, str | None, str]:
    """A step that changes its kernels, not its FLOPs, is at most at the peak: 100/MFU."""
    if not e.mfu_pct:
        return None, None, f"{what}; no bound: the run logged no MFU (callbacks.perf.count_flops)"
    gain = 100 / e.mfu_pct
    return gain, AT_MOST, f"{what}; at {e.mfu_pct:.3g}% of the peak, at most 100/MFU = {gain:.3g}x"


def input_steps(e: Evidence) -> list[Proposal]:
    """Hold the data on the device, more loader workers, pinned batches on CUDA."""
    if e.placement != "loader":
        return []
    w, found = e.wait, []
    bound = 1 / (1 - w)
    without = (
        f"{e.data_wait_pct:.0f}% of a step waits for data; without the wait a step is at most "
        f"1/(1 - {w:.2f}) = {bound:.3g}x faster"
    )
    if e.held:
        overrides = ["data.placement=device"]
        # a loader knob beside a placement without a loader is refused: back to auto
        if e.configured.get("num_workers", "auto") not in ("auto", "0"):
            overrides.append("data.num_workers=auto")
        if e.configured.get("pin_memory", "auto").lower() not in ("auto", "false"):
            overrides.append("data.pin_memory=auto")
        how = f"{without}; held as tensors on the device, a batch is one gather, with no loader"
        found.append(Proposal(INPUT, tuple(overrides), bound, AT_MOST, how))
    n = workers(e.cpus, e.devices)
    if e.num_workers < n:
        # a batch's loading time in steps: the whole wait in the loop, or with k workers still
        # short, k steps (k batches in flight, one arriving a step)
        k = e.num_workers
        load = w if k == 0 else float(k)
        step = max(1 - w, load / n)
        gain = min(bound, 1 / step)
        source = "in the loop" if k == 0 else f"by each of {k} workers"
        how = (
            f"a batch takes {load:.2f} of a step to load ({source}), the step's own work "
            f"{1 - w:.2f}; with {n} loading side by side a batch is ready every {load:.2f}/{n}, "
            f"so a step takes max({1 - w:.2f}, {load:.2f}/{n}) = {step:.2f}, given a core for "
            f"each worker ({without}). N: the {e.cpus} cores"
            + (f" over {e.devices} devices" if e.devices > 1 else "")
            + f" less the training loop's, at least 1, at most {MAX_AUTO_WORKERS}"
        )
        found.append(Proposal(INPUT, (f"data.num_workers={n}",), gain, ABOUT, how))
    if e.device == "cuda" and not e.pin_memory:
        how = f"{without}; a pinned batch is copied to the device with no staging copy"
        found.append(Proposal(INPUT, ("data.pin_memory=true",), bound, AT_MOST, how))
    return found


def host_steps(e: Evidence) -> list[Proposal]:
    """A larger batch, a compiled step (CUDA graphs on CUDA), a fused array for a sweep."""
    issue = (
        f"the host takes {e.host_issue_pct:.0f}% of the device's time on a step to issue it"
        if e.host_issue_pct is not None
        else "the host bounds the step"
    )
    found = []
    if e.batch_size:
        how = (
            f"{issue}: a step's launches do not grow with its batch, so twice the samples a step "
            "is at most twice the throughput, until the device's own work catches up"
        )
        found.append(Proposal(HOST, (f"data.batch_size={2 * e.batch_size}",), 2.0, AT_MOST, how))
    if e.compile == "none":
        graphs = ("compile.mode=reduce-overhead",) if e.device == "cuda" else ()
        gain, kind, how = _ceiling(
            e,
            f"{issue}: compiled, a step launches fused kernels"
            + (", replayed as one CUDA graph (mode reduce-overhead)" if graphs else ""),
        )
        overrides = ("compile=torch_compile", "compile.train=true", *graphs)
        found.append(Proposal(HOST, overrides, gain, kind, how))
    if e.fusable > 1:
        how = (
            f"{issue}: the {e.fusable} runs of its sweep that differ only in keys that keep "
            f"shapes train as one vmapped model (HFTA), each launch serving all {e.fusable}"
        )
        untried = "fuse=array picks the sweep's launcher: run the sweep again with it"
        found.append(Proposal(HOST, ("fuse=array",), float(e.fusable), AT_MOST, how, untried))
    return found


def compute_steps(e: Evidence) -> list[Proposal]:
    """A lower precision (its peak over float32's), channels_last (bounded by the peak)."""
    split = (
        ""
        if e.bound == COMPUTE
        else "; whether compute or memory bounds the device is not known (callbacks=analysis "
        "splits it by the roofline)"
    )
    found = []
    for dtype, override in _lower(e):
        low, high = e.peaks.get("fp32"), e.peaks.get(dtype)
        if low is None or high is None:
            how = (
                f"no estimate: no {dtype} and fp32 peaks of this device in the datasheet table or "
                f"the peak cache (a run with {override} measures its own)"
            )
            found.append(Proposal(e.bound, (override,), None, None, how + split))
            continue
        gain = high.flops_per_s / low.flops_per_s
        how = (
            f"a compute-bound step scales with its precision's peak: {dtype} "
            f"{high.flops_per_s:.3g} over fp32 {low.flops_per_s:.3g} FLOP/s ({high.source})"
        )
        found.append(Proposal(e.bound, (override,), gain, ABOUT, how + split))
    if e.channels_last is False:
        gain, kind, how = _ceiling(e, "channels_last (NHWC) picks other convolution kernels")
        found.append(Proposal(e.bound, ("model.channels_last=true",), gain, kind, how + split))
    return found


def memory_steps(e: Evidence) -> list[Proposal]:
    """Half the bytes (bf16), recomputed activations, a smaller batch: the last two trade
    speed for memory, and say so."""
    under = "its arithmetic intensity is under the roofline's ridge: its bytes bound the step"
    found = []
    for dtype, override in _lower(e)[:1]:
        how = f"{under}; in {dtype} each tensor autocast casts moves half the bytes"
        found.append(Proposal(MEMORY, (override,), 2.0, AT_MOST, how))
    if e.activations == "keep":
        gain, kind, how = None, None, "no estimate: the run logged no FLOPs per sample"
        if e.fwd_flops and e.fwd_bwd_flops:
            gain, kind = e.fwd_bwd_flops / (e.fwd_bwd_flops + e.fwd_flops), ABOUT
            how = (
                f"backward recomputes each stage's forward: a sample's work grows from "
                f"{e.fwd_bwd_flops:.3g} to {e.fwd_bwd_flops + e.fwd_flops:.3g} FLOPs, its "
                "traffic alike"
            )
        how += "; a cost in speed for memory (memory/activations_bytes): room for a larger batch"
        found.append(Proposal(MEMORY, ("activations=checkpoint",), gain, kind, f"{under}; {how}"))
    if e.batch_size and e.batch_size > 1:
        how = (
            f"{under}; half the batch moves the same weights for half the samples: a cost in "
            "speed for a step's memory (train/peak_memory_bytes)"
        )
        found.append(Proposal(MEMORY, (f"data.batch_size={e.batch_size // 2}",), 1.0, AT_MOST, how))
    return found


RULES: dict[str, Callable[[Evidence], list[Proposal]]] = {
    INPUT: input_steps,
    HOST: host_steps,
    COMPUTE: compute_steps,
    DEVICE: compute_steps,
    MEMORY: memory_steps,
}


def propose(e: Evidence) -> list[Proposal]:
    """The next steps for the bound of ``e``'s training (none for a bound without rules)."""
    rule = RULES.get(e.bound)
    return rule(e) if rule is not None else []


def notes(e: Evidence) -> list[str]:
    """What was not proposed for ``e``'s bound, and why."""
    said = []
    if e.bound not in RULES:
        said.append(f"no proposal for a run bound by {e.bound or 'nothing (no hpml.bound.train)'}")
    elif e.bound == INPUT and e.placement != "loader":
        said.append(
            f"the data is held as tensors already (data.chosen.placement={e.placement}): the "
            "wait is the loop's own work between steps"
        )
    elif e.bound == INPUT:
        if not e.held:
            why = e.not_held or "not known whether the data can be held as tensors"
            said.append(f"data.placement=device: not proposed: {why}")
        if e.num_workers >= (n := workers(e.cpus, e.devices)):
            said.append(f"data.num_workers: not proposed: {e.num_workers} already, the rule's {n}")
    return said
