"""Hydra's loaded config files kept across composes, for the suite's thousands of composes.

Each ``compose`` reads and parses every YAML file of its defaults tree again, and builds each
one's defaults list: Hydra's ``CachingConfigRepository`` keeps them for one compose only. The
suite composes thousands of times in-process (the ``composed`` fixture, the bad-input cases,
``hpml.cli.composition_error`` before each CLI job), so :func:`install` wraps
``ConfigRepository.load_config`` with a cache of its results, per process; the warm
interpreter (``tests/warm.py``) fills it with every config before it forks a CLI call, which
then composes three times (``hpml.cli``'s check, Hydra's mode, the job) from the cache.

What makes it the same as loading afresh:
- a file's entry is used only while the file's text is what was parsed: a test that rewrites
  a config between two composes (same size, same second) gets the new one;
- every hit returns a deep copy, as a fresh load would be: Hydra edits what it loaded (it pops
  ``defaults``, merges schemas into it);
- only files (``file://``) and installed packages' configs (``pkg://``, which no test edits)
  are kept; structured configs (``ConfigStore``, which code may change at any time) are not.

Hydra also builds, for every node of every defaults tree, the map its interpolated defaults
(``- db: ${oc.env:DB}``) are resolved against: a config of all the choices made so far, though
no node of hpml's has such a default, so the work grows with the square of the tree. The map
is used for nothing else, so :func:`install` builds it only for a node that has one: the same
tree in less time (measured in ``docs/testing.md``).

OmegaConf parses each interpolation string (``${paths.output_dir}/checkpoints``) with its ANTLR
grammar every time the value is read, in a compose's merges and in every resolve: a fifth of a
compose's time. :func:`install` keeps each string's parse tree (:func:`parse`). The tree is
only read by OmegaConf's resolver, and its tokens hold their own input, so one tree serves
every read of the same string; a string that fails to parse is parsed, and fails, every time.

``tests/test_hydra_cache.py`` checks composes against uncached ones. Written here because no
Hydra release caches across composes; the cut is measured in ``docs/testing.md``.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path
from typing import Any

import omegaconf._utils
import omegaconf.base
import omegaconf.grammar_parser
import omegaconf.resolvers.oc
from hydra._internal import defaults_list
from hydra._internal.config_repository import ConfigRepository
from hydra.core.default_element import InputDefault
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigResult

KEPT_SCHEMES = ("file", "pkg")
# (source path, config path) -> (the file's text, or None for a package's, and its result)
_results: dict[tuple[str, str], tuple[str | None, ConfigResult]] = {}
_uncached = ConfigRepository.load_config
_every_map = defaults_list._create_interpolation_map
_unkept_parse = omegaconf.grammar_parser.parse
# the modules that bound OmegaConf's ``parse`` by name at import
PARSE_USERS = (omegaconf.grammar_parser, omegaconf.base, omegaconf._utils, omegaconf.resolvers.oc)


@functools.lru_cache(maxsize=1 << 14)
def parse(value: str, parser_rule: str = "configValue", lexer_mode: str = "DEFAULT_MODE") -> Any:
    """OmegaConf's ``grammar_parser.parse``, one parse tree kept per string, rule and mode."""
    return _unkept_parse(value, parser_rule, lexer_mode)


def _text(source: Any, config_path: str) -> str | None:
    """A file source's text of the config; None for a package's."""
    if source.scheme() != "file":
        return None
    name = os.path.join(source.path, source._normalize_file_name(config_path))
    with open(name, encoding="utf-8") as handle:
        return handle.read()


def load_config(self: ConfigRepository, config_path: str) -> ConfigResult | None:
    """``ConfigRepository.load_config``, from the cache where the file is unchanged."""
    source = self._find_object_source(config_path=config_path, object_type=ObjectType.CONFIG)
    if source is None or source.scheme() not in KEPT_SCHEMES:
        return _uncached(self, config_path)
    key, text = (source.path, config_path), _text(source, config_path)
    kept = _results.get(key)
    if kept is not None and kept[0] == text:
        return copy.deepcopy(kept[1])
    result = _uncached(self, config_path)
    if result is not None:
        _results[key] = (text, copy.deepcopy(result))
    return result


def interpolation_map(overrides: Any, defaults: list[InputDefault], self_added: bool) -> Any:
    """Hydra's map of known choices for resolving a node's interpolated defaults, built only
    where ``defaults`` has one (Hydra reads it for those alone; None is never read)."""
    if not any(isinstance(d, InputDefault) and d.is_interpolation() for d in defaults):
        return None
    return _every_map(overrides, defaults, self_added)


def install() -> None:
    """Keep loaded configs and interpolations' parse trees across composes in this process
    (and the forks it makes), and build interpolation maps only where a node interpolates a
    default."""
    ConfigRepository.load_config = load_config  # type: ignore[method-assign]
    defaults_list._create_interpolation_map = interpolation_map
    for module in PARSE_USERS:
        module.parse = parse  # type: ignore[attr-defined]


def warm(config_dir: Path) -> None:
    """Load every config of ``config_dir`` and of Hydra's own package into the cache, as a
    compose of ``config_dir`` would load them (a process that forks, and never composes)."""
    import hydra
    from hydra._internal.core_plugins.file_config_source import FileConfigSource
    from hydra._internal.core_plugins.importlib_resources_config_source import (
        ImportlibResourcesConfigSource,
    )

    # the sources a compose of config_dir searches, made without Hydra's plugin discovery
    # (which imports every plugin, hpml's among them)
    repository = ConfigRepository.__new__(ConfigRepository)
    repository.sources = [
        ImportlibResourcesConfigSource("hydra", "pkg://hydra.conf"),
        FileConfigSource("main", f"file://{config_dir}"),
    ]
    for folder in (Path(hydra.__file__).parent / "conf", config_dir):
        for file in sorted(folder.rglob("*.yaml")):
            load_config(repository, file.relative_to(folder).with_suffix("").as_posix())


def uninstall() -> None:
    """Load and parse afresh again, every map built (for comparisons), the caches emptied."""
    ConfigRepository.load_config = _uncached  # type: ignore[method-assign]
    defaults_list._create_interpolation_map = _every_map
    for module in PARSE_USERS:
        module.parse = _unkept_parse  # type: ignore[attr-defined]
    _results.clear()
    parse.cache_clear()
