"""tracking/ knows no fused arrays: pyproject.toml's import contracts forbid ``hpml.tracking`` to
import ``hpml.fused`` (``lint-imports`` holds them), and no module of hpml/tracking imports it,
at its top, inside a function or for type checking alone."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def forbidden_imports(folder: Path, forbidden: str, root: Path = REPO) -> list[str]:
    """``path:line: module`` of each import of ``forbidden`` (or a module inside it) in
    ``folder``'s modules, wherever in a module the import stands."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            hits = [m for m in modules if m == forbidden or m.startswith(f"{forbidden}.")]
            if hits:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {hits[0]}")
    return found


def test_a_contract_forbids_tracking_to_import_fused() -> None:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    forbidding = [
        contract
        for contract in contracts["contracts"]
        if contract["type"] == "forbidden"
        and "hpml.tracking" in contract["source_modules"]
        and "hpml.fused" in contract["forbidden_modules"]
    ]
    assert forbidding, "no import-linter contract forbids hpml.tracking to import hpml.fused"


def test_no_module_of_tracking_imports_fused() -> None:
    found = forbidden_imports(REPO / "hpml" / "tracking", "hpml.fused")
    assert not found, "hpml.tracking imports hpml.fused:\n" + "\n".join(found)


def test_the_scan_finds_a_planted_import_however_it_is_written(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        '"""Says hpml.fused in its docstring."""\n\n'
        "from typing import TYPE_CHECKING\n\n"
        "import hpml.fused_ish\n"
        "from hpml import fused\n"
        "if TYPE_CHECKING:\n    from hpml.fused.members import member_metrics\n\n"
        "def f():\n    import hpml.fused.plan\n"
    )
    found = [line.split(": ", 1)[1] for line in forbidden_imports(tmp_path, "hpml.fused", tmp_path)]
    assert found == ["hpml.fused", "hpml.fused.members", "hpml.fused.plan"]
