"""Deterministic token-level generation of single-turn, multi-turn and agentic sessions.

Sessions start as a Poisson process over ``[-warmup_s, duration_s)`` at rate
``rate / E[turns]`` (E[turns] is the mix-weighted mean of each profile's discretised turn count, so
requests arrive at ``rate``); each session's profile is drawn from ``mix``. ``warmup_s = "auto"``
is ``steady_warmup_s``: long enough that the sessions that would have started earlier carry at most
1 % of the requests at time 0 (fewer later), so the trace starts in steady state. A session is
generated whole from its own random stream (``SeedSequence([seed, 1, session index])``; the seed
is 32 bits, ``check_seed``), so it does not depend on the others. (Caveat, kept so that traces
stay as they were: numpy splits an entropy word past 2**32 into 32-bit words, so catalog prompt
1's stream ``[seed, 2**40 + 1]`` is session 256's, and the multi-turn and agentic system prompt
1's are sessions 512's and 768's: those sessions' first tokens repeat the prompt's. Their keys
differ, being chained from other prefixes.)

Turn ``k+1`` arrives ``gap`` seconds after turn ``k``, whatever turn k's answer takes to decode
(it may still be decoding: docs/workload.md, "Turns do not wait for answers"); its prompt is turn
k's prompt, the answer (output tokens) and the new message or tool result, so its block keys
extend turn k's. Requests outside ``[0, duration_s)`` are dropped. Keys come from ``BlockHasher``
over the token ids, as uint64 arrays (8 bytes a key); ``output_keys`` are the blocks decoding fills
(vLLM caches them; the last sampled token has no KV).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from wakman.traces.model import Request
from wakman.workload.config import LogNormal, WorkloadConfig
from wakman.workload.hashing import BlockHasher

LABELS = ("single-turn", "multi-turn", "agentic")
_CATALOG_STREAM = 1 << 40  # seed-sequence offsets keep catalogs apart from sessions
_SYSTEM_STREAMS = {"multi-turn": 2 << 40, "agentic": 3 << 40}


_MAX_LOG = 700.0  # exp of more overflows a float; the value is clipped to max anyway


def draw(rng: np.random.Generator, dist: LogNormal, integer: bool = True) -> float:
    """``exp(N(ln(median), sigma^2))`` clipped to ``[min, max]``; an integer (a length, a turn count)
    is the clipped value rounded (Python's ``round``: halves to even), at least 1."""
    if dist.sigma > 0:
        value = math.exp(min(rng.normal(math.log(dist.median), dist.sigma), _MAX_LOG))
    else:
        value = dist.median
    value = min(max(value, dist.min), dist.max)
    return _as_count(value) if integer else value


def draw_many(rng: np.random.Generator, dist: LogNormal, n: int, integer: bool = True) -> np.ndarray:
    """``n`` draws at once, by ``draw``'s rules (clip, then numpy's rounding: halves to even, at
    least 1), from numpy's vectorized normal (not ``draw``'s stream)."""
    if dist.sigma > 0:
        values = np.exp(np.minimum(rng.normal(math.log(dist.median), dist.sigma, n), _MAX_LOG))
    else:
        values = np.full(n, float(dist.median))
    values = np.clip(values, dist.min, dist.max)
    return np.maximum(1, np.round(values)) if integer else values


WARMUP_FLOOR_S = 1800.0  # the shortest "auto" warm-up (seconds): the fixed warm-up before 2026-12-07
WARMUP_QUANTILE = 0.99  # of the requests' ages: the share an "auto" warm-up covers
_WARMUP_SAMPLE = 20_000  # sessions per profile in the estimate, at most
_WARMUP_TURNS = 1_000_000  # turns per profile in the estimate, at most: fewer sessions if theirs are long
_WARMUP_SEED = 0x7761726D  # the estimate's own stream ("warm"): the same warm-up for every trace seed


def steady_warmup_s(config: WorkloadConfig) -> float:
    """The warm-up (seconds) after which a trace is in steady state: the request age (seconds since
    its session's first request) under which ``WARMUP_QUANTILE`` of all requests fall, over the mix
    (each profile's requests in proportion to its sessions' turns; single-turn requests have age 0),
    rounded up to a minute and at least ``WARMUP_FLOOR_S``. Sessions that would start before it carry
    at most 1 - WARMUP_QUANTILE of the requests at time 0, fewer after. Estimated from
    ``_WARMUP_SAMPLE`` sessions per profile drawn from the config's turn and gap laws, from a stream of
    its own: deterministic, whatever the trace's seed. At most ``_WARMUP_TURNS`` turns a profile (the
    first sessions whose turns fit, one at least), so time and memory stay bounded (about 0.1 s and
    tens of MB) whatever the turn law. A warm-up past the trace's bounds (``check_span``; an age
    past the largest float: inf) is a ValueError naming the gap laws it came from."""
    rng = np.random.default_rng(_WARMUP_SEED)
    ages, weights = [np.zeros(1)], [np.array([config.mix[0]])]  # single-turn: one request, age 0
    profiles = [np.zeros(1, dtype=np.int8)]  # which profile each age is of (an index of LABELS)
    with np.errstate(over="ignore"):  # a huge gap law's sums overflow to inf: checked below
        for profile, fraction, section in (
            (1, config.mix[1], config.multi_turn),
            (2, config.mix[2], config.agentic),
        ):
            if fraction == 0:
                continue
            turns = draw_many(rng, section.turns, _WARMUP_SAMPLE).astype(np.int64)
            turns = turns[: max(1, int(np.searchsorted(np.cumsum(turns), _WARMUP_TURNS, side="right")))]
            sessions = len(turns)
            gaps = draw_many(rng, section.gap_s, int((turns - 1).sum()), integer=False)
            if section is config.agentic:
                long_call = rng.random(len(gaps)) < section.long_call_probability
                gaps += np.where(
                    long_call, draw_many(rng, section.long_call_s, len(gaps), integer=False), 0.0
                )
            later = _running_sums(gaps, turns - 1)
            ages += [np.zeros(sessions), later]  # each session's first request, then its later ones
            weights.append(np.full(sessions + len(later), fraction / sessions))
            profiles.append(np.full(sessions + len(later), profile, dtype=np.int8))
    age, weight, profile_of = np.concatenate(ages), np.concatenate(weights), np.concatenate(profiles)
    order = np.argsort(age, kind="stable")
    share = np.cumsum(weight[order]) / weight.sum()
    at = order[min(len(age) - 1, int(np.searchsorted(share, WARMUP_QUANTILE)))]
    quantile = float(age[at])
    warmup = max(WARMUP_FLOOR_S, 60.0 * math.ceil(quantile / 60.0)) if math.isfinite(quantile) else math.inf
    try:
        config.check_span(warmup)
    except ValueError as exc:
        raise ValueError(_auto_warmup_error(config, warmup, LABELS[profile_of[at]], str(exc))) from None
    return warmup


# the laws a profile's gaps (seconds) are drawn from, by (config section, key)
_GAP_LAWS = {
    "multi-turn": (("multi_turn", "gap_s"),),
    "agentic": (("agentic", "gap_s"), ("agentic", "long_call_s")),
}


def _auto_warmup_error(config: WorkloadConfig, warmup_s: float, profile: str, broken: str) -> str:
    """Why an "auto" warm-up of ``warmup_s`` seconds cannot be (``broken``: ``check_span``'s rule),
    where it came from (the gap laws of ``profile``, that of the request at the quantile, or the
    floor) and what to do about it."""
    if warmup_s <= WARMUP_FLOOR_S:
        return (
            f'warmup_s "auto" is {warmup_s:g} s, its least: {broken}; set warmup_s (--set warmup_s=SECONDS)'
        )
    laws = " plus ".join(
        f"{section}.{key} = {_law_text(getattr(getattr(config, section), key))}"
        for section, key in _GAP_LAWS[profile]
        if key != "long_call_s" or config.agentic.long_call_probability > 0
    )
    return (
        f'warmup_s "auto" came to {warmup_s:.3g} s, the age of {WARMUP_QUANTILE:.0%} of the requests, '
        f"from the {profile} sessions' gap law ({laws}): {broken}; set warmup_s (--set "
        "warmup_s=SECONDS) or narrow that law"
    )


def _law_text(law: LogNormal) -> str:
    """A log-normal law as TOML (``{median=60, sigma=1, min=1, max=inf}``)."""
    return f"{{median={law.median:g}, sigma={law.sigma:g}, min={law.min:g}, max={law.max:g}}}"


def _running_sums(gaps: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each session's running sums of its own gaps (seconds): the ages of its later requests, from
    ``gaps``, the sessions' gaps end to end (``counts`` of them each). Summed within a session only
    (the sessions of one length at a time, as the rows of a matrix), so no session's ages lose
    precision to, or overflow with, the sessions before it."""
    first = np.cumsum(counts) - counts
    out = np.empty_like(gaps)
    for n in np.unique(counts[counts > 0]):
        index = first[counts == n][:, None] + np.arange(n)
        out[index] = np.cumsum(gaps[index], axis=1)
    return out


def _as_count(value: float) -> int:
    """A clipped draw as a length or turn count: Python's ``round`` (halves to even), at least 1."""
    return max(1, round(value))


def expected_turns(dist: LogNormal) -> float:
    """Mean of ``draw(rng, dist)`` (an integer), exactly: the clip's point masses at ``min`` and
    ``max`` (rounded as ``draw`` rounds them), and between them each integer ``k``'s share of the
    log-normal law, ``[k - 1/2, k + 1/2)`` (its ends have no mass). ``max`` is finite (``check``)."""

    if dist.sigma == 0:
        return float(_as_count(min(max(dist.median, dist.min), dist.max)))

    def cdf(x: float) -> float:
        if x <= 0:
            return 0.0
        return 0.5 * (1 + math.erf((math.log(x) - math.log(dist.median)) / (dist.sigma * math.sqrt(2))))

    lo, hi = dist.min, dist.max
    mean = cdf(lo) * _as_count(lo) + (1 - cdf(hi)) * _as_count(hi)
    for k in range(math.floor(lo + 0.5), math.ceil(hi + 0.5) + 1):
        a, b = max(k - 0.5, lo), min(k + 0.5, hi)
        if b > a:
            mean += max(1, k) * (cdf(b) - cdf(a))
    return mean


def zipf_mandelbrot(n: int, s: float, q: float) -> np.ndarray:
    """Probabilities of ranks 1..n: proportional to 1 / (k + q) ** s."""
    weights = 1.0 / (np.arange(1, n + 1) + q) ** s
    return weights / weights.sum()


class Ranks:
    """Draws a rank 0..n-1 with probabilities ``p``: the index numpy's ``Generator.choice(n, p=p)``
    returns from the same generator state (one uniform, searched in p's normalized cumulative sum),
    without choice's checks of ``p`` on every call (about 15 times the cost of the draw)."""

    def __init__(self, p: np.ndarray) -> None:
        self.cdf = p.cumsum()
        self.cdf /= self.cdf[-1]

    def __len__(self) -> int:
        return len(self.cdf)

    def draw(self, rng: np.random.Generator) -> int:
        return int(self.cdf.searchsorted(rng.random(), side="right"))


MAX_SEED = 2**32 - 1  # a seed is one 32-bit word of every stream's entropy


def check_seed(seed: int, name: str = "seed") -> None:
    """A trace's seed is an integer in ``[0, MAX_SEED]``, else a ValueError naming ``name`` (the
    argument, or ``--seed``): numpy splits a larger one into 32-bit words and drops trailing zero
    words, so its streams would be other seeds' (``SeedSequence([2**32 + s, 0])`` is ``[s, 1]``,
    seed s's session 0)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ValueError(f"{name} must be an integer, got {seed!r}")
    if seed < 0:
        raise ValueError(f"{name} must be >= 0, got {seed}")
    if seed > MAX_SEED:
        raise ValueError(
            f"{name} must be at most 2**32 - 1 = {MAX_SEED:,} (numpy would give a larger seed the random "
            f"streams of smaller ones), got {seed:,}"
        )


class WorkloadGenerator:
    def __init__(self, config: WorkloadConfig, seed: int = 0) -> None:
        """The generator of ``config``'s trace for ``seed`` (``check_seed``)."""
        check_seed(seed)
        self.config = config
        self.seed = seed
        self.hasher = BlockHasher(config.hash, config.hash_seed)
        self._catalogs: dict[tuple[str, int], np.ndarray] = {}
        # hashes and keys of a catalog prompt's full blocks: every chain that starts with it has them
        self._catalog_blocks: dict[tuple[str, int], tuple[bytes | None, np.ndarray]] = {}
        st, mt, ag = config.single_turn, config.multi_turn, config.agentic
        self.popularity = {  # which catalog prompt a session starts with
            "single-turn": Ranks(zipf_mandelbrot(st.catalog_size, st.zipf_s, st.zipf_q)),
            "multi-turn": Ranks(zipf_mandelbrot(mt.system_catalog_size, mt.system_zipf_s, mt.system_zipf_q)),
            "agentic": Ranks(zipf_mandelbrot(ag.system_catalog_size, ag.system_zipf_s, ag.system_zipf_q)),
        }
        turns = [1.0, expected_turns(mt.turns), expected_turns(ag.turns)]
        self.mean_turns = float(np.dot(config.mix, turns))
        self.session_rate = config.rate / self.mean_turns  # sessions per second
        self.warmup_s = steady_warmup_s(config) if config.warmup_s == "auto" else float(config.warmup_s)
        config.check_span(self.warmup_s)

    # ------------------------------------------------------------ token material
    def _tokens(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(0, self.config.vocab_size, size=n, dtype=np.int32)

    def catalog_prompt(self, profile: str, index: int) -> np.ndarray:
        """The fixed prompt ``index`` of a profile's catalog: the same tokens in every session."""
        key = (profile, index)
        if key not in self._catalogs:
            offset = _CATALOG_STREAM if profile == "single-turn" else _SYSTEM_STREAMS[profile]
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, offset + index]))
            dist = (
                self.config.single_turn.fixed_prompt
                if profile == "single-turn"
                else getattr(self.config, profile.replace("-", "_")).system_prompt
            )
            self._catalogs[key] = self._tokens(rng, draw(rng, dist))
        return self._catalogs[key]

    def start_chain(self, profile: str, index: int) -> _Chain:
        """A session's chain opened with catalog prompt ``index`` of ``profile``; the hashes of the
        prompt's full blocks are computed once per prompt, not once per session."""
        tokens = self.catalog_prompt(profile, index)
        chain = _Chain(self.hasher, self.config.block_size)
        chain.append(tokens)
        known = self._catalog_blocks.get((profile, index))
        if known is None:
            chain.extend_to(len(tokens) // self.config.block_size)
            self._catalog_blocks[(profile, index)] = (chain.last_hash, chain.keys().copy())
        else:
            chain.start_from(*known)
        return chain

    # ------------------------------------------------------------ sessions
    def session_starts(self) -> tuple[np.ndarray, np.ndarray]:
        """Start times (s) and profile index of every session, in start order."""
        cfg = self.config
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0]))
        span = self.warmup_s + cfg.duration_s
        n = rng.poisson(self.session_rate * span)
        starts = np.sort(rng.uniform(-self.warmup_s, cfg.duration_s, size=n))
        profiles = rng.choice(3, size=n, p=np.asarray(cfg.mix) / sum(cfg.mix))
        return starts, profiles

    def session(self, index: int, start: float, profile: str) -> list[Request]:
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 1, index]))
        cfg, sid = self.config, f"s{index}"
        if profile == "single-turn":
            st = cfg.single_turn
            chain = self.start_chain(profile, self.popularity[profile].draw(rng))
            chain.append(self._tokens(rng, draw(rng, st.payload)))
            return [chain.request(start, self._tokens(rng, draw(rng, st.output)), sid, profile)]
        section = cfg.multi_turn if profile == "multi-turn" else cfg.agentic
        chain = self.start_chain(profile, self.popularity[profile].draw(rng))
        chain.append(
            self._tokens(rng, draw(rng, section.user_prefix if profile == "multi-turn" else section.task))
        )
        step = section.message if profile == "multi-turn" else section.tool_result
        requests, t = [], start
        for turn in range(int(draw(rng, section.turns))):
            if turn:
                t += self._gap(rng, profile)
                if t >= cfg.duration_s:
                    break
                chain.append(self._tokens(rng, draw(rng, step)))
            answer = self._tokens(rng, draw(rng, section.output))
            requests.append(chain.request(t, answer, sid, profile))
            chain.append(answer)
        return requests

    def _gap(self, rng: np.random.Generator, profile: str) -> float:
        if profile == "multi-turn":
            return draw(rng, self.config.multi_turn.gap_s, integer=False)
        ag = self.config.agentic
        gap = draw(rng, ag.gap_s, integer=False)
        if rng.random() < ag.long_call_probability:
            gap += draw(rng, ag.long_call_s, integer=False)
        return gap

    def requests(self) -> Iterator[Request]:
        """Every request in ``[0, duration_s)``, in arrival order (ties: session order)."""
        starts, profiles = self.session_starts()
        out: list[tuple[float, int, int, Request]] = []
        for index, (start, p) in enumerate(zip(starts.tolist(), profiles.tolist(), strict=True)):
            for turn, req in enumerate(self.session(index, start, LABELS[p])):
                if 0 <= req.arrival_s < self.config.duration_s:
                    out.append((req.arrival_s, index, turn, req))
        out.sort(key=lambda x: x[:3])
        for entry in out:
            yield entry[3]


