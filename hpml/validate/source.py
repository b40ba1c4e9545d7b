"""A ``_target_``'s signature read from its source file, importing nothing.

Importing hpml's datamodules, models and callbacks imports Lightning (seconds), and the Trainer
is Lightning's own; their parameters and hints are in their source all the same. So a config is
judged by what the source declares before anything heavy loads. What cannot be read for certain
(a dataclass's generated ``__init__``, several bases, a name from a module not yet imported) is
left unknown, so this reading refuses a subset of what importing the targets refuses, never more.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

from hpml.validate.signatures import Signature


class Unknown(Exception):
    """What the source alone cannot tell."""


@functools.cache
def module_file(name: str) -> Path | None:
    """The source file of module ``name``, found without importing it or its packages."""
    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name is found, not imported
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not spec.submodule_search_locations:
        return Path(spec.origin) if not rest and spec.origin else None
    folder = Path(spec.submodule_search_locations[0]).joinpath(*rest)
    for path in (folder / "__init__.py", folder.with_suffix(".py")):
        if path.is_file():
            return path
    return None


@functools.cache
def parsed(module: str) -> ast.Module:
    """Module ``module``'s syntax tree, parsed once per process."""
    path = module_file(module)
    if path is None or path.suffix != ".py":
        raise Unknown(module)
    return ast.parse(path.read_text())


def absolute(module: str, node: ast.ImportFrom) -> str:
    """The module an ``import from`` in ``module`` names, relative ones resolved."""
    path = module_file(module)
    is_package = path is not None and path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    return importlib.util.resolve_name("." * node.level + (node.module or ""), package)


@functools.cache
def bindings(module: str) -> dict[str, ast.AST]:
    """Each name ``module`` binds at its top level, to the statement that binds it last (as
    Python would)."""
    found: dict[str, ast.AST] = {}
    for node in parsed(module).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found.update((t.id, node) for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            found.update((a.asname or a.name.split(".")[0], node) for a in node.names)
    return found


def binding(module: str, name: str) -> ast.AST:
    """The top-level statement of ``module`` that binds ``name``."""
    found = bindings(module).get(name)
    if found is None:
        raise Unknown(f"{module}.{name}")
    return found


def definition(module: str, name: str) -> tuple[str, ast.ClassDef | ast.FunctionDef]:
    """The class or function ``name`` of ``module``, through the imports that re-export it."""
    node = binding(module, name)
    if isinstance(node, ast.ClassDef | ast.FunctionDef):
        return module, node
    if isinstance(node, ast.ImportFrom):
        alias = next(a for a in node.names if (a.asname or a.name) == name)
        return definition(absolute(module, node), alias.name)
    raise Unknown(f"{module}.{name}")


def value(module: str, name: str) -> Any:
    """The object ``name`` stands for in ``module``, from modules already imported only."""
    loaded = vars(sys.modules[module]) if module in sys.modules else {}
    if name in loaded:
        return loaded[name]
    try:
        node = binding(module, name)
    except Unknown:
        if name in vars(builtins):
            return vars(builtins)[name]
        raise
    if isinstance(node, ast.Import):
        alias = next(a for a in node.names if (a.asname or a.name.split(".")[0]) == name)
        full = alias.name if alias.asname else alias.name.split(".")[0]
        if full in sys.modules:
            return sys.modules[full]
    elif isinstance(node, ast.ImportFrom):
        alias = next(a for a in node.names if (a.asname or a.name) == name)
        return value(absolute(module, node), alias.name)
    elif isinstance(node, ast.Assign | ast.AnnAssign):
        return evaluate(module, node.value)
    raise Unknown(f"{module}.{name}")


def evaluate(module: str, expression: ast.expr) -> Any:
    """An annotation (or a type alias) of ``module``, its names looked up as :func:`value`."""
    names = {n.id for n in ast.walk(expression) if isinstance(n, ast.Name)}
    space = {name: value(module, name) for name in names}
    code = compile(ast.Expression(expression), f"<{module}>", "eval")
    return eval(code, {"__builtins__": {}}, space)


def arguments(module: str, function: ast.FunctionDef) -> Signature:
    """The hints, names and ``**kwargs`` of one function; a hint that cannot be evaluated
    without importing is left out, as :func:`hpml.validate.signatures.hints` leaves out one
    that does not resolve."""
    args = function.args
    typed: dict[str, Any] = {}
    names: set[str] = set()
    for arg in args.posonlyargs + args.args + args.kwonlyargs:
        if arg.arg == "self":
            continue
        names.add(arg.arg)
        if arg.annotation is not None:
            try:
                annotation = arg.annotation
                if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
                    annotation = ast.parse(annotation.value, mode="eval").body
                typed[arg.arg] = evaluate(module, annotation)
            except Exception:
                continue
    return typed, names, args.kwarg is not None


def read(module: str, node: ast.ClassDef | ast.FunctionDef) -> Signature:
    """A function's arguments, or a class's ``__init__`` arguments with those of the bases it
    hands ``**kwargs`` to, the most derived first (one base each; more: left open)."""
    if isinstance(node, ast.FunctionDef):
        return arguments(module, node)
    typed: dict[str, Any] = {}
    names: set[str] = set()
    while True:
        init = next(
            (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
            None,
        )
        assigned = any(
            isinstance(n, ast.Assign | ast.AnnAssign)
            and "__init__" in {t.id for t in ast.walk(n) if isinstance(t, ast.Name)}
            for n in node.body
        )
        if init is None and (node.decorator_list or assigned):
            raise Unknown(node.name)  # a dataclass's (or attrs') generated __init__, or a bound one
        if init is not None:
            found, own, open_ended = arguments(module, init)
            typed = {**found, **typed}
            names |= own
            if not open_ended:
                return typed, names, False
        if len(node.bases) != 1 or node.keywords:
            return typed, names, True
        base = node.bases[0]
        if not isinstance(base, ast.Name) or base.id == "object":
            return typed, names, True
        try:
            module, node = definition(module, base.id)
        except Unknown:
            return typed, names, True  # a base from elsewhere (an attribute): left open
        if isinstance(node, ast.FunctionDef):
            return typed, names, True


def unread(path: str) -> Signature | None:
    """The imported signature of ``_target_`` ``path`` where :func:`signature` cannot read its
    source, None where it can (what it read is judged already)."""
    from hpml.validate.signatures import imported

    return imported(path) if signature(path) is None else None


def signature(path: str) -> Signature | None:
    """What the source of ``_target_`` ``path`` declares, or None where it cannot be read."""
    module, _, name = path.rpartition(".")
    try:
        return read(*definition(module, name))
    except (Unknown, SyntaxError, OSError, RecursionError, ValueError, ImportError):
        return None
