"""Generation speed: one hour at 1.5 requests/s (the paper's trace), fast and sha256 hashing.
Run: ``python benchmarks/bench_generate.py``. The goal is seconds per trace."""

from __future__ import annotations

import time

from wakman.workload import build_config, generate_requests


def main() -> None:
    print(f"{'preset':<22} {'hash':<7} {'requests':>9} {'blocks':>10} {'seconds':>8}")
    for preset in ("mix01-pure-single", "mix19-thirds", "mix03-pure-agentic"):
        for mode in ("fast", "sha256"):
            cfg = build_config(preset=preset, overrides={"hash": mode})
            start = time.perf_counter()
            reqs = generate_requests(cfg, seed=0)
            seconds = time.perf_counter() - start
            blocks = sum(len(r.block_keys) for r in reqs)
            print(f"{preset:<22} {mode:<7} {len(reqs):>9,} {blocks:>10,} {seconds:>8.2f}")


if __name__ == "__main__":
    main()