class _Chain:
    """A session's append-only token stream and the hashes of its full blocks, computed once.

    The stream lives in a buffer that doubles when full, so a session of n tokens costs O(n) copies,
    not one copy of the whole stream per turn."""

    def __init__(self, hasher: BlockHasher, block_size: int) -> None:
        self.hasher, self.block_size = hasher, block_size
        self.hashed = 0  # full blocks of the stream hashed so far
        self.last_hash: bytes | None = None  # the hash of the last of them (the next block's parent)
        self._keys = np.zeros(256, dtype=np.uint64)  # their keys: the first `hashed` entries
        self._buf = np.zeros(4096, dtype=np.int32)
        self._len = 0  # tokens in the stream

    def append(self, tokens: np.ndarray) -> None:
        end = self._len + len(tokens)
        if end > len(self._buf):
            grown = np.zeros(max(2 * len(self._buf), end), dtype=np.int32)
            grown[: self._len] = self._buf[: self._len]
            self._buf = grown
        self._buf[self._len : end] = tokens
        self._len = end

    def start_from(self, last_hash: bytes | None, keys: np.ndarray) -> None:
        """Take the keys of the stream's first blocks and the last one's hash, computed before (a
        catalog prompt)."""
        self.hashed, self.last_hash = len(keys), last_hash
        self._store_keys(0, keys)

    def keys(self) -> np.ndarray:
        """The keys of the hashed blocks (a view, valid until more blocks are hashed)."""
        return self._keys[: self.hashed]

    def _store_keys(self, first: int, keys: np.ndarray) -> None:
        end = first + len(keys)
        if end > len(self._keys):
            grown = np.zeros(max(2 * len(self._keys), end), dtype=np.uint64)
            grown[:first] = self._keys[:first]
            self._keys = grown
        self._keys[first:end] = keys

    def tokens(self) -> np.ndarray:
        """The stream so far (a view, valid until the next ``append``)."""
        return self._buf[: self._len]

    def _hash_through(self, blocks: int, extra: np.ndarray | None = None) -> None:
        """Hash the full blocks up to ``blocks`` of the stream followed by ``extra`` (those not hashed
        yet): only the tokens after the last hashed block are read."""
        first, bs = self.hashed, self.block_size
        if blocks <= first:
            return
        tail = self._buf[first * bs : self._len]
        if extra is not None and len(extra):
            tail = np.concatenate([tail, extra])
        keys, self.last_hash = self.hasher.chain_keys(self.last_hash, tail[: (blocks - first) * bs], bs)
        self._store_keys(first, keys)
        self.hashed = first + len(keys)

    def extend_to(self, blocks: int) -> None:
        """Hash the stream's first ``blocks`` full blocks (those not hashed yet)."""
        self._hash_through(blocks)

    def request(self, t: float, answer: np.ndarray, sid: str, label: str) -> Request:
        """The request whose prompt is the stream so far and whose output is ``answer`` (not yet
        appended): prompt keys = its full blocks; output keys = the further full blocks of
        ``prompt + answer[:-1]`` (vLLM has no KV for the last sampled token)."""
        bs = self.block_size
        n_prompt = self._len // bs
        n_all = (self._len + max(len(answer) - 1, 0)) // bs
        self._hash_through(n_all, answer[:-1])
        return Request(
            arrival_s=float(t),
            block_keys=self._keys[:n_prompt].copy(),
            prompt_tokens=self._len,
            output_tokens=len(answer),
            block_size=bs,
            session_id=sid,
            label=label,
            output_keys=self._keys[n_prompt:n_all].copy(),
        )
