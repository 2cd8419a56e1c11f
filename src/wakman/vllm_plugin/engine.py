"""An in-process vLLM engine with a tiny random-weight model: no download, runs on a CPU.

The model is a folder holding only a Llama ``config.json`` (2 layers, hidden size 256, vocabulary
1,024); ``load_format="dummy"`` fills random weights. Outputs are meaningless, but the scheduler,
block pool, prefix cache and metrics are vLLM's own, which is all a cache study needs.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from wakman.vllm_plugin.environment import check_environment

TINY_VOCAB = 1024
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": TINY_VOCAB,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
TINY_DTYPE = "float32"  # the engine's --dtype: the tiny model runs, and caches its KV, in 32 bits
# the tiny model and its fixed blocks need a few hundred MB: on a GPU, vLLM checks at start-up that
# this fraction of the device is free, and its default (0.9) would refuse to start beside any other
# process on it; on a CPU, VLLM_CPU_KVCACHE_SPACE sizes the cache and this is unread
TINY_GPU_MEMORY_UTILIZATION = 0.2
SCHEDULER_CLS = "wakman.vllm_plugin.WakmanScheduler"
ENGINE_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def tiny_model_dir(path: Path | None = None, tokenizer: bool = False, max_model_len: int = 0) -> Path:
    """Write the tiny model's ``config.json`` into ``path`` (a new temporary folder by default: the
    caller removes it), and with ``tokenizer`` its byte-level tokenizer (``write_byte_tokenizer``),
    which a server that takes text (``vllm serve``) needs. Its positions reach ``max_model_len``
    tokens where that is past the config's 131,072 (vLLM refuses a longer ``max_model_len``; the
    weights are dummies)."""
    path = Path(path) if path is not None else Path(tempfile.mkdtemp(prefix="wakman-tiny-llama-"))
    path.mkdir(parents=True, exist_ok=True)
    positions = max(int(TINY_LLAMA["max_position_embeddings"]), max_model_len)
    config = {**TINY_LLAMA, "max_position_embeddings": positions}
    (path / "config.json").write_text(json.dumps(config, indent=1))
    if tokenizer:
        write_byte_tokenizer(path)
    return path


def _byte_symbols() -> list[str]:
    """GPT-2's printable stand-in for each byte value 0-255 (what a byte-level BPE vocabulary holds)."""
    spans = (("!", "~"), ("¡", "¬"), ("®", "ÿ"))
    printable = [b for first, last in spans for b in range(ord(first), ord(last) + 1)]
    symbol = {b: chr(b) for b in printable}
    spare = 256
    for b in range(256):
        if b not in symbol:
            symbol[b] = chr(spare)
            spare += 1
    return [symbol[b] for b in range(256)]


