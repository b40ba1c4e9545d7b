"""What Nsight Compute exported: the kernels of an ``ncu --csv --page raw`` run, or of a report
converted by ``ncu --import x.ncu-rep --csv --page raw``, with their counters and NVTX ranges.

The raw page is a header row of column names (the kernel's identity: ``ID``, ``Kernel Name``,
``Device``, ``CC``, ..., its push/pop NVTX stack ``thread Domain:Push/Pop_Range:PL_Type:...``
under ``ncu --nvtx``, then one column per metric), a row of units, then one row per profiled
kernel launch. Lines before the header (``==PROF==`` lines, the application's own output, when
the tool's output went to one file) are skipped. ``--csv`` prints base units unless told
otherwise; the scaled ones (``Kbyte``, ``usecond``) are brought back to bytes and seconds. Standard
library only: a report is read without torch.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hpml.errors import HpmlError

ID, NAME, DEVICE, CC = "ID", "Kernel Name", "Device", "CC"
NVTX_MARK = "Push/Pop_Range"  # in the name of the push/pop NVTX column, whatever its version
DEFAULT_DOMAIN = "<default domain>"
# a unit's factor to the base unit hpml keeps: bytes, seconds, counts (SI prefixes, as ncu scales)
UNIT_FACTORS = {
    "": 1.0,
    **{f"{p}byte": f for p, f in (("", 1.0), ("K", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12))},
    **{f"{p}inst": f for p, f in (("", 1.0), ("K", 1e3), ("M", 1e6), ("G", 1e9))},
    **{f"{p}second": f for p, f in (("n", 1e-9), ("u", 1e-6), ("m", 1e-3), ("", 1.0))},
    **{"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0},
}
_QUOTED = re.compile(r'"([^"]*)"')
# the fields after a range's name in each entry of the NVTX stack: PL_Type to Msg
_TRAILING_FIELDS = 6


class NcuExportError(HpmlError):
    """An export hpml cannot read, and what to run instead."""


@dataclass(frozen=True)
class Kernel:
    """One profiled kernel launch.

    Args:
        ranges: its push/pop NVTX ranges of the default domain, outermost first (other domains,
            such as a library's own, left out).
        values: the metrics read, in bytes, seconds or counts; a blank or ``n/a`` cell is absent.
    """

    id: int
    name: str
    ranges: tuple[str, ...]
    device: str
    cc: str
    values: Mapping[str, float]


@dataclass(frozen=True)
class Export:
    """The kernels of one export, in launch order, and the units its metric columns were in."""

    kernels: list[Kernel]
    units: Mapping[str, str]
    nvtx: bool  # it has the push/pop NVTX column: ncu ran with --nvtx

    @property
    def metrics(self) -> list[str]:
        """The metric columns of the export."""
        return list(self.units)


def nvtx_ranges(cell: str) -> tuple[str, ...]:
    """The default domain's range names in an NVTX stack cell, outermost first.

    A cell is the thread, then each range quoted as ``domain:name:PL_Type:PL_Value:CLR_Type:
    Color:Msg_Type:Msg``; names may hold colons (the six trailing fields are split off the
    right), e.g. ``1  "<default domain>:hpml/forward:none:none:none:none:none:none" ``.
    """
    found = []
    for entry in _QUOTED.findall(cell):
        domain, _, rest = entry.partition(":")
        parts = rest.rsplit(":", _TRAILING_FIELDS)
        if domain == DEFAULT_DOMAIN and len(parts) == _TRAILING_FIELDS + 1:
            found.append(parts[0])
    return tuple(found)


def number(cell: str) -> float | None:
    """A metric cell as a number: ``"1,234.5"`` -> 1234.5; blank or ``n/a`` -> None; of an
    instanced cell (``"158 (0: 158)"`` or ``"240; 240"``), the leading aggregate."""
    text = cell.strip().split(" ", 1)[0].split(";", 1)[0].replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def _header_at(lines: list[str]) -> int:
    for index, line in enumerate(lines):
        if line.startswith('"ID",'):
            return index
    raise NcuExportError(
        'no Nsight Compute raw page in it (no header row starting "ID"): export one with '
        "ncu --csv --page raw ... (or ncu --import x.ncu-rep --csv --page raw)"
    )


def parse(text: str, read: tuple[str, ...] | None = None) -> Export:
    """The kernels of a raw-page CSV export.

    Args:
        read: the metrics to keep (all columns after the identity ones when None); those absent
            from the export are absent from every kernel's values.
    """
    lines = text.splitlines()
    rows = list(csv.reader(io.StringIO("\n".join(lines[_header_at(lines) :]))))
    header, units, data = rows[0], rows[1] if len(rows) > 1 else [], rows[2:]
    if "Metric Name" in header:
        raise NcuExportError(
            "a details page (a row per metric), not a raw page export: export with --page raw"
        )
    if len(units) != len(header):
        raise NcuExportError(
            f"the units row has {len(units)} cells for {len(header)} columns: not a raw page "
            "export (ncu --csv --page raw)"
        )
    nvtx = next((c for c in header if NVTX_MARK in c), None)
    identity = {ID, NAME, DEVICE, CC, nvtx, "Process ID", "Process Name", "Host Name"}
    identity |= {"Context", "Stream", "Block Size", "Grid Size", "Kernel Time"}
    wanted = [c for c in header if c not in identity and not c.startswith("Id:Domain:")]
    if read is not None:
        wanted = [c for c in wanted if c in read]
    unit_of = dict(zip(header, units, strict=True))
    for column in wanted:
        if unit_of[column] not in UNIT_FACTORS:
            raise NcuExportError(
                f"unit {unit_of[column]!r} of {column} is not one hpml reads (byte, Kbyte, "
                "inst, nsecond, ...): export with --print-units base"
            )
    kernels = []
    for row in data:
        if len(row) != len(header):  # the tool's own lines after the table
            continue
        cells = dict(zip(header, row, strict=True))
        values = {
            c: v * UNIT_FACTORS[unit_of[c]] for c in wanted if (v := number(cells[c])) is not None
        }
        kernels.append(
            Kernel(
                int(number(cells[ID]) or 0),
                cells.get(NAME, ""),
                nvtx_ranges(cells[nvtx]) if nvtx else (),
                cells.get(DEVICE, ""),
                cells.get(CC, ""),
                values,
            )
        )
    kernels.sort(key=lambda k: k.id)
    return Export(kernels, {c: unit_of[c] for c in wanted}, nvtx is not None)


def load(path: Path | str, read: tuple[str, ...] | None = None) -> Export:
    """:func:`parse` of an export file (``ncu --log-file``, or redirected standard output)."""
    return parse(Path(path).read_text(encoding="utf-8", errors="replace"), read)
