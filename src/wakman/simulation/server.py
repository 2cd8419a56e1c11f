"""The time model of a GPU server: simple, documented, configurable.

- Admission is first come, first served: the head request waits while its new blocks (plus its
  cached hits that are free, since pinning takes them out of the free queue) exceed the free
  blocks, or while ``max_running`` requests run.
- Prefill runs on one lane, one request at a time, at ``prefill_tokens_per_s`` over the uncached
  prompt tokens plus ``prefill_overhead_s``; the first token comes when it ends.
- Decode produces ``decode_tokens_per_s`` tokens per second per running request (continuous
  batching keeps per-request speed roughly flat up to the batch limit).

Defaults describe one 8B-parameter model on one H100-class GPU: prefill ~10k tokens/s, decode
~40 tokens/s per sequence at moderate batch, up to 64 concurrent sequences; they make 1.5
requests/s of the generated workloads busy but stable, so queueing reflects cache misses.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerModel:
    prefill_tokens_per_s: float = 10_000.0
    prefill_overhead_s: float = 0.005
    decode_tokens_per_s: float = 40.0
    max_running: int = 64

    def __post_init__(self) -> None:
        if self.prefill_tokens_per_s <= 0 or self.decode_tokens_per_s <= 0 or self.max_running < 1:
            raise ValueError("server model: throughputs must be > 0 and max_running >= 1")

    def prefill_s(self, uncached_tokens: int) -> float:
        return self.prefill_overhead_s + uncached_tokens / self.prefill_tokens_per_s

    def decode_s(self, tokens: float) -> float:
        return tokens / self.decode_tokens_per_s
