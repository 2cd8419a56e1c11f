"""The Claude Code archive's statistics that docs/workload.md's agentic defaults rest on.

    python benchmarks/claude_code_statistics.py [../shared/traces/weka_claude_code_traces.tar.xz]

Reads the kv-cache-tester conversations (one JSON file each, sub-agents nested in their parent's
file and left out here: the top-level requests only) and prints, per conversation, its request
count, and per step between consecutive requests, the gap (s), the new tokens (this prompt less
the previous prompt and its output), and the output tokens, each as median, sigma of the log and
p90 of the positive values (the log-normal fit; how many values are zero or negative is printed
beside it: a step's new tokens are negative where the prompt shrank, a context compacted or a
turn dropped); the system and tool prompt tokens (p5, p50, p95) and the median first prompt.
"""

from __future__ import annotations

import itertools
import json
import sys
import tarfile
from pathlib import Path

import numpy as np

DEFAULT = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "weka_claude_code_traces.tar.xz"


def lognormal(values: list[float]) -> str:
    """Median, sigma of the log and p90 of the positive values, and how many were left out."""
    every = np.asarray(values, dtype=float)
    x = every[every > 0]
    zero, negative = int(np.sum(every == 0)), int(np.sum(every < 0))
    return (
        f"median {np.median(x):,.1f}, sigma {np.std(np.log(x)):.2f}, p90 {np.percentile(x, 90):,.0f} "
        f"({len(x):,} positive values; {zero:,} zero and {negative:,} negative left out)"
    )


def main(path: Path) -> None:
    requests, gaps, new_tokens, outputs, system, tools, first = [], [], [], [], [], [], []
    with tarfile.open(path, "r|*") as archive:
        for member in archive:
            if not (member.isfile() and member.name.endswith(".json")):
                continue
            conversation = json.load(archive.extractfile(member))
            steps = [r for r in conversation["requests"] if "in" in r]
            if not steps:
                continue
            requests.append(len(steps))
            system.append(conversation.get("system_tokens", 0))
            tools.append(conversation.get("tool_tokens", 0))
            first.append(steps[0]["in"])
            outputs.extend(r["out"] for r in steps)
            for before, after in itertools.pairwise(steps):
                gaps.append(after["t"] - before["t"])
                new_tokens.append(after["in"] - before["in"] - before["out"])
    print(f"{path.name}: {len(requests):,} conversations")
    print(f"requests per conversation: {lognormal(requests)}")
    print(f"gap between requests (s): {lognormal(gaps)}")
    print(f"new tokens per step: {lognormal(new_tokens)}")
    print(f"output tokens: {lognormal(outputs)}")
    for name, values in (("system prompt tokens", system), ("tool prompt tokens", tools)):
        p5, p50, p95 = np.percentile(values, [5, 50, 95])
        print(f"{name}: p5 {p5:,.0f}, median {p50:,.0f}, p95 {p95:,.0f}")
    print(f"first prompt tokens: median {np.median(first):,.0f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
