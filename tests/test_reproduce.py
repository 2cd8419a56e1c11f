"""`wakman reproduce --quick` end to end: every output present, results.json checked against
independent statements of what it claims, and a report that prints only what the run holds."""

from __future__ import annotations

import copy
import csv
import errno
import json
import statistics
import sys

import pytest
from typer.testing import CliRunner

from wakman.cli.main import app
from wakman.experiments import reproduce as reproduce_module
from wakman.experiments import summary as summary_module
from wakman.experiments.report import TITLE, render_markdown
from wakman.experiments.reproduce import Plan, Results
from wakman.experiments.summary import summarize
from wakman.traces.stats import compute_stats
from wakman.workload import MIXES, build_config, generate_requests

ONLINE = ("lru", "s3fifo", "wakman", "wakman-plus", "chain-lru")
FIGURES = ("figure1.png", "figure3.png", "map.png", "decisions.png")
OUTPUTS = ("results.json", "table1.csv", "results.md", *FIGURES)  # what a run writes in --out


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    result = CliRunner().invoke(app, ["reproduce", "--quick", "--out", str(out), "--jobs", "2"])
    assert result.exit_code == 0, result.output
    return out, json.loads((out / "results.json").read_text())


def test_every_output_is_written(quick_run):
    out, _ = quick_run
    for name in OUTPUTS:
        assert (out / name).stat().st_size > 100, name
    report = (out / "results.md").read_text()
    for figure in FIGURES:
        assert f"({figure})" in report


def test_every_mix_is_present_with_every_policy(quick_run):
    _, payload = quick_run
    assert [m["name"] for m in payload["mixes"]] == [p.name for p in MIXES]
    for m in payload["mixes"]:
        assert len(m["fractions"]) == 3 and abs(sum(m["fractions"]) - 1) < 1e-9
        assert set(m["hit_rate"]) == {*ONLINE, "belady", "infinite"}


def test_belady_and_infinite_bound_the_online_policies(quick_run):
    _, payload = quick_run
    for m in payload["mixes"]:
        rates = m["hit_rate"]
        assert max(rates[p] for p in ONLINE) <= rates["belady"] + 1e-12, m["name"]
        assert rates["belady"] <= rates["infinite"] + 1e-12, m["name"]


def test_the_infinite_ceiling_against_the_trace_statistics(quick_run):
    """Serve mode's infinite cache never beats the timeless ceiling of the trace statistics (every
    block cached the moment its request arrives), and equals it on single-turn traffic, where no
    request waits for another's output: a second computation, through the stack-distance scan."""
    _, payload = quick_run
    plan = payload["plan"]
    for m in payload["mixes"][:3]:
        reqs = generate_requests(
            build_config(preset=m["name"], duration_s=plan["duration_s"]), seed=plan["seed"]
        )
        assert len(reqs) == m["requests"]
        ceiling = compute_stats(reqs, lru_curve=False).infinite_token_hit_ratio
        assert m["hit_rate"]["infinite"] <= ceiling + 1e-12, m["name"]
        if m["fractions"] == [1.0, 0.0, 0.0]:
            assert m["hit_rate"]["infinite"] == pytest.approx(ceiling, abs=1e-12)


