"""Errors a user can act on: each renders as one line that names the bad value and what is valid."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class HpmlError(Exception):
    """Base of the errors hpml reports as one line, without a traceback."""


def one_line(exc: BaseException) -> str:
    """``Type: message`` on a single line, for tags and terminals; of an error raised in a
    DataLoader worker, only the original error's last line. Here so reporting never imports
    torch."""
    text = str(exc)
    if "\nOriginal Traceback (most recent call last):" in text:
        last = text.rstrip().splitlines()[-1]  # "<module>.<Type>: <message>"
        kind, _, rest = last.partition(": ")
        text = rest if kind.rsplit(".", 1)[-1] == type(exc).__name__ else last
    message = " ".join(text.split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class Problems(HpmlError):
    """Several things wrong at once, so a user fixes them in one go: each stays its own error,
    printed as its own line (:func:`problem_lines`); as one line (a tag) they are joined."""

    def __init__(self, problems: Sequence[BaseException]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(one_line(p) for p in self.problems))


def raise_all(problems: Sequence[HpmlError]) -> None:
    """Raise the one problem, or all of them as :class:`Problems`; nothing when there is none."""
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise Problems(problems)


def problem_lines(exc: BaseException) -> list[str]:
    """What a terminal shows of ``exc``: one line, or one per problem of a :class:`Problems`."""
    return [one_line(p) for p in exc.problems] if isinstance(exc, Problems) else [one_line(exc)]


class ConfigError(HpmlError):
    """A config value is out of range or does not fit the rest of the config."""

    def __init__(self, key: str, value: Any, expected: str) -> None:
        self.key, self.value, self.expected = key, value, expected
        super().__init__(f"{key}={value!r} is invalid: expected {expected}")

    def under(self, group: str) -> ConfigError:
        """The same error with its key prefixed by the config group it came from."""
        return ConfigError(f"{group}.{self.key}", self.value, self.expected)


class DatasetNotFoundError(HpmlError):
    """Dataset files are missing: says where hpml looked and how to get them."""

    def __init__(self, name: str, path: Path | str, hint: str) -> None:
        self.path = Path(path)
        super().__init__(f"{name} not found at {self.path}: {hint}")


class IncompatibleError(HpmlError):
    """Two valid choices do not work together (a model and the data it is given)."""


@contextlib.contextmanager
def constructed(group: str) -> Iterator[None]:
    """Inside, a constructor's own TypeError/ValueError turned into one line naming ``group``:
    validation's checks of the values should have named the key; this is the net below them."""
    try:
        yield
    except HpmlError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        message = " ".join(str(exc).split())
        raise HpmlError(
            f"{group}: {type(exc).__name__}: {message} (check the {group}.* values "
            f"against `python -m hpml.train --cfg job`)"
        ) from exc


def one_of(key: str, value: T, choices: Collection[Any]) -> T:
    """Return ``value`` if it is one of ``choices``, else raise a ConfigError naming ``key``
    and them."""
    if value not in choices:
        raise ConfigError(key, value, f"one of {', '.join(map(str, choices))}")
    return value


def positive_int(key: str, value: Any) -> int:
    """Return ``value`` if it is an integer > 0, else raise a ConfigError naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(key, value, "a positive integer")
    return value


def non_negative_int(key: str, value: Any) -> int:
    """Return ``value`` if it is an integer >= 0, else raise a ConfigError naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(key, value, "an integer >= 0")
    return value


def config_file_problem(exc: BaseException, config_dirs: Iterable[Path]) -> str | None:
    """One line naming the config file that composing a config failed to read (``exc``: what
    Hydra raised) and what it should be, or None if ``exc`` is about no file. YAML's own errors
    name the file; a byte that is not UTF-8 names none, so the files of ``config_dirs`` (where
    composition looked) are read to find it."""
    import yaml

    for seen in causes(exc):
        problem = None
        if isinstance(seen, yaml.MarkedYAMLError) and seen.problem_mark is not None:
            mark = seen.problem_mark  # where the file stops being YAML
            problem = (mark.name, f"{seen.problem} at line {mark.line + 1}:{mark.column + 1}")
        elif isinstance(seen, yaml.reader.ReaderError):  # a character YAML never allows
            problem = (seen.name, f"{seen.reason} at byte {seen.position}")
        elif isinstance(seen, UnicodeDecodeError):  # the first config file that is not UTF-8
            for path in sorted(p for folder in config_dirs for p in Path(folder).rglob("*.yaml")):
                try:
                    path.read_text(encoding="utf-8")
                except UnicodeDecodeError as bad:
                    problem = (path, f"{bad.reason} at byte {bad.start}")
                    break
        if problem is not None:
            return (
                f"config file {problem[0]} cannot be read: {problem[1]}; it should be UTF-8 YAML "
                "text of config keys and values, as the files in conf/ are: fix or restore it"
            )
    return None


def causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and the errors it was raised from or while handling, outermost first, each once:
    MLflow, SQLAlchemy, requests and hpml each wrap the error that says what went wrong."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain
