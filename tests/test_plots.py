"""What the figures draw, read back from matplotlib's own objects (each function's figure is caught
where it would be saved): the data a reader sees against the rows it came from."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from wakman.experiments import plots


@pytest.fixture
def drawn(monkeypatch, tmp_path):
    """The figures the plot functions make, kept instead of saved."""
    figures = []

    def keep(fig, path):
        figures.append(fig)
        return path

    from wakman.experiments import figures as report_figures

    monkeypatch.setattr(plots, "save_figure", keep)
    monkeypatch.setattr(report_figures, "save_figure", keep)  # imported there by name
    return figures


def _lines(ax):
    return [line for line in ax.get_lines() if len(line.get_xdata())]


def test_the_live_policy_is_drawn_from_the_start_to_the_end(drawn, tmp_path):
    """One decision at 15 min switching lru to s3fifo in a 30 min run: the live panel shows lru from
    0 to 15 min and s3fifo to 30 min (it drew the choice alone, from 15 min: the switch was lost)."""
    decisions = [
        {"time_s": 900.0, "rates": {"lru": 0.3, "s3fifo": 0.4}, "live_before": "lru", "choice": "s3fifo"}
    ]
    plots.plot_decisions(decisions, tmp_path / "d.png", end_s=1800.0)
    bottom = drawn[0].axes[1]
    (step,) = _lines(bottom)
    labels = [t.get_text() for t in bottom.get_yticklabels()]
    assert list(step.get_xdata()) == [0.0, 15.0, 30.0]
    assert [labels[int(y)] for y in step.get_ydata()] == ["lru", "s3fifo", "s3fifo"]


def test_a_sweep_marks_rejected_sizes_and_leaves_out_unmeasured_ones(drawn, tmp_path):
    """At 5 blocks nothing was measured (left out); at 100 requests were rejected (a hollow marker
    off the line); sizes over a factor of 10 get a log axis; equal policies are drawn one inside
    the other (the later thinner)."""
    rows = [
        {"policy": p, "capacity_blocks": c, "hit_rate": h, "rejected": r, "measured_requests": m}
        for p in ("lru", "wakman")
        for c, h, r, m in ((5, 0.0, 9, 0), (100, 0.5, 3, 40), (1000, 0.3, 0, 50), (5000, 0.6, 0, 50))
    ]
    plots.plot_sweep(rows, tmp_path / "s.png")
    ax = drawn[0].axes[0]
    lru, hollow, wakman, _ = _lines(ax)
    assert list(lru.get_xdata()) == [1000, 5000] and list(hollow.get_xdata()) == [100]
    assert hollow.get_markerfacecolor() == "none"
    assert list(wakman.get_ydata()) == list(lru.get_ydata()) and wakman.get_linewidth() < lru.get_linewidth()
    assert ax.get_xscale() == "log"


def test_an_adaptive_run_without_decisions_plots_its_intervals(drawn, tmp_path):
    """``simulate --policy wakman --plot`` on a run shorter than its first decision draws the interval
    series (it drew empty decision axes)."""
    from typer.testing import CliRunner

    from wakman.cli.main import app
    from wakman.traces import write_trace
    from wakman.workload import build_config, generate_requests

    path = tmp_path / "t.jsonl"
    write_trace(
        generate_requests(build_config(preset="mix19-thirds", duration_s=300), seed=1), path, "native"
    )
    args = [
        "simulate",
        str(path),
        "--policy",
        "wakman",
        "--capacity-blocks",
        "2000",
        "--plot",
        str(tmp_path / "p.png"),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    top, bottom = drawn[0].axes
    assert bottom.get_ylabel() == "mean free blocks" and _lines(top)


def _payload() -> dict:
    """A reproduce payload in miniature: two mixes, one ablation group of two, a map axis of two."""
    rates = {"lru": 0.5, "s3fifo": 0.4, "wakman": 0.5, "wakman-plus": 0.45, "chain-lru": 0.5}
    fresh = dict.fromkeys(rates, False)
    mixes = [
        {"name": f"mix0{i}", "fractions": [1, 0, 0], "hit_rate": rates, "saturated": fresh} for i in (1, 2)
    ]
    ablations = [
        {"name": f"turns{t}-thirds", "group": "ablation-turns-thirds", "hit_rate": rates, "saturated": s}
        for t, s in ((2, fresh), (4, dict.fromkeys(rates, True)))
    ]
    cells = [
        {
            "axis": "agentic-turns",
            "value": v,
            "capacity": 3000,
            "lead_points": 1.0,
            "regret_points": {"wakman": 3.0 * v, "wakman-plus": 0.5},
            "saturated": v == 2,
        }
        for v in (1, 2)
    ]
    return {"mixes": mixes, "ablations": ablations, "map": cells, "plan": {"capacity": 6000, "seed": 0}}


def test_figure1_keeps_equal_regrets_apart(drawn, tmp_path):
    """Four policies at a regret of 0 on a mix: each at its own height (only the last drawn showed)."""
    from wakman.experiments.figures import figure1

    figure1(_payload(), tmp_path / "f.png")
    heights = {tuple(line.get_ydata()) for line in _lines(drawn[0].axes[0])}
    assert len(heights) == 5


def test_figure3_circles_saturated_points_and_the_map_shares_its_regret_scale(drawn, tmp_path):
    """A saturated ablation is circled; the managers' map panels share one colour scale (each had
    its own, so equal colours meant different regrets) and a saturated cell is starred."""
    from wakman.experiments.figures import figure3, figure_map

    figure3(_payload(), tmp_path / "f3.png")
    circles = [line for line in _lines(drawn[0].axes[0]) if line.get_markerfacecolor() == "none"]
    assert circles and all(list(c.get_xdata()) == [4] for c in circles)
    figure_map(_payload(), tmp_path / "map.png")
    images = [ax.get_images()[0] for ax in drawn[1].axes if ax.get_images()]
    assert images[1].get_clim() == images[2].get_clim() == (0.0, 6.0)
    texts = [t.get_text() for t in drawn[1].axes[0].texts]
    assert texts == ["+1.00", "+1.00*"]
