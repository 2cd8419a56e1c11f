"""KV-cache memory per token of a model, from its architecture as its Hugging Face ``config.json``
states it: a few well-known models by name, or any ``config.json`` the user has (never downloaded).

Standard attention (MHA / GQA / MQA) caches a key and a value vector per KV head per layer:
``2 * num_hidden_layers * num_key_value_heads * head_dim * dtype_bytes`` bytes per token, with
``head_dim`` from the config or ``hidden_size // num_attention_heads``. The KV heads are read as
vLLM reads them (``get_total_num_kv_heads`` of its model-architecture convertors): Falcon's
``multi_query`` without ``new_decoder_architecture`` is one KV head, else the first of
``KV_HEAD_FIELDS`` present, else (no such field: full multi-head attention) the attention heads.
Multi-head latent attention (DeepSeek-V2/V3, ``kv_lora_rank`` in the config) caches one compressed
latent plus the rotary key per layer, as vLLM does:
``num_hidden_layers * (kv_lora_rank + qk_rope_head_dim) * dtype_bytes``. Sliding-window layers
(Gemma 2) are counted at full size, as a pool without a hybrid allocator holds them. Layers that
cache no per-token KV (Mamba or linear attention, which keep a fixed state per sequence) are left
out: of a hybrid's layers only its attention layers count (``attention_layers``: ``layer_types``,
Jamba's ``attn_layer_period`` / ``attn_layer_offset``, Qwen3-Next's ``full_attention_interval``,
Nemotron-H's ``hybrid_override_pattern``). A vLLM block of ``block_size`` tokens takes
``block_size`` times the per-token bytes.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 1024**3

DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
    "int8": 1,
}
AUTO = "auto"  # vLLM's spelling of the default: the checkpoint's dtype, as --dtype auto serves it
# vLLM's --dtype auto serves a float32 checkpoint in the GPU's first 16-bit dtype: bfloat16 (float16
# where the GPU has no bfloat16; 2 bytes either way), never in 32 bits (vllm/config/model.py)
FLOAT32_SERVED_AS = "bfloat16"

# The fields that give the KV heads, in vLLM's order (Falcon's two, Llama's, ChatGLM's, Step's)
KV_HEAD_FIELDS = (
    "n_head_kv",
    "num_kv_heads",
    "num_key_value_heads",
    "multi_query_group_num",
    "num_attention_groups",
)
# ChatGLM's config.json names its layers num_layers (vLLM's ChatGLMConfig maps num_hidden_layers to it)
LAYER_ALIASES = ("num_layers",)

# Architecture fields as each model's config.json on the Hugging Face Hub writes them (only those the
# KV size depends on). Keys absent from a config (head_dim in Llama 3.1's) are absent here too.
MODEL_CONFIGS: dict[str, dict[str, Any]] = {
    "meta-llama/Llama-3.1-8B-Instruct": {
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "torch_dtype": "bfloat16",
    },
    "meta-llama/Llama-3.1-70B-Instruct": {
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "hidden_size": 8192,
        "torch_dtype": "bfloat16",
    },
    "meta-llama/Llama-3.2-1B-Instruct": {
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 2048,
        "head_dim": 64,
        "torch_dtype": "bfloat16",
    },
    "meta-llama/Llama-3.2-3B-Instruct": {
        "num_hidden_layers": 28,
        "num_attention_heads": 24,
        "num_key_value_heads": 8,
        "hidden_size": 3072,
        "head_dim": 128,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen2.5-7B-Instruct": {
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "hidden_size": 3584,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen2.5-14B-Instruct": {
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "hidden_size": 5120,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen2.5-32B-Instruct": {
        "num_hidden_layers": 64,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "hidden_size": 5120,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen2.5-72B-Instruct": {
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "hidden_size": 8192,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen3-8B": {
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "head_dim": 128,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen3-32B": {
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "hidden_size": 5120,
        "head_dim": 128,
        "torch_dtype": "bfloat16",
    },
    "mistralai/Mistral-7B-Instruct-v0.3": {
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "head_dim": 128,
        "torch_dtype": "bfloat16",
    },
    "mistralai/Mixtral-8x7B-Instruct-v0.1": {
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "torch_dtype": "bfloat16",
    },
    "google/gemma-2-9b-it": {
        "num_hidden_layers": 42,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "hidden_size": 3584,
        "head_dim": 256,
        "torch_dtype": "bfloat16",
    },
    "deepseek-ai/DeepSeek-V3": {
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "hidden_size": 7168,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "torch_dtype": "bfloat16",
    },
}


@dataclass(frozen=True)
class KVLayout:
    """What one token's KV cache takes: ``bytes_per_token`` and how it was derived."""

    name: str
    bytes_per_token: int
    formula: str  # the product written out, e.g. "2 * 32 layers * 8 kv heads * 128 head_dim * 2 B"
    attention: str  # "mha/gqa" or "mla"
    dtype: str
    dtype_source: str = ""  # where ``dtype`` comes from ("" where the bytes were given)

    def block_bytes(self, block_size: int) -> int:
        return self.bytes_per_token * block_size

    def blocks_in(self, gib: float, block_size: int) -> int:
        """The usable blocks of ``block_size`` tokens in ``gib`` GiB of KV cache: vLLM's
        ``num_gpu_blocks`` (the whole blocks in it) less its null block, as the simulator counts a
        cache's capacity (may be 0 or -1 for less than two blocks)."""
        return int(gib * GIB // self.block_bytes(block_size)) - 1

    def gib(self, blocks: int, block_size: int) -> float:
        """The GiB of KV cache that ``blocks`` usable blocks take in vLLM (with its null block):
        ``blocks_in``'s inverse."""
        return (blocks + 1) * self.block_bytes(block_size) / GIB

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "bytes_per_token": self.bytes_per_token,
            "formula": self.formula,
            "attention": self.attention,
            "dtype": self.dtype,
            "dtype_source": self.dtype_source,
        }


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype`` (a ValueError naming the choices where unknown)."""
    key = str(dtype).lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        choices = ", ".join([AUTO, *sorted(DTYPE_BYTES)])
        raise ValueError(f"unknown KV dtype {dtype!r}; choose from {choices}")
    return DTYPE_BYTES[key]


def given_kv_dtype(kv_dtype: str | None) -> str | None:
    """``--kv-dtype`` checked: None where not given or ``auto`` (the default), else the dtype."""
    if kv_dtype is None or kv_dtype.lower() == AUTO:
        return None
    dtype_bytes(kv_dtype)
    return kv_dtype


def served_dtype(config_dtype: str, kv_dtype: str | None) -> tuple[str, str]:
    """The KV cache's dtype and where it comes from: ``kv_dtype`` where given (not None or
    ``auto``), else the checkpoint's ``config_dtype`` as vLLM's default ``--dtype auto`` serves it,
    a 4-byte (float32) checkpoint in 16 bits (``FLOAT32_SERVED_AS``, 2 bytes)."""
    given = given_kv_dtype(kv_dtype)
    if given is not None:
        return given, "--kv-dtype"
    if dtype_bytes(config_dtype) == 4:
        return FLOAT32_SERVED_AS, (
            f"config {config_dtype}, which vLLM's default --dtype auto serves in 16 bits "
            "(bfloat16, or float16 on GPUs without it); --kv-dtype float32 for 32 bits"
        )
    return config_dtype, "config"


def _positive_int(config: dict[str, Any], field: str, source: str) -> int:
    value = config[field]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{source}: {field} must be a positive integer, got {value!r}")
    return value


def _kv_heads_field(config: dict[str, Any]) -> str | None:
    """Where the KV heads of standard attention come from, in vLLM's order: ``"multi_query"``
    (Falcon's multi-query attention, one KV head), the first of ``KV_HEAD_FIELDS`` present,
    ``"num_attention_heads"`` (no such field: as many as the attention heads), or None (none)."""
    if config.get("multi_query") and not config.get("new_decoder_architecture"):
        return "multi_query"
    fields = (*KV_HEAD_FIELDS, "num_attention_heads")
    return next((f for f in fields if config.get(f) is not None), None)


def attention_layers(config: dict[str, Any], layers: int) -> tuple[int, str]:
    """How many of ``layers`` cache per-token KV (attention, full or sliding-window), and a note
    for the formula ("" where every layer does): a hybrid's Mamba or linear-attention layers keep a
    fixed state per sequence instead."""
    kinds = config.get("layer_types")
    if isinstance(kinds, list) and kinds:
        count = sum(1 for k in kinds if "attention" in str(k) and "linear" not in str(k))
        source = "layer_types"
    elif config.get("attn_layer_period") is not None:  # Jamba: attention every period, at offset
        period, offset = int(config["attn_layer_period"]), int(config.get("attn_layer_offset") or 0)
        count = sum(1 for i in range(layers) if period > 0 and i % period == offset)
        source = f"attn_layer_period {period}, offset {offset}"
    elif config.get("full_attention_interval") is not None:  # Qwen3-Next: every interval-th layer
        interval = int(config["full_attention_interval"])
        count = sum(1 for i in range(layers) if interval > 0 and (i + 1) % interval == 0)
        source = f"full_attention_interval {interval}"
    elif isinstance(config.get("hybrid_override_pattern"), str):  # Nemotron-H: "*" marks attention
        count = config["hybrid_override_pattern"].count("*")
        source = "hybrid_override_pattern"
    else:
        return layers, ""
    if count == layers:
        return layers, ""
    return count, f" ({count} of {layers} layers are attention, {source}; the others keep no per-token KV)"


def kv_layout(
    config: dict[str, Any], name: str = "model", kv_dtype: str | None = None, tensor_parallel: int = 1
) -> KVLayout:
    """The KV bytes per token of an architecture given as config.json's fields. ``kv_dtype``
    (not None or ``auto``) overrides ``torch_dtype`` (vLLM's ``--kv-cache-dtype fp8`` is 1 byte;
    transformers 5 saves the field as ``dtype``, read where ``torch_dtype`` is absent), which is
    taken as vLLM serves it by default (``served_dtype``: float32 in 16 bits). A config that nests
    the text model (``text_config``) is read there. The KV heads come from ``_kv_heads_field``,
    in vLLM's order. ``tensor_parallel`` (the GPUs of one replica): the bytes are the replica's, over
    all its GPUs, as vLLM stores them: the KV heads split over the GPUs, at least one on each (a
    head is stored on several where there are more GPUs than heads); an MLA latent on every GPU."""
    if "num_hidden_layers" not in config and isinstance(config.get("text_config"), dict):
        config = {**config, **config["text_config"]}
    if config.get("torch_dtype") is None and config.get("dtype") is not None:
        config = {**config, "torch_dtype": config["dtype"]}
    if config.get("num_hidden_layers") is None:
        alias = next((f for f in LAYER_ALIASES if config.get(f) is not None), None)
        config = {**config, "num_hidden_layers": config[alias]} if alias else config
    mla = config.get("kv_lora_rank") is not None
    heads_from = None if mla else _kv_heads_field(config)
    need = ["num_hidden_layers"]
    need += ["kv_lora_rank", "qk_rope_head_dim"] if mla else [heads_from or "num_key_value_heads"]
    if not mla and config.get("head_dim") is None:
        need += ["hidden_size", "num_attention_heads"]
    kv_dtype = given_kv_dtype(kv_dtype)
    if kv_dtype is None:
        need.append("torch_dtype")
    missing = [f for f in need if f != "multi_query" and config.get(f) is None]
    if missing:
        hint = " (or give --kv-dtype)" if missing == ["torch_dtype"] else ""
        raise ValueError(
            f"{name}: config is missing {', '.join(missing)} (needed for the KV-cache size){hint}"
        )
    dtype, source = served_dtype(str(config.get("torch_dtype")), kv_dtype)
    width = dtype_bytes(dtype)
    layers, hybrid = attention_layers(config, _positive_int(config, "num_hidden_layers", name))
    if layers < 1:
        raise ValueError(f"{name}: no attention layer{hybrid}: no per-token KV cache to size")
    if not (isinstance(tensor_parallel, int) and tensor_parallel >= 1):
        raise ValueError(f"--tensor-parallel must be an integer >= 1, got {tensor_parallel!r}")
    tp = tensor_parallel
    if mla:
        rank = _positive_int(config, "kv_lora_rank", name)
        rope = _positive_int(config, "qk_rope_head_dim", name)
        ranks = f" * {tp} GPUs (the latent is stored on each)" if tp > 1 else ""
        return KVLayout(
            name,
            tp * layers * (rank + rope) * width,
            f"{layers} layers * ({rank} kv_lora_rank + {rope} qk_rope_head_dim) * {width} B (MLA latent)"
            + ranks
            + hybrid,
            "mla",
            dtype,
            source,
        )
    assert heads_from is not None
    if heads_from == "multi_query":
        heads, note = 1, "1 kv head (multi_query)"
    else:
        heads = _positive_int(config, heads_from, name)
        note = f"{heads} kv heads"
        if heads_from == "num_attention_heads":
            note += " (no KV-head field: assumed equal to the attention heads, MHA)"
        elif heads_from != "num_key_value_heads":
            note += f" ({heads_from})"
    if config.get("head_dim") is not None:
        head_dim = _positive_int(config, "head_dim", name)
    else:
        hidden = _positive_int(config, "hidden_size", name)
        n_heads = _positive_int(config, "num_attention_heads", name)
        if hidden % n_heads:
            raise ValueError(
                f"{name}: hidden_size {hidden} is not a multiple of num_attention_heads {n_heads}"
            )
        head_dim = hidden // n_heads
    if tp > 1:  # vLLM splits the KV heads over the ranks, each rank at least one (replicated)
        if (heads >= tp and heads % tp) or (heads < tp and tp % heads):
            raise ValueError(f"{name}: {heads} kv heads do not split over --tensor-parallel {tp} GPUs")
        per_rank = max(1, heads // tp)
        replicated = f", each of the {heads} stored on {tp // heads}" if heads < tp else ""
        note, heads = f"{per_rank} kv heads on each of {tp} GPUs{replicated}", per_rank * tp
    return KVLayout(
        name,
        2 * layers * heads * head_dim * width,
        f"2 (K, V) * {layers} layers * {note} * {head_dim} head_dim * {width} B" + hybrid,
        "mha/gqa",
        dtype,
        source,
    )


def find_model(name: str) -> dict[str, Any]:
    """A known model's config fields by its Hub name (case-insensitive; the part after the owner
    also works). An unknown name lists the close ones."""
    lowered = {k.lower(): k for k in MODEL_CONFIGS}
    short = {k.split("/", 1)[1].lower(): k for k in MODEL_CONFIGS}
    # a base model has its instruct model's architecture, wherever the name says "instruct"
    # (Mistral-7B-v0.3 is Mistral-7B-Instruct-v0.3)
    base = {
        n.replace("-instruct", "") if "-instruct" in n else n.removesuffix("-it"): k
        for n, k in (*lowered.items(), *short.items())
        if "-instruct" in n or n.endswith("-it")
    }
    key = None
    for suffix in ("", "-instruct", "-it"):
        key = key or lowered.get(name.lower() + suffix) or short.get(name.lower() + suffix)
    key = key or base.get(name.lower())
    if key is not None:
        return MODEL_CONFIGS[key]
    close = difflib.get_close_matches(name.lower(), [*lowered, *short], n=4, cutoff=0.4)
    names = list(dict.fromkeys(lowered.get(c) or short[c] for c in close))
    hint = f"; close: {', '.join(names)}" if names else ""
    raise ValueError(
        f"--model: unknown model {name!r}{hint}. Known: {', '.join(MODEL_CONFIGS)}; "
        "or pass --model-config config.json or --kv-bytes-per-token N"
    )


def model_layout(name: str, kv_dtype: str | None = None, tensor_parallel: int = 1) -> KVLayout:
    key = next((k for k in MODEL_CONFIGS if MODEL_CONFIGS[k] is find_model(name)), name)
    return kv_layout(find_model(name), key, kv_dtype, tensor_parallel)


def config_layout(path: Path, kv_dtype: str | None = None, tensor_parallel: int = 1) -> KVLayout:
    try:
        config = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"--model-config {path}: not JSON ({exc})") from exc
    except OSError as exc:
        raise ValueError(f"--model-config {path}: cannot read it ({exc.strerror})") from None
    if not isinstance(config, dict):
        raise ValueError(f"--model-config {path}: expected a JSON object")
    return kv_layout(config, f"--model-config {path}", kv_dtype, tensor_parallel)
