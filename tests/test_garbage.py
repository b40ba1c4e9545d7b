"""hpml.garbage: no full collection while a command starts, full collections again once its job
starts, everything frozen as it ends; outside a command nothing changes."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from hpml import garbage
from tests.conftest import cli_env
from tests.helpers import fresh_python


def make_cycles(count: int) -> list:
    """``count`` two-object reference cycles that stay alive: enough new objects to trigger
    full collections at the default thresholds."""
    kept = []
    for _ in range(count):
        a: list = []
        b = [a]
        a.append(b)
        kept.append(a)
    return kept


@pytest.fixture
def full_collections() -> Iterator[list[int]]:
    """The full collections that ran, one entry each, while the test ran; the collector left as
    it was: its thresholds, and what the worker froze (tests/conftest.py) frozen again."""
    ran: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2:
            ran.append(info["collected"])

    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count() > 0
    gc.callbacks.append(count)
    yield ran
    gc.callbacks.remove(count)
    gc.set_threshold(*thresholds)
    gc.unfreeze()
    gc.collect()  # the test's cycles
    if frozen:
        gc.freeze()


def test_no_full_collection_until_the_job_starts_then_again(full_collections):
    thresholds = gc.get_threshold()
    held = make_cycles(200_000)
    assert full_collections, "the objects made trigger full collections at the default thresholds"
    full_collections.clear()
    with garbage.command():
        held += make_cycles(200_000)
        assert full_collections == []
        garbage.job_started()
        assert gc.get_threshold() == thresholds and gc.get_freeze_count() >= len(held)
        held += make_cycles(200_000)
        assert full_collections, "the job's own objects are collected as usual"
    assert gc.get_threshold() == thresholds


def test_a_command_ending_before_its_job_leaves_the_thresholds_and_freezes(full_collections):
    thresholds = gc.get_threshold()
    made = make_cycles(1000)
    with pytest.raises(SystemExit), garbage.command():
        frozen = gc.get_freeze_count()
        made += make_cycles(1000)
        raise SystemExit(1)  # a refused config
    assert gc.get_threshold() == thresholds and gc.get_freeze_count() >= frozen + 2 * 1000


def test_outside_a_command_a_job_start_changes_nothing(full_collections):
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    unfrozen = make_cycles(1000)  # 2,000 objects a freeze would move into the frozen count
    garbage.job_started()
    # frozen objects another thread lets go leave the count, so it may fall, never grow
    assert gc.get_threshold() == thresholds and gc.get_freeze_count() <= frozen, len(unfrozen)


def test_the_report_commands_hold_full_collections_and_freeze_at_exit(root):
    """A fresh process, as a user starts one: each report command, asked for the last sweep
    of a store that has none, opens the store (importing MLflow: enough objects for several
    full collections), answers with its one line, no full collection having run, and exits
    with what it made frozen."""
    code = (
        "import gc, runpy, sys\n"
        "full = []\n"
        "gc.callbacks.append(lambda p, i: p == 'stop' and i['generation'] == 2 and full.append(1))"
        "\n"
        "for module, args in (('hpml.report', ['--last']), ('hpml.report.roofline', "
        "['--sweep', 'last'])):\n"
        "    sys.argv = [module, *args]\n"
        "    try: runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
        "    except SystemExit as exc:\n"
        "        frozen, imported = gc.get_freeze_count() > 0, 'mlflow' in sys.modules\n"
        "        print(module, exc.code, len(full), frozen, imported)\n"
        "    gc.unfreeze()\n"
    )
    env = cli_env(root)
    done = fresh_python(code, cwd=root, env=env)
    lines = done.stdout.splitlines()
    assert lines == [
        "hpml.report 1 0 True True",
        "hpml.report.roofline 1 0 True True",
    ], done.stderr
    assert done.stderr.count("hpml: error: no sweep") == 2, done.stderr
