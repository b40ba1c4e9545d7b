"""The GPU kit without the network: its requirement list, what ``build`` asks pip for and keeps,
``install`` of a real (tiny) wheel into a folder, and that it runs without hpml's dependencies."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from hpml.gpu import kit

REPO = Path(__file__).resolve().parent.parent


def test_requirements_are_pinned_once_each() -> None:
    names = [kit.normalize(name) for name, _ in kit.KIT]
    assert len(names) == len(set(names))
    assert kit.requirements() == [f"{name}=={version}" for name, version in kit.KIT]
    assert all(requirement.count("==") == 1 for requirement in kit.requirements())
    assert {name for name, _ in kit.KIT} >= kit.BUILT_HERE
    # Nothing the GPU machine already has: the kit would shadow its copy.
    assert not set(names) & kit.HOST_PACKAGES


def declared_requirements() -> list[Requirement]:
    """What hpml declares (pyproject.toml), with MLflow's range standing for mlflow-skinny (the
    same releases), and what each kit package installed here at its kit version declares: the
    ranges the kit's pins must meet. Newer releases on the registry do not enter."""
    pins = {kit.normalize(name): version for name, version in kit.KIT}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = [Requirement(line) for line in project]
    declared += [
        Requirement(f"mlflow-skinny{req.specifier}") for req in declared if req.name == "mlflow"
    ]
    for name, version in pins.items():
        try:
            if importlib.metadata.version(name) != version:
                continue
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in importlib.metadata.requires(name) or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                declared.append(req)
    return declared


def test_pins_meet_what_hpml_and_the_kit_declare() -> None:
    pins = {kit.normalize(name): version for name, version in kit.KIT}
    met = 0
    for req in declared_requirements():
        pin = pins.get(kit.normalize(req.name))
        if pin is not None:
            assert req.specifier.contains(pin, prereleases=True), f"{req.name}=={pin} fails {req}"
            met += 1
    # hpml's own ranges (hydra-core, omegaconf, torch-pruning, mlflow) are always among them.
    assert met >= 4


def test_a_pin_outside_a_declared_range_is_caught() -> None:
    """The check above can fail: a torch-pruning pin outside hpml's ``==1.6.*``."""
    [declared] = [req for req in declared_requirements() if req.name == "torch-pruning"]
    assert not declared.specifier.contains("1.5.2")


def test_the_module_runs_without_site_packages(tmp_path: Path) -> None:
    """``-S``: no site-packages, so nothing but the standard library; ``list`` answers."""
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); from hpml.gpu.kit import main; main()"
    # subprocess: an interpreter without site-packages, as on a GPU machine without an index
    out = subprocess.run(
        [sys.executable, "-S", "-c", code, "list"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.split()
    assert out == kit.requirements()


def test_wheel_name_version() -> None:
    name = "pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    assert kit.wheel_name_version(Path(name)) == ("pydantic-core", "2.50.5")
    assert kit.wheel_name_version(Path("SQLAlchemy-2.1.9-cp312-cp312-x.whl"))[0] == "sqlalchemy"
    with pytest.raises(ValueError):
        kit.wheel_name_version(Path("alembic-1.20.1.tar.gz"))


def fake_wheel(folder: Path, name: str, version: str, tag: str = "py3-none-any") -> Path:
    path = folder / f"{name.replace('-', '_')}-{version}-{tag}.whl"
    path.write_bytes(b"x" * 1024)
    return path


def test_build_fetches_only_what_is_missing_and_drops_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(kit, "pip", lambda python, *args, **_: calls.append(args))
    folder = tmp_path / "kit"
    folder.mkdir()
    (folder / kit.STAMP).write_text("3.12\n")
    for name, version in kit.KIT[2:]:
        fake_wheel(folder, name, version)
    stale = fake_wheel(folder, kit.KIT[3][0], "0.0.1")  # another version
    dropped = fake_wheel(folder, "pycparser", "3.12")  # no longer in the kit
    assert kit.build(folder, "3.12") == 1024 * (len(kit.KIT) - 2)
    assert not stale.exists() and not dropped.exists()
    [download] = calls
    assert download[0] == "download" and "--no-deps" in download
    assert download[download.index("--python-version") + 1] == "3.12"
    assert [download[i + 1] for i, arg in enumerate(download) if arg == "--platform"] == list(
        kit.PLATFORMS
    )
    assert download[-2:] == tuple(kit.requirements()[:2])

    calls.clear()  # another Python: every wheel goes, the source-only one is built
    kit.build(folder, "3.11")
    assert not list(folder.glob("*.whl"))
    assert len(calls) == 2 and calls[1][:2] == ("wheel", "--no-deps")
    assert calls[1][-1] == "antlr4-python3-runtime==4.9.3"
    assert "antlr4-python3-runtime==4.9.3" not in calls[0]


def real_wheel(folder: Path) -> Path:
    """A minimal valid wheel of a one-module package, written by hand (PEP 427)."""
    files = {
        "hpmlkitprobe/__init__.py": b"ANSWER = 42\n",
        "hpmlkitprobe-0.1.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: hpmlkitprobe\nVersion: 0.1\n"
        ),
        "hpmlkitprobe-0.1.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("hpmlkitprobe-0.1.dist-info/RECORD,,")
    path = folder / "hpmlkitprobe-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("hpmlkitprobe-0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def test_install_puts_the_wheels_in_a_folder_for_pythonpath(tmp_path: Path) -> None:
    folder = tmp_path / "kit"
    folder.mkdir()
    real_wheel(folder)
    target = kit.install(folder, tmp_path / "site")
    # subprocess: an interpreter without site-packages that finds the wheel on PYTHONPATH
    answer = subprocess.run(
        [sys.executable, "-S", "-c", "import hpmlkitprobe; print(hpmlkitprobe.ANSWER)"],
        env={"PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert answer.strip() == "42"
    kit.install(folder, target)  # again, over the first: replaced, not refused

    with pytest.raises(FileNotFoundError, match="build the kit first"):
        kit.install(tmp_path / "empty", tmp_path / "site2")


def test_missing_module_is_the_import_that_failed() -> None:
    output = (
        "WARNING mlflow.utils.git_utils: Failed to import Git ... Error: No module named 'git'\n"
        "hydra.errors.InstantiationException: Error locating target 'x':\n"
        "ModuleNotFoundError(\"No module named 'opentelemetry.semconv'\")\n"
    )
    assert kit.missing_module(output) == "opentelemetry.semconv"
    assert kit.missing_module("ModuleNotFoundError: No module named 'sqlparse'") == "sqlparse"
    assert kit.missing_module("Error: No module named 'git'") is None
