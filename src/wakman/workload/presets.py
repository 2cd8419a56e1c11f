"""Named workloads: the 20 mixes of the paper's main experiment and the Figure 3 ablations.

A mix is ``[single-turn, multi-turn, agentic]`` fractions of new sessions. The 20 points cover the
simplex from the three pure types to equal thirds: 3 pure types; 3 even pairs (50/50); 6 skewed
pairs (75/25, each order); 3 mixes with one dominant type (60/20/20); 3 with one minor type
(20/40/40); equal thirds; and one extra agentic-heavy point (10/10/80), where LRU and S3-FIFO trade
places. No symmetric design with the centroid has exactly 20 points (3a + 6b + 1 = 20 has no
solution), hence the one extra point where the winner flips.

Ablations (Figure 3): turns per session at 33/33/34 (multi-turn and agentic turns set to a median
of 2..32), input length (every per-turn input: payload, user message, tool result) from 128 to
8192 tokens, and the same two sweeps at 0/50/50. Beyond the paper: the multi-turn human gap
(median 30 s to 10 min) at 50/50 single/multi, the knob that decides whether chat traffic favours
LRU (short gaps) or S3-FIFO (long gaps).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Preset:
    name: str
    mix: tuple[float, float, float]
    overrides: dict[str, str] = field(default_factory=dict)
    group: str = "mix"


def _mixes() -> list[Preset]:
    points: list[tuple[str, tuple[float, float, float]]] = [
        ("pure-single", (1.0, 0.0, 0.0)),
        ("pure-multi", (0.0, 1.0, 0.0)),
        ("pure-agentic", (0.0, 0.0, 1.0)),
        ("single-multi-50", (0.5, 0.5, 0.0)),
        ("single-agentic-50", (0.5, 0.0, 0.5)),
        ("multi-agentic-50", (0.0, 0.5, 0.5)),
        ("single75-multi25", (0.75, 0.25, 0.0)),
        ("multi75-single25", (0.25, 0.75, 0.0)),
        ("single75-agentic25", (0.75, 0.0, 0.25)),
        ("agentic75-single25", (0.25, 0.0, 0.75)),
        ("multi75-agentic25", (0.0, 0.75, 0.25)),
        ("agentic75-multi25", (0.0, 0.25, 0.75)),
        ("single-dominant", (0.6, 0.2, 0.2)),
        ("multi-dominant", (0.2, 0.6, 0.2)),
        ("agentic-dominant", (0.2, 0.2, 0.6)),
        ("single-minor", (0.2, 0.4, 0.4)),
        ("multi-minor", (0.4, 0.2, 0.4)),
        ("agentic-minor", (0.4, 0.4, 0.2)),
        ("thirds", (0.34, 0.33, 0.33)),
        ("agentic-heavy", (0.1, 0.1, 0.8)),
    ]
    return [Preset(f"mix{i:02d}-{name}", mix) for i, (name, mix) in enumerate(points, start=1)]


TURNS = (2, 4, 8, 16, 32)
INPUT_TOKENS = (128, 512, 2048, 8192)
HUMAN_GAP_S = (30, 120, 600)  # multi-turn think time (median seconds) at 50/50 single/multi


def _ablations() -> list[Preset]:
    out = []
    for base, mix in (("thirds", (0.34, 0.33, 0.33)), ("0-50-50", (0.0, 0.5, 0.5))):
        for turns in TURNS:
            out.append(
                Preset(
                    f"turns{turns}-{base}",
                    mix,
                    {
                        "multi_turn.turns.median": str(turns),
                        "agentic.turns.median": str(turns),
                        "multi_turn.turns.max": str(max(64, 4 * turns)),
                        "agentic.turns.max": str(max(100, 4 * turns)),
                    },
                    group=f"ablation-turns-{base}",
                )
            )
        for tokens in INPUT_TOKENS:
            out.append(
                Preset(
                    f"input{tokens}-{base}",
                    mix,
                    {
                        "single_turn.payload.median": str(tokens),
                        "multi_turn.message.median": str(tokens),
                        "agentic.tool_result.median": str(tokens),
                        "single_turn.payload.max": str(max(16384, 4 * tokens)),
                        "multi_turn.message.max": str(max(8192, 4 * tokens)),
                        "agentic.tool_result.max": str(max(4096, 4 * tokens)),
                    },
                    group=f"ablation-input-{base}",
                )
            )
    for gap in HUMAN_GAP_S:
        out.append(
            Preset(
                f"gap{gap}-single-multi-50",
                (0.5, 0.5, 0.0),
                {"multi_turn.gap_s.median": str(gap)},
                group="ablation-gap-single-multi-50",
            )
        )
    return out


MIXES: list[Preset] = _mixes()
ABLATIONS: list[Preset] = _ablations()
PRESETS: dict[str, Preset] = {p.name: p for p in (*MIXES, *ABLATIONS)}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; see `wakman generate --list-presets`") from None
