"""A config file that cannot be read (bad YAML, bytes YAML never allows, text cut inside a
character) is one line naming it and what it should be, before Hydra starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpml.errors import config_file_problem
from tests.bad_inputs.harness import assert_names, error_line

CONFIG_DAMAGE = {  # what the file holds, what the line says of it
    "bad_yaml": (b"model: [unclosed\n  lr: : 1\n", "expected ',' or ']', but got ':' at line 2:5"),
    "binary": (b"\x00\x01\x02_target_: x\n", "special characters are not allowed at byte 0"),
    "truncated_utf8": (b'_target_: a\nname: "caf\xc3', "unexpected end of data at byte 22"),
}


@pytest.mark.parametrize("damage", list(CONFIG_DAMAGE))
def test_a_damaged_config_file_is_one_line_naming_it(
    damage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user's experiment file beside conf/ (``--config-dir``), refused before Hydra starts."""
    from hpml.cli import check_args

    content, why = CONFIG_DAMAGE[damage]
    path = tmp_path / "experiment" / "mine.yaml"
    path.parent.mkdir()
    path.write_bytes(content)
    with pytest.raises(SystemExit) as exit_info:
        check_args(["--config-dir", str(tmp_path), "experiment=mine"])
    assert exit_info.value.code == 2
    line = error_line(capsys.readouterr().err)
    assert_names(line, [f"config file {path} cannot be read: {why}", "should be UTF-8 YAML"])


def test_an_error_about_no_file_is_left_to_its_own_message(tmp_path: Path) -> None:
    (tmp_path / "fine.yaml").write_text("a: 1\n")
    assert config_file_problem(KeyError("model"), [tmp_path]) is None
