"""`wakman reproduce --quick` end to end: every output present and results.json consistent."""

from __future__ import annotations

import csv
import json
import statistics

import pytest
from typer.testing import CliRunner

from wakman.cli.main import app
from wakman.experiments.reproduce import summarize
from wakman.workload import MIXES

ONLINE = ("lru", "s3fifo", "wakman", "wakman-plus")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    result = CliRunner().invoke(app, ["reproduce", "--quick", "--out", str(out), "--jobs", "2"])
    assert result.exit_code == 0, result.output
    return out, json.loads((out / "results.json").read_text())


def test_every_output_is_written(quick_run):
    out, _ = quick_run
    for name in ("results.json", "table1.csv", "results.md", "figure1.png", "figure3.png", "decisions.png"):
        assert (out / name).stat().st_size > 100, name


def test_every_mix_is_present_with_every_policy(quick_run):
    _, payload = quick_run
    assert [m["name"] for m in payload["mixes"]] == [p.name for p in MIXES]
    for m in payload["mixes"]:
        assert len(m["fractions"]) == 3 and abs(sum(m["fractions"]) - 1) < 1e-9
        assert set(m["hit_rate"]) == {"lru", "s3fifo", "wakman", "wakman-plus", "belady", "infinite"}


def test_belady_and_infinite_bound_the_online_policies(quick_run):
    _, payload = quick_run
    for m in payload["mixes"]:
        rates = m["hit_rate"]
        assert max(rates[p] for p in ONLINE) <= rates["belady"] + 1e-12, m["name"]
        assert rates["belady"] <= rates["infinite"] + 1e-12, m["name"]


def test_regret_summary_matches_the_table(quick_run):
    out, payload = quick_run
    with open(out / "table1.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 20
    table = [{"hit_rate": {p: float(r[p]) for p in (*ONLINE, "belady", "infinite")}} for r in rows]
    assert summarize(table) == payload["summary"]
    s = payload["summary"]
    for policy in ONLINE:
        regrets = [
            100 * (max(r["hit_rate"]["lru"], r["hit_rate"]["s3fifo"]) - r["hit_rate"][policy]) for r in table
        ]
        assert s["policies"][policy]["mean_regret_points"] == pytest.approx(statistics.mean(regrets))
        assert s["policies"][policy]["max_regret_points"] == pytest.approx(max(regrets))
    assert s["lru_wins"] + s["s3fifo_wins"] == 20
    assert min(s["policies"][p]["max_regret_points"] for p in ("lru", "s3fifo")) >= 0
