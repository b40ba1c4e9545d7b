"""Types a config value must have: what the signature of its ``_target_`` declares.

So ``model.optimizer.lr=foo`` is refused by the ``float`` ``torch.optim.SGD`` declares, and
``trainer.max_epoch=3`` by the Trainer having no such argument, before either is called. Hints a
value cannot be judged by (callables, protocols, tensors) let it through.
"""

from __future__ import annotations

import collections.abc as abc
import difflib
import inspect
import os
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.utils import get_object

from hpml.errors import ConfigError

Num = int | float
Signature = tuple[dict[str, Any], set[str], bool]  # hints, argument names, takes **kwargs
# a _target_'s signature; None where it is not known; raises for a target that does not exist
Reader = Callable[[str], Signature | None]


def imported(path: str) -> Signature:
    """The signature of ``_target_`` ``path``, its module imported."""
    return hints(get_object(path))


def hints(target: Any) -> Signature:
    """Type hints of ``target``'s arguments (``Annotated`` kept), their names, and whether it
    takes ``**kwargs``; the bases' ``__init__`` are read too, the most derived first."""
    functions = (
        [c.__init__ for c in inspect.getmro(target) if "__init__" in vars(c)]
        if inspect.isclass(target)
        else [target]
    )
    typed: dict[str, Any] = {}
    names: set[str] = set()
    open_ended = True
    for function in functions:
        try:
            params = inspect.signature(function).parameters
        except (TypeError, ValueError):
            return typed, names, True
        try:
            found = typing.get_type_hints(function, include_extras=True)
        except Exception:  # a forward reference to a name only imported for type checkers
            found = _each_hint(function)
        for name, param in params.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or name == "self":
                continue
            names.add(name)
            if name in found and name not in typed:
                typed[name] = found[name]
        open_ended = any(p.kind == p.VAR_KEYWORD for p in params.values())
        if not open_ended or function is object.__init__:
            break
    return typed, names, open_ended


def _each_hint(function: Any) -> dict[str, Any]:
    """The hints of ``function`` that resolve, one by one: ``get_type_hints`` gives all or none,
    and one name imported only for type checkers must not hide the others (their ranges)."""
    found: dict[str, Any] = {}
    space = getattr(function, "__globals__", {})
    for name, hint in getattr(function, "__annotations__", {}).items():
        try:
            found[name] = eval(hint, space) if isinstance(hint, str) else hint
        except Exception:
            continue
    return found


def _matches(value: Any, hint: Any) -> bool:
    """Whether a config value (plain Python, resolved) can be what ``hint`` declares; a
    ``_target_`` node fits any hint, its own arguments judged by :func:`check_types`."""
    if isinstance(value, dict) and "_target_" in value:
        return True
    if typing.get_origin(hint) is typing.Annotated:
        return _matches(value, hint.__origin__)
    if hint is Any or isinstance(hint, typing.TypeVar | str | typing.ForwardRef):
        return True
    if hint is None or hint is type(None):
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, Num) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint in (Path, os.PathLike) or (inspect.isclass(hint) and issubclass(hint, Path)):
        return isinstance(value, str | Path)
    sequence = origin or hint
    if sequence in (list, tuple, abc.Sequence, abc.Iterable, abc.Collection, abc.MutableSequence):
        if not isinstance(value, list | tuple):
            return False
        if sequence is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(map(_matches, value, args))
        return not args or all(_matches(v, args[0]) for v in value)
    if sequence in (dict, abc.Mapping, abc.MutableMapping):
        return isinstance(value, dict)
    if inspect.isclass(hint):
        return isinstance(value, hint) or not isinstance(value, str | Num | list | dict)
    return True  # Callable, protocols and the like: not judged from a config value


def describe(hint: Any) -> str:
    """``hint`` in a user's words, leaving out types a config cannot hold (Tensor, Accelerator)."""
    if typing.get_origin(hint) is typing.Annotated:
        return describe(hint.__origin__)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        literals = [
            v for a in args if typing.get_origin(a) is typing.Literal for v in typing.get_args(a)
        ]
        parts = [
            describe(a)
            for a in args
            if a is not type(None) and typing.get_origin(a) is not typing.Literal
        ]
        if literals:
            parts.insert(0, describe(typing.Literal[tuple(literals)]))
        parts = list(dict.fromkeys(p for p in parts if p))
        text = " or ".join(parts) if parts else "a value"
        return text + (" or null" if type(None) in args else "")
    if origin is typing.Literal:
        return "one of " + ", ".join(dict.fromkeys(str(a) for a in args))
    named = {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "a string",
        Path: "a path",
    }
    if hint in named:
        return named[hint]
    if (origin or hint) is abc.Callable:  # a config holds these as nodes Hydra instantiates
        return "a {_target_: ...} node"
    sequence = origin or hint
    if sequence in (list, tuple, abc.Sequence, abc.Iterable, abc.Collection):
        if sequence is tuple and len(args) > 1 and args[-1] is not Ellipsis:
            return f"a list of {len(args)} values ({', '.join(describe(a) for a in args)})"
        inner = describe(args[0]) if args else ""
        return f"a list of {_plural(inner)}" if inner else "a list"
    if sequence in (dict, abc.Mapping):
        return "a mapping"
    return ""


def _plural(noun: str) -> str:
    """``an integer or null`` -> ``integers or null``: a list's items in a user's words."""
    return re.sub(
        r"integer|number|string|path|node", r"\g<0>s", noun.removeprefix("an ").removeprefix("a ")
    )


def check_types(node: Any, path: str, read: Reader = imported) -> None:
    """Check every ``_target_`` node under ``node`` (in lists too, named ``key.<index>``)
    against the signature of its target, as ``read`` gives it."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            check_types(item, f"{path}.{index}", read)
        return
    if not isinstance(node, dict):
        return
    target_path = node.get("_target_")
    signature = None
    if isinstance(target_path, str):
        try:
            signature = read(target_path)
        except Exception:
            raise ConfigError(
                f"{path}._target_" if path else "_target_",
                target_path,
                "an importable class or function",
            ) from None
    declared, names, open_ended = signature or ({}, set(), True)
    for key, value in node.items():
        key_path = f"{path}.{key}" if path else str(key)
        if isinstance(value, dict | list):
            check_types(value, key_path, read)
            if isinstance(value, dict) and "_target_" in value:
                continue
        if signature is None or str(key).startswith("_"):
            continue
        if key not in names and not open_ended:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = (
                f"did you mean {close[0]}?"
                if close
                else f"it takes {', '.join(sorted(names)[:8])}{', ...' if len(names) > 8 else ''}"
            )
            raise ConfigError(key_path, value, f"an argument of {target_path} ({hint})")
        hint = declared.get(key)
        if hint is not None and not _matches(value, hint):
            raise ConfigError(key_path, value, describe(hint) or f"what {target_path} takes")
