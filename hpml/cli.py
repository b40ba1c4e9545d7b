"""Command-line front of ``hpml.train``: cheap checks before Hydra starts, one-line failures after.

Imports nothing heavy: ``--help`` and bad group names answer before torch is loaded.
"""

from __future__ import annotations

import difflib
import logging
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import OverrideParseException
from omegaconf import OmegaConf

from hpml.build import CONF_DIR
from hpml.errors import config_file_problem, one_line, problem_lines

trace = logging.getLogger("hpml.trace")  # to the job log file only (conf/hydra/default.yaml)


def group_options(group: str, conf_dirs: list[Path]) -> list[str] | None:
    """Options of config group ``group``: its files in ``conf_dirs`` (``conf/`` and any further
    config folders) and the options Hydra and its plugins register (``hydra/launcher=joblib``),
    or None if there is no such group."""
    folders = [d / group for d in conf_dirs if (d / group).is_dir()]
    registered = registered_options(group)
    if not folders and registered is None:
        return None
    files = {p.stem for folder in folders for p in folder.glob("*.yaml")}
    return sorted(files | (registered or set()))


def extra_config_dirs(args: list[str]) -> list[Path]:
    """The config folders a user adds beside ``conf/``: ``--config-dir``/``-cd`` and
    ``hydra.searchpath=[...]`` (``file://`` entries; ``pkg://`` ones hold no files to list)."""
    dirs: list[str] = []
    for i, arg in enumerate(args):
        if arg in ("--config-dir", "-cd") and i + 1 < len(args):
            dirs.append(args[i + 1])
        elif arg.startswith("--config-dir="):
            dirs.append(arg.split("=", 1)[1])
        elif arg.startswith("hydra.searchpath="):
            entries = arg.split("=", 1)[1].strip("[]")
            dirs += [e.strip().strip("'\"") for e in entries.split(",") if e.strip()]
    return [Path(d.removeprefix("file://")) for d in dirs if not d.startswith("pkg://")]


def registered_options(group: str) -> set[str] | None:
    """Options of ``group`` in Hydra's ConfigStore once plugins are discovered (no torch)."""
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins

    Plugins.instance()  # discovering the hydra_plugins packages registers their configs
    try:
        names = ConfigStore.instance().list(group)
    except OSError:  # not a group Hydra or a plugin registers
        return None
    return {name.removesuffix(".yaml") for name in names if name.endswith(".yaml")}


def overrides_of(args: list[str]) -> list[Override]:
    """The command line's overrides, parsed by Hydra's grammar (flags and their values left out)."""
    return OverridesParser.create().parse_overrides(
        [a for a in args if not a.startswith("-") and "=" in a]
    )


def malformed_override(args: list[str]) -> str | None:
    """The first override Hydra's grammar cannot read, with why, on one line (Hydra's own
    answer is a traceback)."""
    for arg in args:
        try:
            overrides_of([arg])
        except OverrideParseException as exc:
            return f"cannot read the override {arg!r}: {'; '.join(str(exc).splitlines())}"
    return None


def unknown_option(args: list[str]) -> str | None:
    """A one-line message for the first ``group=option`` whose option has no config file,
    naming the valid ones (Hydra's spans a dozen lines)."""
    dirs = [CONF_DIR, *extra_config_dirs(args)]
    for override in overrides_of(args):
        group = override.key_or_group
        options = group_options(group, dirs)
        if options is None or override.is_delete() or override.value() is None:
            continue
        if override.is_sweep_override():
            values = list(override.sweep_string_iterator())
        else:
            values = [override.get_value_element_as_str()]
        for value in values:
            if value not in options:
                noun = "option" if group.count("/") else group
                return f"unknown {noun} '{value}' for {group}= (valid: {', '.join(options)})"
    return None


def first_job(args: list[str]) -> list[str]:
    """The overrides of a sweep's first job (each sweep replaced by its first value)."""
    first = []
    for override in overrides_of(args):
        if override.is_sweep_override():
            value = next(iter(override.sweep_string_iterator()))
            first.append(f"{override.get_key_element()}={value}")
        else:
            first.append(override.input_line)
    return first


def sweep_without_multirun(args: list[str]) -> str | None:
    """A sweep value given without ``-m``: Hydra refuses it in a paragraph, this in a line."""
    if "-m" in args or "--multirun" in args:
        return None
    for override in overrides_of(args):
        if override.is_sweep_override():
            return (
                f"{override.input_line} is a sweep: add -m to run one job per value "
                f"(for a list write {override.get_key_element()}=[...])"
            )
    return None


def composition_error(args: list[str]) -> str | None:
    """Hydra's complaint about the overrides (a mistyped key, a bad value type), on one line."""
    extra = extra_config_dirs(args)
    searchpath = [f"file://{d.resolve()}" for d in extra]
    overrides = [o for o in first_job(args) if not o.startswith("hydra.searchpath=")]
    if searchpath:
        overrides.append(f"hydra.searchpath=[{','.join(searchpath)}]")
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            compose("train", overrides=overrides)
    except Exception as exc:
        text = str(exc).split("Set the environment variable HYDRA_FULL_ERROR")[0]
        return config_file_problem(exc, [CONF_DIR, *extra]) or " ".join(text.split())
    return None


def hoist_flags(args: list[str]) -> list[str]:
    """``model=lstm -m a=1`` -> ``-m model=lstm a=1``: flags anywhere, as users type them. Only
    the flags Hydra's parser takes without a value move: argparse refuses overrides after them."""
    from hydra._internal.utils import get_args_parser

    actions = get_args_parser()._actions
    bare = {flag for action in actions if action.nargs == 0 for flag in action.option_strings}
    return [a for a in args if a in bare] + [a for a in args if a not in bare]


def trainer_arguments() -> list[str]:
    """The argument names of ``lightning.Trainer``, read from its source (importing Lightning
    costs seconds), as validation reads every ``_target_``'s."""
    from hpml.validate.source import signature

    found = signature("lightning.Trainer")
    return sorted(found[1]) if found else []


def trainer_overrides(args: list[str]) -> list[str]:
    """``trainer.<name>=...`` for any argument of ``lightning.Trainer``: those
    ``conf/trainer/default.yaml`` leaves out are added (``++``), so they need no ``+``; a name
    Lightning does not take exits with one line."""
    listed = set(OmegaConf.load(CONF_DIR / "trainer" / "default.yaml"))
    known: list[str] = []
    out = []
    for arg in args:
        key, equals, _ = arg.partition("=")
        name = key.removeprefix("trainer.")
        if not equals or name == key or "." in name or name in listed:
            out.append(arg)
            continue
        known = known or trainer_arguments()
        if name not in known:
            close = difflib.get_close_matches(name, known, 1)
            hint = f" (did you mean trainer.{close[0]}?)" if close else ""
            print(
                f"hpml: error: {key} is not an argument of lightning.Trainer{hint}", file=sys.stderr
            )
            raise SystemExit(2)
        out.append(f"++{arg}")
    return out


def check_args(args: list[str]) -> None:
    """Exit with status 2 and one line, before any job starts, if the overrides cannot make a
    config."""
    if any(a in ("--help", "-h", "--hydra-help", "--info", "-i") for a in args):
        return
    from hpml.validate.store import unwritable_root

    message = (
        malformed_override(args)
        or unknown_option(args)
        or sweep_without_multirun(args)
        or composition_error(args)
        or unwritable_root(args)
    )
    if message is not None:
        print(f"hpml: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def report_failure(exc: BaseException, log_file: Path | None) -> str:
    """Print ``exc`` as one line (one per problem when there are several) plus where its
    traceback went; the traceback goes to the log. Returns it all as one line."""
    from hpml.tracking.redact import redact_text

    trace.error("run failed", exc_info=exc)
    where = f" (traceback: {log_file})" if log_file is not None else ""
    lines = [f"hpml: error: {redact_text(line)}" for line in problem_lines(exc)]
    print("\n".join(lines) + where, file=sys.stderr)
    return f"hpml: error: {redact_text(one_line(exc))}{where}"