def test_regret_summary_matches_the_table(quick_run):
    out, payload = quick_run
    with open(out / "table1.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 20
    table = [{"hit_rate": {p: float(r[p]) for p in (*ONLINE, "belady", "infinite")}} for r in rows]
    s = payload["summary"]
    for policy in ONLINE:
        regrets = [
            100 * (max(r["hit_rate"]["lru"], r["hit_rate"]["s3fifo"]) - r["hit_rate"][policy]) for r in table
        ]
        assert s["policies"][policy]["mean_regret_points"] == pytest.approx(statistics.mean(regrets))
        assert s["policies"][policy]["max_regret_points"] == pytest.approx(max(regrets))
    assert s["lru_wins"] == sum(r["hit_rate"]["lru"] > r["hit_rate"]["s3fifo"] for r in table)
    assert s["s3fifo_wins"] == sum(r["hit_rate"]["lru"] < r["hit_rate"]["s3fifo"] for r in table)
    assert s["lru_wins"] + s["s3fifo_wins"] + s["static_ties"] == 20
    runs = [
        flag
        for m in payload["mixes"]
        for flags in (m["saturated"], *m.get("saturated_by_capacity", {}).values())
        for flag in flags.values()
    ]
    assert (s["saturated_runs"], s["serve_runs"]) == (sum(runs), len(runs))
    # every serve-mode run at every capacity says whether it kept up, Belady's included (its gap
    # figures use it): at the other capacities the online policies and Belady
    for m in payload["mixes"]:
        for capacity, flags in m.get("saturated_by_capacity", {}).items():
            assert set(flags) == set(m["by_capacity"][capacity]) - {reproduce_module.HINT_MODE}
    assert s["serve_runs"] == 20 * (7 + 6 * len(payload["plan"]["other_capacities"]))


def test_new_policy_summary_by_hand():
    """Two mixes at one capacity with round numbers: gains +2 and -1 points over the better static
    policy, gaps to Belady 10 and 5 points: mean gain 0.5, 0.5 / 7.5 of the gap closed, one mix more
    than half a point below; the report says the goal is missed and quotes the numbers."""
    rates = [
        {"lru": 0.50, "s3fifo": 0.40, "chain-lru": 0.52, "belady": 0.60},
        {"lru": 0.30, "s3fifo": 0.35, "chain-lru": 0.34, "belady": 0.40},
    ]
    mixes = [{"name": f"m{i}", "by_capacity": {"100": r}} for i, r in enumerate(rates)]
    got = summary_module.new_policy_summary(mixes, "chain-lru")["100"]
    assert got["mean_gain_points"] == pytest.approx(0.5)
    assert got["mean_gap_to_belady_points"] == pytest.approx(7.5)
    assert got["gap_closed_pct"] == pytest.approx(100 * 0.5 / 7.5)
    assert (got["worst_mix"], got["worst_gain_points"]) == ("m1", pytest.approx(-1.0))
    assert got["mixes_over_half_point_below"] == ["m1"]
    from wakman.experiments.report import _new_policy_section

    payload = {"real_traces": [], "mixes": mixes, "plan": {"capacity": 100}}
    text = _new_policy_section(payload, "chain-lru", {"100": got})
    assert "met at no capacity" in text and "+0.50" in text and "m1 (-1.00)" in text
    assert "saturated" not in text.split("\n\n")[0]
    # m1's run saturated the modelled server: the verdict and the table say so where they quote it
    mixes[1]["saturated"] = {"chain-lru": True}
    text = _new_policy_section(payload, "chain-lru", {"100": got})
    assert "m1 (saturated server) -1.00" in text and "m1 (-1.00, saturated server)" in text
    assert "1 of the mixes at 100 blocks" in text


def _gap_rows(*leads: float) -> list[dict]:
    return [
        {
            "name": f"gap{g}-single-multi-50",
            "group": "ablation-gap-single-multi-50",
            "hit_rate": {"lru": 0.5 + lead / 100, "s3fifo": 0.5},
        }
        for g, lead in zip((30, 120, 600), leads, strict=True)
    ]


def test_the_gap_sentence_names_every_change_of_winner():
    """The gap sentence reads all the gaps, not only the first and the last (LRU, S3-FIFO, LRU read
    "ahead at every gap"), and a tie is a tie, not an S3-FIFO win."""
    from wakman.experiments.report import _gap_sentence

    assert "leaves LRU ahead at every gap" in _gap_sentence({"ablations": _gap_rows(2, 1, 3)})
    assert "from LRU to S3-FIFO" in _gap_sentence({"ablations": _gap_rows(2, -1, -3)})
    mixed = _gap_sentence({"ablations": _gap_rows(2, -1, 2)})
    assert "more than once" in mixed and "(LRU, S3-FIFO, LRU)" in mixed and "every gap" not in mixed
    assert "tie" in _gap_sentence({"ablations": _gap_rows(2, 0, -3)})


def test_ties_are_no_ones_win():
    """Equal hit rates are a tie everywhere the report counts wins (they were S3-FIFO's)."""
    from wakman.experiments.regret import static_winner

    assert static_winner({"lru": 0.5, "s3fifo": 0.5}) == "tie"
    assert static_winner({"lru": 0.5005, "s3fifo": 0.5}, tie_points=0.1) == "tie"
    assert static_winner({"lru": 0.502, "s3fifo": 0.5}, tie_points=0.1) == "lru"
    rates = [(0.5, 0.4), (0.4, 0.4), (0.3, 0.4), (0.4, 0.4)]
    others = {"wakman": 0.4, "wakman-plus": 0.4, "chain-lru": 0.4, "belady": 0.6, "infinite": 0.7}
    mixes = [
        {"name": f"m{i}", "hit_rate": {"lru": a, "s3fifo": b, **others}, "by_capacity": {}}
        for i, (a, b) in enumerate(rates)
    ]
    s = summarize(mixes)
    assert (s["lru_wins"], s["s3fifo_wins"], s["static_ties"]) == (1, 1, 2)


def test_verdicts_print_what_they_decide():
    """A value decided on one side of a goal is never printed on the other side of it or on it."""
    from wakman.experiments.regret import beside
    from wakman.experiments.report import _compare, _shortfall

    assert beside(2.996, 3.0) == "+2.996" and beside(3.004, 3.0) == "+3.004" and beside(2.5, 3.0) == "+2.50"
    assert beside(2.9999999, 3.0) == "+2.9999999"  # past six decimals too
    assert beside(-0.5004, -0.5) == "-0.5004" and beside(29.96, 30.0, 1, "") == "29.96"
    assert _compare(0.7201, 0.7204) == "equal to" and _compare(0.71, 0.72) == "lower than"
    v = {
        "mean_gain_points": 2.996,
        "gap_closed_pct": 29.96,
        "mean_gap_to_belady_points": 10.0,
        "worst_mix": "m",
        "worst_gain_points": -0.5004,
    }
    assert _shortfall(v) == "mean gain +2.996, 29.96 % of the gap closed, m -0.5004"
    # serve mode: Belady (optimal in cache mode only) can fall behind the better static policy
    behind = {**v, "gap_closed_pct": None, "mean_gap_to_belady_points": -1.0}
    assert "Belady 1.00 points behind the better static policy" in _shortfall(behind)


def test_a_hit_rate_that_is_not_a_number_is_refused():
    """A NaN passes every "never below" check (it compares false) and vanishes from max(): refused."""
    rates = {p: 0.5 for p in ("lru", "s3fifo", "wakman", "wakman-plus", "chain-lru", "belady", "infinite")}
    with pytest.raises(ValueError, match="m0: the hit rate of wakman-plus is not a finite number"):
        summarize([{"name": "m0", "hit_rate": {**rates, "wakman-plus": float("nan")}, "by_capacity": {}}])


def test_worst_losses_by_hand_and_a_mix_that_hits_nothing():
    """Worst relative losses by hand: LRU's 0.40 against S3-FIFO's 0.50 is 20 %; a mix where the
    rival hits nothing, or where the policy is not behind, has no loss and is left out (the first
    divided by zero, the second made a gain the worst "loss"), n/a where every mix is such."""
    mixes = [
        {"hit_rate": {"lru": 0.40, "s3fifo": 0.50}},
        {"hit_rate": {"lru": 0.60, "s3fifo": 0.45}},
        {"hit_rate": {"lru": 0.0, "s3fifo": 0.0}},
        {"hit_rate": {"lru": 0.1, "s3fifo": 0.0}},
    ]
    assert summary_module.worst_loss_pct(mixes, "lru", "s3fifo") == pytest.approx(20.0)
    assert summary_module.worst_loss_pct(mixes[:2], "s3fifo", "lru") == pytest.approx(25.0)
    assert summary_module.worst_loss_pct(mixes, "s3fifo", "lru") == pytest.approx(100.0)
    assert summary_module.worst_loss_pct(mixes[2:], "lru", "s3fifo") is None
    assert summary_module.worst_loss_pct(mixes[2:], "s3fifo", "lru") == pytest.approx(100.0)
    # a policy ahead or level on every mix has no loss (the largest "loss" was a gain: -10 %)
    ahead = [{"hit_rate": {"lru": 0.55, "s3fifo": 0.50}}, {"hit_rate": {"lru": 0.5, "s3fifo": 0.5}}]
    assert summary_module.worst_loss_pct(ahead, "lru", "s3fifo") is None
    assert summary_module.worst_loss_pct(ahead, "s3fifo", "lru") == pytest.approx(100 * 0.05 / 0.55)
    from wakman.experiments.report import _pct

    assert _pct(None, 1) == "n/a" and _pct(-0.01, 1) == "0.0 %"


def test_hint_mode_is_chain_lru_told_each_session(quick_run):
    """Hint mode's column is chain-lru in session mode told each session's end at 0 s (a direct run
    through the simulator), it differs from hash-only chain-lru where sessions end, and the summary
    and the report quote it against the same goal."""
    from wakman.simulation import simulate as simulate_static

    _, payload = quick_run
    plan, label = payload["plan"], reproduce_module.HINT_MODE
    differs = 0
    for m in payload["mixes"][:4]:
        reqs = generate_requests(
            build_config(preset=m["name"], duration_s=plan["duration_s"]), seed=plan["seed"]
        )
        for capacity, rates in m["by_capacity"].items():
            told = simulate_static(
                reqs, "chain-lru", int(capacity), policy_params={"sessions": True}, session_ends_after_s=0.0
            )
            assert rates[label] == pytest.approx(told.hit_rate, abs=1e-12), (m["name"], capacity)
            differs += rates[label] != rates["chain-lru"]
    assert differs, "told ends changed nothing: the hints did not reach the policy"
    assert payload["summary"]["hint_mode"][label] == summary_module.new_policy_summary(
        payload["mixes"], label
    )
    text = render_markdown(payload, figures=set())
    section = text.split(f"## Hint mode ({label})")[1].split("\n## ")[0]
    gain = payload["summary"]["hint_mode"][label][str(plan["capacity"])]["mean_gain_points"]
    assert f"{gain:+.2f}" in section and "mooncake: no session ids" in section


def test_quick_makes_decisions(quick_run):
    """--quick traces outlast the managers' first decision, so paper mode can differ from LRU."""
    _, payload = quick_run
    first = payload["adaptive"]["wakman"]["first_decision_s"]
    assert payload["plan"]["duration_s"] > first
    assert payload["decisions_example"]["decisions"], "no decision in the run"
    assert any(m["hit_rate"]["wakman"] != m["hit_rate"]["lru"] for m in payload["mixes"])


def test_the_map_covers_its_grid(quick_run):
    _, payload = quick_run
    plan = payload["plan"]
    cells = payload["map"]
    expected = {
        (axis, v, c) for axis, values in plan["map_values"] for v in values for c in plan["map_capacities"]
    }
    assert {(c["axis"], c["value"], c["capacity"]) for c in cells} == expected
    for c in cells:
        lead = 100 * (c["hit_rate"]["lru"] - c["hit_rate"]["s3fifo"])
        assert c["lead_points"] == pytest.approx(lead)
        assert c["winner"] == ("lru" if lead > 0.1 else "s3fifo" if lead < -0.1 else "tie")  # the map's ties


def _with(payload: dict, **rates: float) -> dict:
    """``payload`` with every mix's hit rate of each named policy set, the summary recomputed."""
    changed = copy.deepcopy(payload)
    for m in changed["mixes"]:
        m["hit_rate"].update(rates)
    changed["summary"] = summarize(changed["mixes"])
    return changed


def test_the_report_states_only_what_the_run_holds(quick_run):
    _, payload = quick_run
    text = render_markdown(payload, figures=set())
    assert "repeated at none" not in text and "at  blocks" not in text
    assert "claude-code" not in text  # no Claude Code row in --quick: no footnote about it
    assert "![" not in text and "not drawn" in text
    # paper mode worse than both static policies everywhere: the report must say so, not the opposite
    worse = render_markdown(_with(payload, wakman=0.0), figures=set())
    line = next(x for x in worse.splitlines() if x.startswith("- **WAKMan (paper mode)**"))
    assert "is higher than LRU's" in line and "lower than" not in line
    better = render_markdown(_with(payload, wakman=1.0), figures=set())
    line = next(x for x in better.splitlines() if x.startswith("- **WAKMan (paper mode)**"))
    assert "is lower than LRU's" in line and "higher than" not in line
    # wakman-plus behind by more than half a point on every mix: every mix is named
    # an ablation whose server did not keep up is marked where its winner is quoted
    flagged = copy.deepcopy(payload)
    flagged["ablations"][0]["saturated"] = dict.fromkeys(flagged["ablations"][0]["saturated"], True)
    flagged["ablations"][0]["hit_rate"]["s3fifo"] = 1.0  # its winner flips: the flip is quoted
    line = next(x for x in render_markdown(flagged).splitlines() if "Winner flips" in x)
    assert "(saturated server)" in line
    behind = render_markdown(_with(payload, **{"wakman-plus": 0.0}), figures=set())
    line = next(x for x in behind.splitlines() if x.startswith("- **wakman-plus**"))
    assert all(m["name"] in line for m in payload["mixes"])


def test_the_report_states_each_traces_block_size(quick_run):
    """Capacities are in blocks: the header and the capacity note give the generator's block size
    in tokens, and each real trace's row its file's (the Mooncake trace's hashes cover 512 tokens
    each), with the tokens its capacities hold."""
    from wakman.data import BUNDLED_MOONCAKE
    from wakman.traces import read_trace

    _, payload = quick_run
    generated = generate_requests(build_config(duration_s=60.0), seed=1)
    assert payload["workload"]["block_tokens"] == generated[0].block_size
    mooncake = [r for r in payload["real_traces"] if r["trace"] == "mooncake"]
    assert mooncake and all(r["block_tokens"] == [512] for r in mooncake)
    assert {r.block_size for r in read_trace(BUNDLED_MOONCAKE)} == {512}
    text = render_markdown(payload, figures=set())
    cap = payload["plan"]["capacity"]
    assert f"{cap:,} blocks of {generated[0].block_size} tokens" in text
    for row in mooncake:
        assert f"{row['capacity'] * 512:,} tokens" in text
    other = copy.deepcopy(payload)
    other["workload"]["block_tokens"] = 48  # the report follows the run, not a constant
    text = render_markdown(other, figures=set())
    assert f"{cap:,} blocks of 48 tokens" in text and f"{cap:,} blocks ({cap * 48:,} tokens)" in text


def test_the_checked_in_report_is_what_its_results_json_renders():
    """docs/results.md is the report rendered from docs/results.json beside it by the current code
    (a report change without a rerun of `wakman reproduce --docs docs/results.md` left statements
    the data beside them no longer gives)."""
    from pathlib import Path

    docs = Path(__file__).resolve().parents[1] / "docs"
    payload = json.loads((docs / "results.json").read_text())
    written = (docs / "results.md").read_text()
    first = written.splitlines()[2]
    command = first.split("`")[1]  # the command line the report quotes
    assert command.startswith("wakman reproduce") and "--docs docs/results.md" in command
    figures = {name for name in FIGURES if f"({name})" in written}
    assert figures and all((docs / name).is_file() for name in figures)
    assert render_markdown(payload, command, figures) == written


def _ready_results(payload: dict) -> Results:
    """The quick run's results again, for a `run` that returns them at once."""
    return Results(
        plan=Plan.quick(),
        mixes=payload["mixes"],
        ablations=payload["ablations"],
        real=payload["real_traces"],
        map=payload["map"],
        decisions_example=payload["decisions_example"],
    )


def test_reproduce_without_matplotlib_writes_everything_else(quick_run, tmp_path, monkeypatch):
    _, payload = quick_run
    ready = _ready_results(payload)
    monkeypatch.setattr(reproduce_module, "run", lambda plan, jobs, progress: ready)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    result = CliRunner().invoke(app, ["reproduce", "--quick", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "matplotlib is not installed" in result.stderr
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"results.json", "table1.csv", "results.md"} <= written
    assert not any(name.endswith(".png") for name in written)
    assert "![" not in (tmp_path / "out" / "results.md").read_text()


def _earlier_run(folder, report: str | None = None) -> None:
    """An earlier run's outputs in ``folder``, each holding a marker; with ``report``, what --docs
    wrote instead: that report and the figures and results.json beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in OUTPUTS:
        if report is None or name.endswith(".png"):
            (folder / name).write_text(f"earlier {name}\n")
    (folder / "results.json").write_text(json.dumps({"plan": {}, "mixes": [], "summary": {}, "earlier": 1}))
    if report is not None:
        (folder / report).write_text(f"{TITLE}\nearlier report\n")


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("where", ["out-only", "docs-beside", "docs-in-out"])
def test_a_failure_while_writing_replaces_no_output_and_a_success_replaces_them_all(
    quick_run, tmp_path, monkeypatch, where
):
    """An earlier run's outputs in --out (and beside --docs): a figure that fails (a full disk)
    after results.json, table1.csv and a first figure were written gives one line and exit code 2,
    and leaves every earlier file as it was, nothing added, no temporary file. The same run once
    the figures draw replaces every one of them (with --docs inside --out, its report wins)."""
    _, payload = quick_run
    ready = _ready_results(payload)
    monkeypatch.setattr(reproduce_module, "run", lambda plan, jobs, progress: ready)
    root = tmp_path / "root"
    out, docs = root / "out", None
    _earlier_run(out)
    if where == "docs-beside":
        docs = root / "docs" / "report.md"
        _earlier_run(docs.parent, report=docs.name)
    elif where == "docs-in-out":
        docs = out / "results.md"
        docs.write_text(f"{TITLE}\nearlier report\n")
    before = _files(root)
    args = ["reproduce", "--quick", "--out", str(out)] + (["--docs", str(docs)] if docs else [])

    from wakman.experiments import figures

    drawn = figures.write_figures

    def full_disk(payload, folder):
        (folder / "figure1.png").write_bytes(b"drawn")
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "figure3.png"))

    monkeypatch.setattr(figures, "write_figures", full_disk)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "No space left on device" in result.stderr and "Traceback" not in result.output
    assert _files(root) == before

    monkeypatch.setattr(figures, "write_figures", drawn)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    after = _files(root)
    assert set(after) == set(before)  # no temporary file left
    assert all(after[name] != before[name] for name in after)
    assert {"plan", "mixes", "summary"} <= json.loads(after["out/results.json"]).keys()
    if docs is not None:
        assert f"--docs {docs}" in docs.read_text()
        if docs.parent != out:
            assert after["docs/results.json"] == after["out/results.json"]
            assert "--docs" not in (out / "results.md").read_text()


def test_the_archive_stage_gives_each_policys_own_run(tmp_path, monkeypatch):
    """The archive stage (read once, shared by forked workers, one task per policy for every size,
    Belady's future built once, the infinite ceiling run once) gives, per size, the hit rate of that
    policy's own cache-mode run on the trace; Belady bounds the online policies, infinite bounds it."""
    from wakman.adaptive import simulate
    from wakman.traces import read_trace, write_trace

    traces = tmp_path / "shared" / "traces"
    traces.mkdir(parents=True)
    generated = generate_requests(build_config(preset="mix19-thirds", duration_s=600), seed=11)
    write_trace(generated, traces / "archive.jsonl", "native")
    monkeypatch.setattr(reproduce_module, "CLAUDE_ARCHIVE", "archive.jsonl")
    plan = Plan(
        duration_s=120.0,
        capacity=500,
        other_capacities=(),
        real_capacities=(),
        claude_capacities=(300, 900),
        shared=tmp_path / "shared",
        ablations=(),
        map_values=(),
    )
    rows = [r for r in reproduce_module.run(plan, jobs=2).real if r["trace"] == "claude-code"]
    assert [r["capacity"] for r in rows] == [300, 900]
    reqs = list(read_trace(traces / "archive.jsonl"))
    for row in rows:
        assert row["requests"] == len(reqs) == len(generated)
        for policy in reproduce_module.ALL_POLICIES:
            expected = simulate(reqs, policy, row["capacity"], mode="cache").hit_rate
            assert row["hit_rate"][policy] == pytest.approx(expected, abs=1e-12), (policy, row["capacity"])
        told = simulate(
            reqs,
            "chain-lru",
            row["capacity"],
            mode="cache",
            policy_params={"sessions": True},
            session_ends_after_s=0.0,
        )
        assert row["hit_rate"][reproduce_module.HINT_MODE] == pytest.approx(told.hit_rate, abs=1e-12)
        rates = row["hit_rate"]
        assert max(rates[p] for p in ONLINE) <= rates["belady"] <= rates["infinite"]
    assert rows[0]["hit_rate"]["lru"] < rows[1]["hit_rate"]["lru"]


def test_a_lead_of_exactly_the_tie_is_a_tie():
    """0.201 against 0.2 is 0.10000000000000009 points in floating point: on the map (a tie of 0.1
    point) it counted as a win; and a difference of rounding noise alone is no win either."""
    from wakman.experiments.regret import TIE, static_winner

    assert 100 * (0.201 - 0.2) > 0.1
    assert static_winner({"lru": 0.201, "s3fifo": 0.2}, 0.1) == TIE
    assert static_winner({"lru": 0.2, "s3fifo": 0.201}, 0.1) == TIE
    assert static_winner({"lru": 0.2011, "s3fifo": 0.2}, 0.1) == "lru"
    assert static_winner({"lru": 0.1 + 0.2, "s3fifo": 0.3}) == TIE  # 5.6e-15 points apart