def write_byte_tokenizer(path: Path) -> None:
    """A byte-level tokenizer for the tiny model: token id ``b < 256`` is the byte ``b``, so ASCII
    text encodes to one id per character and decoding then encoding gives the same ids back (the
    property a client that sends text, not ids, needs for prefix hashes to line up). Ids 256 and up
    fill the model's vocabulary with names like ``<300>``: generated text decodes, and no text ever
    encodes to them. No special tokens: the server adds nothing to a prompt."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {symbol: b for b, symbol in enumerate(_byte_symbols())}
    vocab.update({f"<{i}>": i for i in range(256, TINY_VOCAB)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(path / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 30}
    (path / "tokenizer_config.json").write_text(json.dumps(config | {"clean_up_tokenization_spaces": False}))


def step_budget(max_num_batched_tokens: int, block_size: int) -> int:
    """The token budget per step the engine runs with: the one asked, raised to one block (tokens)."""
    return max(max_num_batched_tokens, block_size)


def engine_step_tokens(
    max_num_batched_tokens: int, block_size: int, max_num_seqs: int, max_model_len: int
) -> int:
    """``--max-num-batched-tokens`` as the harness's engines run it: ``step_budget``, at most every
    sequence's whole length (a step never schedules more: a larger budget is never used, but vLLM
    sizes its step buffers by it; 2e9 tokens took 22 GB, then the OOM killer)."""
    return min(step_budget(max_num_batched_tokens, block_size), max(1, max_num_seqs) * max_model_len)


def available_memory_bytes(on_gpu: bool = False) -> int | None:
    """The memory the KV cache can have, in bytes: on the host (``on_gpu`` False: a CPU build's cache)
    what the kernel says a new allocation can have (``MemAvailable``, Linux); on the GPU what CUDA
    reports free on the current device (``torch.cuda.mem_get_info``). None where neither says."""
    if on_gpu:
        try:
            import torch

            return int(torch.cuda.mem_get_info()[0]) if torch.cuda.is_available() else None
        except (ImportError, RuntimeError):
            return None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def plugin_environment(policy: str, sessions: bool) -> dict[str, str]:
    """The ``WAKMAN_*`` variables ``build_llm`` sets for its engine's plugin; the plugin reads the
    others from the environment as it finds it."""
    return {"WAKMAN_POLICY": policy, "WAKMAN_SESSIONS": "1" if sessions else "0"}


def build_llm(
    capacity_blocks: int,
    block_size: int = 32,
    max_model_len: int | None = None,
    policy: str | None = "lru",
    max_num_seqs: int = 64,
    max_num_batched_tokens: int = 4096,
    model_dir: Path | None = None,
    sessions: bool = False,
    **engine_kwargs: Any,
) -> Any:
    """An in-process ``vllm.LLM`` with ``capacity_blocks`` usable KV blocks.

    ``policy=None`` runs stock vLLM; otherwise wakman's scheduler with ``WAKMAN_POLICY=policy`` and
    ``WAKMAN_SESSIONS`` = ``1`` if ``sessions`` else ``0`` (the other ``WAKMAN_*`` variables are read
    from the environment as usual)."""
    check_environment()  # before vLLM is imported: a broken torchvision would kill the import
    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    # in-process, whatever the environment says: the replay and the tests read its scheduler
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if policy is not None:
        os.environ.update(plugin_environment(policy, sessions))
    else:
        os.environ.pop("WAKMAN_POLICY", None)
        os.environ.pop("WAKMAN_SESSIONS", None)
    from vllm import LLM

    limit = capacity_blocks * block_size
    max_model_len = min(max_model_len or limit, limit)
    folder = tiny_model_dir(model_dir, max_model_len=max_model_len)
    kwargs: dict[str, Any] = dict(
        model=str(folder),
        load_format="dummy",
        skip_tokenizer_init=True,
        dtype=TINY_DTYPE,
        enable_prefix_caching=True,
        block_size=block_size,
        num_gpu_blocks_override=capacity_blocks + 1,  # block 0 is vLLM's null block
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=engine_step_tokens(
            max_num_batched_tokens, block_size, max_num_seqs, max_model_len
        ),
        enforce_eager=True,
        gpu_memory_utilization=TINY_GPU_MEMORY_UTILIZATION,
        disable_log_stats=False,
        seed=0,
    )
    if policy is not None:
        kwargs["scheduler_cls"] = SCHEDULER_CLS
    kwargs.update(engine_kwargs)
    try:
        return LLM(**kwargs)
    finally:  # the engine has read its config: a folder made here is not left behind
        if model_dir is None:
            shutil.rmtree(folder, ignore_errors=True)


def shutdown_llm(llm: Any) -> None:
    """Shut down what an ``LLM`` holds, now: its engine-core client and its renderer (vLLM 0.32,
    0.33 and 0.34's ``LLM`` has no shutdown of its own; AsyncLLM's shuts down the same two). Both are safe to
    run again: the client's finalizer detaches, and the renderer's, which still runs at garbage
    collection or exit, closes an empty stack and logs nothing. So vLLM's shutdown log lines come
    here, not at the process's exit."""
    engine = llm.llm_engine
    try:
        engine.engine_core.shutdown()
    finally:
        engine.renderer.shutdown()


def engine_core(llm: Any) -> Any:
    """The in-process ``EngineCore`` (needs ``VLLM_ENABLE_V1_MULTIPROCESSING=0``)."""
    return llm.llm_engine.engine_core.engine_core


def prefix_cache_counters(llm: Any) -> tuple[int, int]:
    """vLLM's own ``vllm:prefix_cache_hits`` and ``vllm:prefix_cache_queries`` (tokens)."""
    values = {m.name: m.value for m in llm.get_metrics() if m.name.startswith("vllm:prefix_cache_")}
    return int(values.get("vllm:prefix_cache_hits", 0)), int(values.get("vllm:prefix_cache_queries", 0))
