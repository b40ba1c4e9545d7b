"""The bench's arithmetic and plumbing, fed fixed numbers: nothing here measures any time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpml.bench.__main__ import CASES, Case, main, parse_args, select_cases, table
from hpml.bench.harness import (
    CaseResult,
    Measurement,
    Ratio,
    Report,
    Round,
    Settings,
    interleave,
    round_order,
    run_case,
    summarize,
    write_json,
)
from tests.helpers import fresh_python

RATIO = Ratio("throughput (wall)", "tput", "samples/s", "A", "B", goal=0.98)


def rounds_of(pairs: list[tuple[float, float]], key: str = "tput") -> list[Round]:
    return [Round(("A", "B"), {"A": {key: a}, "B": {key: b}}) for a, b in pairs]


def fixed(value: float, log: list[str], name: str):
    def variant() -> Measurement:
        log.append(name)
        return {"tput": value}

    return variant


def fake_case(name: str, a: float, b: float, ran: list[str]) -> Case:
    """A registry entry whose variants return fixed numbers."""

    def case(settings: Settings, bench_dir: Path, report: Report) -> CaseResult:
        ran.append(name)
        log: list[str] = []
        variants = {"A": fixed(a, log, "A"), "B": fixed(b, log, "B")}
        return run_case(name, variants, [RATIO], settings, report)

    return case


def test_grouped_round_order_keeps_each_pair_together_and_alternates_within_it():
    names = ["A1", "A2", "B1", "B2", "C1", "C2"]
    orders = [round_order(names, i, group=2) for i in range(4)]
    assert orders == [
        ["A1", "A2", "B1", "B2", "C1", "C2"],
        ["B2", "B1", "C2", "C1", "A2", "A1"],
        ["C1", "C2", "A1", "A2", "B1", "B2"],
        ["A2", "A1", "B2", "B1", "C2", "C1"],
    ]
    for order in orders:  # the two sides of each ratio are adjacent in every round
        for pair in ("A", "B", "C"):
            first = order.index(f"{pair}1")
            assert abs(first - order.index(f"{pair}2")) == 1


def test_round_order_alternates_which_variant_goes_first():
    assert [round_order(["A", "B"], i) for i in range(4)] == [
        ["A", "B"],
        ["B", "A"],
        ["A", "B"],
        ["B", "A"],
    ]
    assert [round_order(["A", "B", "C"], i)[0] for i in range(4)] == ["A", "B", "C", "A"]


def test_interleave_runs_each_variant_once_per_round_in_rotating_order():
    log: list[str] = []
    reported: list[tuple[int, str, Measurement]] = []
    done = interleave(
        {"A": fixed(1.0, log, "A"), "B": fixed(2.0, log, "B")},
        rounds=3,
        report=lambda i, name, m: reported.append((i, name, m)),
    )
    assert log == ["A", "B", "B", "A", "A", "B"]
    assert [r.order for r in done] == [("A", "B"), ("B", "A"), ("A", "B")]
    assert all(r.measurements == {"A": {"tput": 1.0}, "B": {"tput": 2.0}} for r in done)
    assert [(i, name) for i, name, _ in reported] == [
        (0, "A"),
        (0, "B"),
        (1, "B"),
        (1, "A"),
        (2, "A"),
        (2, "B"),
    ]


def test_interleave_refuses_no_variants():
    with pytest.raises(ValueError, match="at least one variant"):
        interleave({}, rounds=1)


def test_summarize_pairs_ratios_within_rounds():
    # A rises with the load while B falls: per-round ratios, not ratios of medians
    summary = summarize(RATIO, rounds_of([(90.0, 100.0), (50.0, 50.0), (120.0, 100.0)]))
    assert summary.values == pytest.approx((0.9, 1.0, 1.2))
    assert (summary.min, summary.median, summary.max) == pytest.approx((0.9, 1.0, 1.2))
    assert summary.numerator_median == 90.0
    assert summary.denominator_median == 100.0
    assert summary.meets_goal is True


def test_goal_is_judged_on_the_median():
    below = summarize(RATIO, rounds_of([(97.0, 100.0), (99.0, 100.0), (90.0, 100.0)]))
    assert below.median == pytest.approx(0.97)
    assert below.meets_goal is False
    no_goal = Ratio("cpu", "tput", "samples/CPU-s", "A", "B")
    assert summarize(no_goal, rounds_of([(1.0, 1.0)])).meets_goal is None


def test_a_cost_goal_is_met_at_or_below_it_and_printed_so():
    cost = Ratio("wall time", "tput", "s", "A", "B", goal=1.15, at_most=True)
    assert summarize(cost, rounds_of([(1.1, 1.0), (1.2, 1.0), (1.0, 1.0)])).meets_goal is True
    assert summarize(cost, rounds_of([(1.3, 1.0), (1.2, 1.0), (1.0, 1.0)])).meets_goal is False
    rounds = rounds_of([(1.2, 1.0)])
    result = CaseResult(
        "c", Settings(rounds=1), rounds, [summarize(cost, rounds)], (0,) * 3, (0,) * 3, 1.0, {}
    )
    assert "<= 1.15" in table([result]) and "NO" in table([result])


def test_run_case_writes_json_with_rounds_ratios_and_load(tmp_path: Path):
    settings = Settings(rounds=2, steps=3, warmup=1, threads=1)
    result = fake_case("demo", 98.0, 100.0, [])(settings, tmp_path, lambda *_: None)
    path = write_json(result, tmp_path / "results")
    assert path == tmp_path / "results" / "demo.json"
    saved = json.loads(path.read_text())
    assert saved["case"] == "demo"
    assert saved["settings"] == {"rounds": 2, "steps": 3, "warmup": 1, "threads": 1}
    assert [r["order"] for r in saved["rounds"]] == [["A", "B"], ["B", "A"]]
    (ratio,) = saved["ratios"]
    assert ratio["values"] == pytest.approx([0.98, 0.98])
    assert ratio["median"] == pytest.approx(0.98)
    assert ratio["meets_goal"] is True
    assert len(saved["load_avg_before_1m_5m_15m"]) == len(saved["load_avg_after_1m_5m_15m"]) == 3


def test_table_shows_spread_goal_verdict_and_units():
    settings = Settings(rounds=3)
    result = CaseResult(
        "demo",
        settings,
        [],
        [summarize(RATIO, rounds_of([(96.0, 100.0), (97.0, 100.0), (99.0, 100.0)]))],
        (1.0, 2.0, 3.0),
        (1.5, 2.0, 3.0),
        12.0,
        {},
    )
    text = table([result])
    row = next(line for line in text.splitlines() if line.startswith("demo "))
    for cell in (
        "A / B",
        "0.960",
        "0.970",
        "0.990",
        ">= 0.98",
        "NO",
        "97.0 samples/s",
        "100.0 samples/s",
    ):
        assert cell in row
    assert "1.00 2.00 3.00 before, 1.50 2.00 3.00 after" in text


def test_main_runs_selected_cases_once_each_and_writes_their_json(tmp_path: Path, capsys):
    ran: list[str] = []
    cases = {"one": fake_case("one", 99.0, 100.0, ran), "two": fake_case("two", 1.0, 2.0, ran)}
    main(["--case", "two", "--case", "two", "--rounds", "1"], cases, tmp_path)
    assert ran == ["two"]
    assert (tmp_path / "results" / "two.json").is_file()
    assert not (tmp_path / "results" / "one.json").exists()
    main(["--rounds", "1"], cases, tmp_path)
    assert ran == ["two", "one", "two"]
    assert "meets" in capsys.readouterr().out


def test_unknown_case_is_one_line_naming_the_valid_ones(capsys):
    cases = {"overhead": fake_case("overhead", 1.0, 1.0, []), "profiler": CASES["overhead"]}
    with pytest.raises(SystemExit) as exc:
        main(["--case", "overhead", "--case", "nope"], cases)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == "hpml: error: unknown case 'nope' (valid: overhead, profiler)\n"


def test_select_cases_defaults_to_all_in_registry_order():
    assert select_cases(None, {"b": CASES["overhead"], "a": CASES["overhead"]}) == ["b", "a"]


def test_registry_holds_overhead():
    assert "overhead" in CASES


@pytest.mark.parametrize(
    "args", [["--rounds", "0"], ["--steps", "0"], ["--warmup", "-1"], ["--threads", "0"]]
)
def test_counts_out_of_range_are_refused(args: list[str]):
    with pytest.raises(SystemExit):
        parse_args(args)


def test_defaults_are_the_documented_ones():
    args = parse_args([])
    assert (args.case, args.rounds, args.steps, args.warmup, args.threads) == (None, 5, 8, 2, 1)


def test_cli_answers_a_bad_case_without_loading_torch():
    script = (
        "import sys, runpy; sys.argv = ['hpml.bench', '--case', 'nope']\n"
        "try: runpy.run_module('hpml.bench', run_name='__main__')\n"
        "except SystemExit as e: print(e.code, 'torch' in sys.modules)"
    )
    done = fresh_python(script, timeout=60)
    assert done.stdout.split() == ["2", "False"]
    assert done.stderr.count("\n") == 1


SPEEDUP = Ratio("step speed-up", "ms", "ms", "A", "B", speedup=True)


def timed(pairs: list[tuple[float, float]]) -> list[Round]:
    """Rounds of step times in ms: A the baseline, B the variant."""
    return rounds_of(pairs, key="ms")


def test_a_speedup_has_the_in_run_comparisons_interval_and_verdict():
    from hpml.analysis.compare import speedup

    before = [10.0, 12.0, 13.0, 19.0, 12.0, 21.0, 12.0, 11.0, 9.0]
    after = [5.0, 10.0, 5.0, 10.0, 4.0, 10.0, 8.0, 5.0, 5.0]
    summary = summarize(SPEEDUP, timed(list(zip(before, after, strict=True))))
    # n = 9: the 95% interval is the 2nd to the 8th of the sorted per-round ratios
    ratios = sorted(b / a for b, a in zip(before, after, strict=True))
    assert ratios[1] == pytest.approx(1.5) and ratios[7] == pytest.approx(2.6)
    i = summary.interval
    assert (i.median, i.low, i.high, i.n) == pytest.approx((2.0, 1.5, 2.6, 9))
    assert i.coverage == pytest.approx(1 - 20 / 512)
    assert i == speedup(before, after).interval
    assert summary.verdict == "faster" == speedup(before, after).verdict
    assert summary.describe() == "2.000x [1.500, 2.600] faster (n=9)"


def test_a_ratio_not_a_speedup_reads_above_or_below_1_and_one_containing_1_within_noise():
    above = summarize(RATIO, rounds_of([(110.0, 100.0)] * 6))
    assert (above.verdict, above.interval.coverage >= 0.95) == ("above 1", True)
    below = summarize(RATIO, rounds_of([(90.0, 100.0)] * 6))
    assert below.verdict == "below 1"
    slower = summarize(SPEEDUP, timed([(90.0, 100.0)] * 6))
    assert slower.verdict == "slower"
    noise = summarize(SPEEDUP, timed([(90.0, 100.0), (110.0, 100.0)] * 3))
    assert noise.verdict == "within noise"
    assert noise.describe() == "1.000x [0.900, 1.100] within noise (n=6)"


def test_five_rounds_give_min_to_max_and_say_it_covers_94_not_95_percent():
    rounds = timed([(12.0, 10.0), (11.0, 10.0), (13.0, 10.0), (12.5, 10.0), (11.5, 10.0)])
    summary = summarize(SPEEDUP, rounds)
    assert (summary.interval.low, summary.interval.high) == pytest.approx((1.1, 1.3))
    assert summary.interval.coverage == pytest.approx(1 - 2 / 32)
    assert summary.describe() == "1.200x [1.100, 1.300] faster (n=5, 94% interval)"
    result = CaseResult("c", Settings(rounds=5), rounds, [summary], (0,) * 3, (0,) * 3, 1.0, {})
    text = table([result])
    assert "1.200x [1.100, 1.300] faster (n=5, 94% interval)" in text
    assert text.endswith("intervals [min, max] of 5 rounds: 94%, not 95% (--rounds 6 or more)")
    six = timed([(12.0, 10.0)] * 6)
    result = CaseResult(
        "c", Settings(rounds=6), six, [summarize(SPEEDUP, six)], (0,) * 3, (0,) * 3, 1.0, {}
    )
    assert "not 95%" not in table([result]) and "interval)" not in table([result])


def test_one_round_has_no_interval_and_is_within_noise():
    one = timed([(20.0, 10.0)])
    summary = summarize(SPEEDUP, one)
    assert summary.describe() == "2.000x [no interval] within noise (n=1)"
    result = CaseResult("c", Settings(rounds=1), one, [summary], (0,) * 3, (0,) * 3, 1.0, {})
    assert table([result]).endswith("one round gives no interval (--rounds 6 or more for 95%)")


def test_json_ratios_carry_the_interval_and_verdict(tmp_path: Path):
    rounds = timed([(20.0, 10.0), (21.0, 10.0), (19.0, 10.0)])
    result = CaseResult(
        "c", Settings(rounds=3), rounds, [summarize(SPEEDUP, rounds)], (0,) * 3, (0,) * 3, 1.0, {}
    )
    (ratio,) = json.loads(write_json(result, tmp_path).read_text())["ratios"]
    assert (ratio["ci_low"], ratio["ci_high"]) == pytest.approx((1.9, 2.1))
    assert ratio["ci_coverage"] == pytest.approx(0.75)
    assert (ratio["verdict"], ratio["speedup"]) == ("faster", True)
