"""`wakman advise`: KV bytes per token, the exact LRU token curve, the smallest cache within the
target, the JSON output and the errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wakman.adaptive import simulate
from wakman.cli.main import app
from wakman.experiments import advise as adv
from wakman.experiments.kv_memory import MODEL_CONFIGS, config_layout, kv_layout, model_layout
from wakman.experiments.sweep import HINT_MODE
from wakman.policies import make_policy
from wakman.traces import Request, write_trace
from wakman.workload import build_config, generate_requests

TIE_POINTS = 0.1  # a lead over LRU of at most this (points of hit rate) is a tie: LRU stays


@pytest.fixture(scope="module")
def reqs():
    return generate_requests(build_config(preset="mix19-thirds", duration_s=300), seed=3)


@pytest.fixture(scope="module")
def curve(reqs):
    return adv.lru_curve(reqs)


# --- KV bytes per token ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        # 2 (K, V) * layers * KV heads * head_dim * bytes
        ("meta-llama/Llama-3.1-8B-Instruct", 2 * 32 * 8 * 128 * 2),  # 131072 = 128 KiB
        ("Qwen/Qwen2.5-7B-Instruct", 2 * 28 * 4 * (3584 // 28) * 2),  # 57344
        ("google/gemma-2-9b-it", 2 * 42 * 8 * 256 * 2),  # head_dim 256 != 3584 / 16
        ("meta-llama/Llama-3.1-70B-Instruct", 2 * 80 * 8 * 128 * 2),
        # MLA: one latent (kv_lora_rank) plus the rotary key per layer, no separate V
        ("deepseek-ai/DeepSeek-V3", 61 * (512 + 64) * 2),  # 70272
    ],
)
def test_kv_bytes_per_token_closed_forms(model, expected):
    assert model_layout(model).bytes_per_token == expected


@pytest.fixture
def wide_console(monkeypatch):
    """The CLI's tables at 240 columns, whatever COLUMNS says (pytest's workers may set 80, where a
    row the test reads folds over two lines)."""
    from wakman.cli.console import console

    monkeypatch.setattr(console, "width", 240)


def test_kv_bytes_known_values_and_overrides():
    assert model_layout("meta-llama/Llama-3.1-8B-Instruct").bytes_per_token == 128 * 1024
    assert model_layout("meta-llama/Llama-3.1-8B-Instruct", kv_dtype="fp8").bytes_per_token == 64 * 1024
    assert model_layout("Llama-3.1-8B").bytes_per_token == 128 * 1024  # base name, owner left out
    # a base model whose instruct name has "Instruct" in the middle (it was not found)
    assert model_layout("mistralai/Mistral-7B-v0.3").bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert model_layout("Mixtral-8x7B-v0.1").bytes_per_token == 2 * 32 * 8 * 128 * 2
    layout = model_layout("meta-llama/Llama-3.1-8B-Instruct")
    assert layout.block_bytes(16) == 2 * 1024**2
    assert layout.blocks_in(40, 16) == 40 * 1024 // 2 - 1  # 40 GiB of 2 MiB blocks, less the null block
    assert layout.gib(layout.blocks_in(40, 16), 16) == 40.0  # and back
    assert layout.gib(20479, 16) == pytest.approx(40.0)  # 20,480 blocks with the null block


@pytest.mark.parametrize(
    "model", ["meta-llama/Llama-3.2-1B-Instruct", "Qwen/Qwen3-32B", "deepseek-ai/DeepSeek-V3"]
)
def test_config_json_path_equals_name_path(tmp_path, model):
    config = {"architectures": ["X"], "vocab_size": 1000, **MODEL_CONFIGS[model]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert config_layout(path).bytes_per_token == model_layout(model).bytes_per_token


def test_config_json_hand_written_llama_8b(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_hidden_layers": 32,
                "num_key_value_heads": 8,
                "torch_dtype": "bfloat16",
            }
        )
    )
    assert config_layout(path).bytes_per_token == 131072


def test_config_missing_fields_are_named():
    with pytest.raises(ValueError, match="num_key_value_heads") as info:
        kv_layout({"num_hidden_layers": 4, "torch_dtype": "bfloat16"}, "cfg")
    assert "hidden_size" in str(info.value) and "num_attention_heads" in str(info.value)
    with pytest.raises(ValueError, match="qk_rope_head_dim"):
        kv_layout({"num_hidden_layers": 4, "kv_lora_rank": 512, "torch_dtype": "bfloat16"}, "cfg")
    with pytest.raises(ValueError, match="torch_dtype"):
        kv_layout({"num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 64}, "cfg")


# config.json fields of three architectures whose KV heads are not in num_key_value_heads
FALCON_7B = {  # tiiuae/falcon-7b: multi-query attention, one KV head
    "model_type": "falcon",
    "hidden_size": 4544,
    "num_attention_heads": 71,
    "num_hidden_layers": 32,
    "multi_query": True,
    "new_decoder_architecture": False,
    "torch_dtype": "bfloat16",
}
FALCON_40B = {  # tiiuae/falcon-40b: grouped-query attention in num_kv_heads (multi_query ignored)
    "model_type": "falcon",
    "hidden_size": 8192,
    "num_attention_heads": 128,
    "num_kv_heads": 8,
    "num_hidden_layers": 60,
    "multi_query": True,
    "new_decoder_architecture": True,
    "torch_dtype": "bfloat16",
}
CHATGLM3_6B = {  # THUDM/chatglm3-6b: num_layers, and KV head groups in multi_query_group_num
    "model_type": "chatglm",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_layers": 28,
    "kv_channels": 128,
    "multi_query_attention": True,
    "multi_query_group_num": 2,
    "torch_dtype": "float16",
}
OPT_LIKE_MHA = {  # no KV-head field at all: full multi-head attention
    "model_type": "opt",
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_hidden_layers": 24,
    "torch_dtype": "float16",
}


@pytest.mark.parametrize(
    ("config", "expected", "says"),
    [
        # 2 (K, V) * layers * KV heads * (hidden / heads) * 2 bytes, written out by hand
        (FALCON_7B, 2 * 32 * 1 * 64 * 2, "1 kv head (multi_query)"),  # 8,192 B
        (FALCON_40B, 2 * 60 * 8 * 64 * 2, "8 kv heads (num_kv_heads)"),  # 122,880 B
        (CHATGLM3_6B, 2 * 28 * 2 * 128 * 2, "2 kv heads (multi_query_group_num)"),  # 28,672 B
        (OPT_LIKE_MHA, 2 * 24 * 32 * 64 * 2, "assumed equal to the attention heads"),
    ],
    ids=["falcon-7b", "falcon-40b", "chatglm3-6b", "mha"],
)
def test_kv_heads_are_read_from_the_fields_vllm_reads(tmp_path, config, expected, says):
    """A config without num_key_value_heads is not always multi-head attention: Falcon's
    multi_query (one KV head), Falcon-40B's num_kv_heads and ChatGLM's multi_query_group_num hold
    the KV heads, as vLLM reads them; only where none is present are they the attention heads, and
    the formula says so."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    layout = config_layout(path)
    assert layout.bytes_per_token == expected
    assert says in layout.formula
    assert ("assumed" in layout.formula) == (config is OPT_LIKE_MHA)


@pytest.mark.parametrize("config", [FALCON_7B, FALCON_40B, CHATGLM3_6B, OPT_LIKE_MHA])
def test_kv_heads_agree_with_vllms_own_convertor(config):
    """vLLM's model-architecture convertor (no model downloaded: the config object built from the
    fields) gives the same layers, KV heads and head size as the bytes per token here."""
    from vllm_support import need_vllm

    need_vllm()
    import vllm.config  # noqa: F401  (vLLM's config package first: the convertor imports it back)
    from transformers import FalconConfig, PretrainedConfig
    from vllm.transformers_utils.configs.chatglm import ChatGLMConfig
    from vllm.transformers_utils.model_arch_config_convertor import (
        MODEL_ARCH_CONFIG_CONVERTORS,
        ModelArchConfigConvertorBase,
    )

    fields = {k: v for k, v in config.items() if k not in ("model_type", "torch_dtype")}
    classes = {"falcon": FalconConfig, "chatglm": ChatGLMConfig}
    hf = classes.get(config["model_type"], PretrainedConfig)(**fields)
    convertor = MODEL_ARCH_CONFIG_CONVERTORS.get(config["model_type"], ModelArchConfigConvertorBase)(hf, hf)
    layers, heads = convertor.get_num_hidden_layers(), convertor.get_total_num_kv_heads()
    vllm_bytes = 2 * layers * heads * convertor.get_head_size() * 2
    assert vllm_bytes > 0
    assert kv_layout(config, "cfg").bytes_per_token == vllm_bytes


LLAMA_8B_FP32 = {  # Llama-3.1-8B's fields, saved in float32 (as fine-tunes often are)
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "torch_dtype": "float32",
}


def test_a_float32_checkpoint_is_served_in_16_bits(tmp_path):
    """vLLM's default --dtype auto serves a float32 checkpoint in 16 bits (bfloat16, or float16
    without it), so its KV cache takes 2 bytes an element, not 4; --kv-dtype float32 asks for 32
    bits, and --kv-dtype auto is the default spelled out."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_8B_FP32))
    per_element = 2 * 32 * 8 * 128  # 2 (K, V) * layers * KV heads * head_dim
    for kv_dtype in (None, "auto", "AUTO"):
        layout = config_layout(path, kv_dtype)
        assert layout.bytes_per_token == per_element * 2
        assert layout.dtype == "bfloat16" and "config float32" in layout.dtype_source
    assert config_layout(path, "float32").bytes_per_token == per_element * 4
    assert config_layout(path, "fp8").bytes_per_token == per_element
    bf16 = {**LLAMA_8B_FP32, "torch_dtype": "bfloat16"}
    assert kv_layout(bf16).bytes_per_token == per_element * 2 and kv_layout(bf16).dtype_source == "config"


def test_float32_served_as_vllms_auto_dtype_resolves_it():
    """vLLM's own resolution of --dtype auto for a float32 checkpoint (on this platform; a CUDA GPU's
    is bfloat16 or float16 likewise) has the element size taken here."""
    from vllm_support import need_vllm

    need_vllm()
    import torch
    import vllm.config  # noqa: F401
    from vllm.config.model import _resolve_auto_dtype

    served = _resolve_auto_dtype("llama", torch.float32, is_pooling_model=False)
    assert served.itemsize == 2
    assert kv_layout(LLAMA_8B_FP32).bytes_per_token == 2 * 32 * 8 * 128 * served.itemsize


@pytest.mark.parametrize(
    ("flags", "dtype", "width", "says"),
    [
        ([], "bfloat16", 2, "dtype bfloat16 (config float32, which vLLM's default --dtype auto serves"),
        (["--kv-dtype", "auto"], "bfloat16", 2, "dtype bfloat16 (config float32"),
        (["--kv-dtype", "float32"], "float32", 4, "dtype float32 (--kv-dtype)"),
    ],
)
def test_the_command_prints_the_kv_dtype_it_assumed(trace_file, tmp_path, flags, dtype, width, says):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_8B_FP32))
    args = ["advise", str(trace_file), "--model-config", str(path), *flags, "--policies", "lru"]
    args += ["--points", "2", "--jobs", "1"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    kv = json.loads(result.stdout)["kv"]
    assert kv["dtype"] == dtype and kv["bytes_per_token"] == 2 * 32 * 8 * 128 * width
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 0, text.output
    assert says in " ".join(text.stdout.split())


# --- the LRU curve --------------------------------------------------------------------------------


def test_lru_curve_equals_cache_mode_lru(reqs, curve):
    sizes = adv.sweep_capacities(curve, 5, [1, 7], band=0.95)
    assert len(sizes) >= 8
    for c in sizes:
        sim = simulate(reqs, "lru", c, mode="cache")
        assert curve.tokens_at(c) == sim.hit_tokens, c
        assert curve.hit_rate(c) == sim.hit_rate, c
    assert curve.prompt_tokens == sum(r.prompt_tokens for r in reqs)
    assert curve.ceiling == simulate(reqs, "infinite", 1, mode="cache").hit_rate
    assert 0.5 < curve.ceiling < 1


def test_smallest_within_target_brute_force(reqs, curve):
    values = [curve.tokens_at(c) for c in range(curve.distinct_blocks + 1)]
    for fraction in (0.1, 0.5, 0.9, 0.95, 0.99, 1.0):
        brute = next(c for c, v in enumerate(values) if v >= fraction * curve.ceiling_tokens)
        assert curve.smallest_within(fraction) == brute, fraction
    c = curve.smallest_within(0.95)
    threshold = 0.95 * curve.ceiling
    assert simulate(reqs, "lru", c, mode="cache").hit_rate >= threshold
    assert simulate(reqs, "lru", c - 1, mode="cache").hit_rate < threshold


def test_sweep_helpers():
    rows = [
        {"policy": p, "capacity_blocks": c, "hit_rate": r}
        for p, c, r in [("a", 10, 0.1), ("a", 20, 0.5), ("a", 40, 0.6), ("b", 10, 0.2), ("b", 20, 0.4)]
    ]
    assert adv.smallest_sampled(rows, "a", 0.45) == (20, 10)
    assert adv.smallest_sampled(rows, "a", 0.05) == (10, None)
    assert adv.smallest_sampled(rows, "b", 0.45) == (None, 20)
    assert adv.best_at(rows, 10)["policy"] == "b"
    assert adv.best_at(rows, 20)["policy"] == "a"
    rows.append({"policy": "belady", "capacity_blocks": 20, "hit_rate": 0.9})
    assert adv.best_at(rows, 20)["policy"] == "a"  # an oracle is no advice


# --- the command ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory, reqs):
    path = tmp_path_factory.mktemp("advise") / "t.jsonl"
    write_trace(reqs, path, "native")
    return path


def test_json_alone_on_stdout(trace_file, reqs, curve):
    cmd = [sys.executable, "-m", "wakman.cli.main", "advise", str(trace_file), "--json"]
    cmd += ["--capacity-blocks", "1500", "--policies", "lru,s3fifo,wakman", "--points", "3", "--jobs", "1"]
    cmd += ["--model", "meta-llama/Llama-3.1-8B-Instruct"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 1 and proc.stdout.startswith("{")
    out = json.loads(proc.stdout)
    assert out["block_size"] == reqs[0].block_size
    assert out["kv"]["bytes_per_token"] == 131072
    assert out["ceiling"]["hit_rate"] == curve.ceiling
    at = out["at_capacity"]
    assert at["capacity_blocks"] == 1500 and at["tokens"] == 1500 * reqs[0].block_size
    assert at["gib"] == pytest.approx(1501 * reqs[0].block_size * 131072 / 2**30)  # and the null block
    by = {r["policy"]: r for r in at["rows"]}
    assert set(by) == {"lru", "s3fifo", "wakman"}
    assert by["lru"]["hit_rate"] == simulate(reqs, "lru", 1500, mode="cache").hit_rate
    assert by["s3fifo"]["hit_rate"] == simulate(reqs, "s3fifo", 1500, mode="cache").hit_rate
    best = max(by.values(), key=lambda r: r["hit_rate"])
    best = best if 100 * (best["hit_rate"] - by["lru"]["hit_rate"]) > TIE_POINTS else by["lru"]
    assert at["best"] == best["policy"]
    assert at["gain_points_vs_lru"] == pytest.approx(100 * (best["hit_rate"] - by["lru"]["hit_rate"]))
    assert at["prefill_tokens_saved_vs_lru"] == best["hit_tokens"] - by["lru"]["hit_tokens"]
    lru = out["smallest_within_target"]["lru"]
    assert lru["exact"] and lru["capacity_blocks"] == curve.smallest_within(0.95)
    assert 1500 in out["sweep_capacities_blocks"]
    # what an infinite cache holds at the end of a cache-mode replay: every full prompt and output
    # block (stats' distinct_blocks counts every prompt key instead, partial blocks too)
    infinite = make_policy("infinite", 1)
    simulate(reqs, infinite, 1, mode="cache")
    assert out["cacheable_blocks"] == len(infinite)


def test_serve_mode_reports_ttft(trace_file):
    args = ["advise", str(trace_file), "--mode", "serve", "--capacity-blocks", "2000"]
    result = CliRunner().invoke(
        app, [*args, "--policies", "lru,s3fifo", "--points", "2", "--jobs", "1", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["mode"] == "serve"
    for row in out["at_capacity"]["rows"]:
        assert row["ttft_s_p50"] <= row["ttft_s_p99"]
        assert {"saturated", "prefill_utilization"} <= set(row)  # the simulator's one saturation rule


@pytest.mark.parametrize("mode", ["cache", "serve"])
def test_the_comparison_with_lru_holds_when_lru_is_not_asked_for(trace_file, reqs, mode, wide_console):
    """`--policies s3fifo` still says what it gains over vLLM's default at your size: against LRU's
    own run there (serve mode) or the curve's exact value (cache mode), which is not listed."""
    args = ["advise", str(trace_file), "--mode", mode, "--capacity-blocks", "1500", "--points", "2"]
    result = CliRunner().invoke(app, [*args, "--policies", "s3fifo", "--jobs", "1", "--json"])
    assert result.exit_code == 0, result.output
    at = json.loads(result.stdout)["at_capacity"]
    assert [r["policy"] for r in at["rows"]] == ["s3fifo"]
    lru, s3 = (simulate(reqs, name, 1500, mode=mode) for name in ("lru", "s3fifo"))
    assert at["rows"][0]["points_vs_lru"] == pytest.approx(100 * (s3.hit_rate - lru.hit_rate))
    assert at["rows"][0]["prefill_tokens_saved_vs_lru"] == s3.hit_tokens - lru.hit_tokens
    gain = 100 * (s3.hit_rate - lru.hit_rate)
    best = "s3fifo" if gain > TIE_POINTS else "lru"  # LRU stays unless beaten by more than a tie
    assert at["best"] == best
    assert at["gain_points_vs_lru"] == pytest.approx(gain if best == "s3fifo" else 0.0)
    # the baseline is shown: in the JSON and as a row of its own in the text
    base = at["lru_baseline"]
    assert (base["policy"], base["hit_rate"], base["hit_tokens"]) == ("lru", lru.hit_rate, lru.hit_tokens)
    if mode == "serve":
        flat = lru.as_flat_dict()
        assert base["ttft_s_p50"] == flat["ttft_s_p50"] and base["saturated"] == flat["saturated"]
    text = CliRunner().invoke(app, [*args, "--policies", "s3fifo", "--jobs", "1"])
    yours = text.stdout[text.stdout.index("at your size:") :].splitlines()
    shown = next(line.split() for line in yours if line.split()[:2] == ["lru", "(baseline)"])
    assert f"{lru.hit_rate:.4f}" in shown


@pytest.mark.parametrize(
    ("mode", "listed"), [("cache", "fifo,sieve"), ("cache", "fifo"), ("serve", "fifo,sieve")]
)
def test_lru_stays_the_advice_unless_a_listed_policy_beats_it(trace_file, reqs, mode, listed):
    """The best policy at your size is vLLM's default LRU unless a listed policy's hit rate is above
    LRU's (each checked against the simulator's own runs): listing only worse policies, or one that
    ties, never turns a loss or a zero gain into a recommendation."""
    args = ["advise", str(trace_file), "--mode", mode, "--capacity-blocks", "600", "--points", "2"]
    result = CliRunner().invoke(app, [*args, "--policies", listed, "--jobs", "1", "--json"])
    assert result.exit_code == 0, result.output
    at = json.loads(result.stdout)["at_capacity"]
    names = listed.split(",")
    rates = {name: simulate(reqs, name, 600, mode=mode).hit_rate for name in ["lru", *names]}
    assert min(rates[n] for n in names) < rates["lru"]  # a listed policy loses: the case at stake
    winner = max(names, key=lambda n: rates[n])
    expected = winner if 100 * (rates[winner] - rates["lru"]) > TIE_POINTS else "lru"
    assert at["best"] == expected and at["best_hit_rate"] == rates[expected]
    assert at["gain_points_vs_lru"] == pytest.approx(100 * (rates[expected] - rates["lru"]))
    text = CliRunner().invoke(app, [*args, "--policies", listed, "--jobs", "1"]).stdout
    kept = "best at your size: lru, vLLM's default" in text and "no listed policy beats it" in text
    assert kept == (expected == "lru")
    # a cache that holds every block: every policy ties with LRU, listed first or not
    big = ["advise", str(trace_file), "--mode", mode, "--capacity-blocks", "100000", "--points", "2"]
    tied = CliRunner().invoke(app, [*big, "--policies", "fifo,lru", "--jobs", "1", "--json"])
    at = json.loads(tied.stdout)["at_capacity"]
    assert {r["hit_rate"] for r in at["rows"]} == {
        rates_big := simulate(reqs, "lru", 100000, mode=mode).hit_rate
    }
    assert at["best"] == "lru" and at["gain_points_vs_lru"] == 0 and rates_big > 0
    assert at["tied_with_lru"] == ["fifo"]


def test_a_lead_within_a_tenth_of_a_point_is_a_tie_and_lru_stays(capsys):
    """At your size a policy ahead of LRU by 0.0014 or 0.09 points ties with it (a lead of at most
    0.1 point, as on the workload map): LRU, vLLM's default, stays the advice and the line names the
    tie; 0.2 points ahead wins. A difference below 0.005 points is printed with the decimals that
    keep its sign: -0.0014 reads -0.001 (it read +0.00)."""
    import numpy as np

    from wakman.cli.advise import _print

    prompt = 10_000_000
    curve = adv.LruCurve(
        hit_tokens=np.array([0, 4_000_000, 5_000_000]), prompt_tokens=prompt, requests=1000, block_size=16
    )

    def row(policy: str, hit_tokens: int) -> dict:
        return {
            "policy": policy,
            "mode": "cache",
            "capacity_blocks": 2,
            "hit_rate": hit_tokens / prompt,
            "hit_tokens": hit_tokens,
            "prompt_tokens": prompt,
        }

    # 1e-4 of the prompt tokens is 0.01 point: 140 tokens 0.0014 point, 9,000 tokens 0.09
    rows = [row("lru", 5_000_000), row("fifo", 4_999_860), row("sieve", 5_000_140), row("arc", 5_009_000)]
    names = ["lru", "fifo", "sieve", "arc"]
    report = adv.build_report(Path("t.jsonl"), curve, None, "cache", 0.95, names, [2], rows, 2, [])
    at = report["at_capacity"]
    assert at["best"] == "lru" and at["gain_points_vs_lru"] == 0
    assert at["tied_with_lru"] == ["fifo", "sieve", "arc"]
    report["wall_s"] = 0.0
    _print(report)
    out = capsys.readouterr().out
    yours = out[out.index("at your size:") :].splitlines()  # that table's columns: policy, rate, vs LRU
    cells = {w[0]: w[2] for w in map(str.split, yours) if w[:1] in (["fifo"], ["sieve"])}
    assert cells == {"fifo": "-0.001", "sieve": "+0.001"}
    assert "fifo, sieve, arc tie with it" in " ".join(out.split())
    ahead = [*rows, row("s3fifo", 5_020_000)]  # 0.2 point ahead: a win
    report = adv.build_report(
        Path("t.jsonl"), curve, None, "cache", 0.95, [*names, "s3fifo"], [2], ahead, 2, []
    )
    assert report["at_capacity"]["best"] == "s3fifo"
    assert report["at_capacity"]["gain_points_vs_lru"] == pytest.approx(0.2)
    # exactly 0.1 point ahead (0.201 against 0.2: 0.10000000000000009 in floating point) is a tie
    exact = [row("lru", 2_000_000), row("arc", 2_010_000)]
    report = adv.build_report(Path("t.jsonl"), curve, None, "cache", 0.95, ["lru", "arc"], [2], exact, 2, [])
    assert 100 * (exact[1]["hit_rate"] - exact[0]["hit_rate"]) > 0.1
    assert report["at_capacity"]["best"] == "lru" and report["at_capacity"]["tied_with_lru"] == ["arc"]
    # two candidates ahead of LRU within 0.1 point of each other: the other one is said to tie with
    # the best, in any order of --policies (it was not said, and with equal rates the order alone
    # named the best)
    pair = [row("lru", 5_000_000), row("sieve", 5_020_000), row("s3fifo", 5_032_000), row("arc", 5_040_000)]
    for order in (["lru", "s3fifo", "sieve", "arc"], ["lru", "arc", "sieve", "s3fifo"]):
        ranked = sorted(pair, key=lambda r: order.index(r["policy"]))
        report = adv.build_report(Path("t.jsonl"), curve, None, "cache", 0.95, order, [2], ranked, 2, [])
        at = report["at_capacity"]
        assert at["best"] == "arc" and at["tied_with_best"] == ["s3fifo"]  # sieve is 0.2 point behind
        report["wall_s"] = 0.0
        _print(report)
        assert "s3fifo ties with it, within 0.1 point: the run does not" in " ".join(
            capsys.readouterr().out.split()
        )


def test_human_tokens_shows_signs_and_units():
    assert adv.human_tokens(4_450_304) == "4.45 M"
    assert adv.human_tokens(-4_450_304) == "-4.45 M"
    assert adv.human_tokens(6_700, signed=True) == "+6.7 k"
    assert adv.human_tokens(-113_200, signed=True) == "-113.2 k"
    assert adv.human_tokens(0, signed=True) == "0"
    assert adv.human_tokens(2.5e9) == "2.50 G"


def test_a_plot_that_cannot_be_written_keeps_the_output(trace_file):
    """`--plot` to a full device: the advice is still printed (stdout), then one error line naming
    --plot and exit 2."""
    args = [
        "advise",
        str(trace_file),
        "--capacity-blocks",
        "600",
        "--points",
        "2",
        "--policies",
        "lru,s3fifo",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "wakman.cli.main", *args, "--jobs", "1", "--json", "--plot", "/dev/full"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["at_capacity"]["capacity_blocks"] == 600
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --plot /dev/full: not written")
    assert "Traceback" not in proc.stderr


def test_the_sweep_table_marks_sizes_where_requests_were_rejected(trace_file):
    """Serve mode at a cache smaller than the longest prompts rejects them and measures the rest:
    the table marks that hit rate (it can exceed the ceiling, over a few short requests)."""
    args = ["advise", str(trace_file), "--mode", "serve", "--capacity-blocks", "8", "--policies", "lru"]
    result = CliRunner().invoke(app, [*args, "--points", "2", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.strip().startswith("8 *"))
    assert line.rstrip().endswith(" r"), line
    assert "r: some requests were too long for that cache" in result.stdout
    as_json = CliRunner().invoke(app, [*args, "--points", "2", "--jobs", "1", "--json"])
    rows = json.loads(as_json.stdout)["sweep"]
    assert any(r["capacity_blocks"] == 8 and r["rejected"] > 0 for r in rows)


def test_hint_mode_runs_beside_the_policies_and_is_never_the_best(trace_file, reqs):
    """``--sessions`` adds chain-lru's hint mode (told each request's session id and each session's
    end, ``--session-ends-after-s`` after its last request, 0 s by default) at every sweep size: the
    library's run of it; it is never named the best policy, here where it hits most too."""
    base = ["advise", str(trace_file), "--capacity-blocks", "1500", "--policies", "lru,chain-lru"]
    base += ["--points", "2", "--jobs", "1", "--json", "--sessions"]
    told = {}
    for after in (None, 60.0):
        result = CliRunner().invoke(app, base + ([] if after is None else ["--session-ends-after-s", "60"]))
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        ends = 0.0 if after is None else after
        assert out["hint_mode"]["policy"] == HINT_MODE and out["hint_mode"]["session_ends_after_s"] == ends
        rows = {r["policy"]: r for r in out["at_capacity"]["rows"]}
        params = {"policy_params": {"sessions": True}, "session_ends_after_s": ends}
        told[after] = simulate(reqs, "chain-lru", 1500, mode="cache", **params).hit_rate
        assert rows[HINT_MODE]["hit_rate"] == told[after]
        sizes = {r["capacity_blocks"] for r in out["sweep"] if r["policy"] == HINT_MODE}
        assert sizes == set(out["sweep_capacities_blocks"])
        assert out["at_capacity"]["best"] in ("lru", "chain-lru")
        assert HINT_MODE in out["smallest_within_target"]
    assert told[None] > max(rows["lru"]["hit_rate"], rows["chain-lru"]["hit_rate"])
    assert told[None] != told[60.0]


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--session-ends-after-s", "5"], "--session-ends-after-s"),
        (["--sessions", "--session-ends-after-s", "-1"], "--session-ends-after-s"),
        (["--sessions"], "--sessions"),  # the bundled Mooncake trace has no session ids
        (["--target", "0"], "--target"),
        (["--target", "1.5"], "--target"),
        (["--capacity-blocks", "0"], "--capacity-blocks"),
        (["--model", "llama-9000"], "--model"),
        (["--gpu-memory", "10"], "--gpu-memory"),
        (
            ["--gpu-memory", "inf", "--model", "Qwen/Qwen3-8B"],
            "--gpu-memory must be a finite number > 0 and at most",
        ),
        (["--policies", "lru,nope"], "--policies"),
        (["--mode", "fast"], "--mode"),
        (["--model", "Qwen/Qwen3-8B", "--kv-bytes-per-token", "10"], "--model"),
        (["--model", "Qwen/Qwen3-8B", "--kv-dtype", "int3"], "int3"),
    ],
)
def test_bad_input_exits_2(args, flag):
    result = CliRunner().invoke(app, ["advise", *args])
    assert result.exit_code == 2, result.output
    assert flag in result.output


def test_gpu_memory_out_of_range_fails_at_the_first_request(tmp_path):
    """A --gpu-memory the cache cannot take is refused at the trace's first request: a broken
    second line is never reached (the check waited for the whole trace)."""
    path = tmp_path / "t.jsonl"
    row = {"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]}
    path.write_text(json.dumps(row) + "\n" + "{not json\n")
    result = CliRunner().invoke(
        app, ["advise", str(path), "--gpu-memory", "1e5", "--kv-bytes-per-token", "1"]
    )
    assert result.exit_code == 2, result.output
    assert "--gpu-memory 100000 GiB holds" in result.output and "line 2" not in result.output


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--prefill-tps", "0"), ("--decode-tps", "-5"), ("--max-running", "0"), ("--prefill-tps", "nan")],
)
def test_serve_flags_are_checked_before_the_trace_is_read(tmp_path, flag, value):
    """A bad server flag in serve mode is the error, not the malformed trace it was given with: the
    flags are checked before the trace is read, as every command's are."""
    path = tmp_path / "t.jsonl"
    path.write_text("{not json\n")
    malformed = CliRunner().invoke(app, ["advise", str(path), "--mode", "serve"])
    assert malformed.exit_code == 2 and "not valid JSON" in malformed.output  # the trace alone
    result = CliRunner().invoke(app, ["advise", str(path), "--mode", "serve", flag, value])
    assert result.exit_code == 2, result.output
    assert flag in result.output and "not valid JSON" not in result.output, result.output


def test_unknown_model_lists_close_names():
    result = CliRunner().invoke(app, ["advise", "--model", "Qwen2.5-7B-Instrukt"])
    assert result.exit_code == 2
    assert "Qwen/Qwen2.5-7B-Instruct" in result.output


def test_config_missing_field_exits_2(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_hidden_layers": 32, "torch_dtype": "bfloat16", "hidden_size": 4096}))
    result = CliRunner().invoke(app, ["advise", "--model-config", str(path)])
    assert result.exit_code == 2
    assert "--model-config" in result.output and "num_key_value_heads" in result.output


def test_prefix_histogram_survives_compaction(reqs, curve):
    """Tiny position ranges force the Fenwick tree to renumber often; the lookups must not notice."""
    import numpy as np

    from wakman import _core

    scan = _core.TraceScan(stack_distances=True, min_positions=4)
    for r in reqs:
        scan.replay_request(
            r.block_keys, r.max_hit_blocks, r.full_blocks, r.output_keys, r.arrival_s, r.block_size
        )
    assert scan.compactions > 10
    assert np.array_equal(np.concatenate(([0], np.cumsum(scan.prefix_histogram()))), curve.hit_tokens)


def test_a_size_that_rejects_requests_is_not_an_answer():
    """Serve mode leaves rejected requests out of the hit rate: a cache too small for some prompts
    can look good over the rest, so it never counts as reaching the target."""
    rows = [
        {"policy": "lru", "capacity_blocks": 5, "hit_rate": 0.9, "rejected": 40},
        {"policy": "lru", "capacity_blocks": 50, "hit_rate": 0.2, "rejected": 0},
        {"policy": "lru", "capacity_blocks": 500, "hit_rate": 0.8, "rejected": 0},
    ]
    assert adv.smallest_sampled(rows, "lru", 0.7) == (500, 50)


def test_a_saturated_run_is_not_an_answer():
    """A size whose modelled server saturated reports an overloaded queue's hit rate: it never
    counts as reaching the target, even above it; the next unsaturated size that reaches it does."""
    rows = [
        {"policy": "lru", "capacity_blocks": 50, "hit_rate": 0.2, "saturated": True},
        {"policy": "lru", "capacity_blocks": 100, "hit_rate": 0.9, "saturated": True},
        {"policy": "lru", "capacity_blocks": 200, "hit_rate": 0.8, "saturated": False},
    ]
    assert adv.smallest_sampled(rows, "lru", 0.7) == (200, 100)
    assert adv.smallest_sampled(rows[:2], "lru", 0.7) == (None, 100)


def test_serve_mode_flags_saturated_runs_and_takes_no_answer_from_them(tmp_path, wide_console):
    """Two 100-block prompts take turns every 0.1 s on one running slot whose decode takes 2 s: the
    modelled server saturates at every size (prefill-bound where they evict each other, slot-bound
    where both stay), each run's flag checked against the simulator's own run. The command warns
    with both remedies, marks each saturated cell ``s`` with a legend, and answers no smallest
    cache within the target from those runs (at 250 blocks they hit 97 %)."""
    from wakman.simulation import ServerModel
    from wakman.simulation import simulate as serve

    block, gap, tokens = 16, 0.1, 1600
    reqs = [
        Request(
            arrival_s=i * gap,
            block_keys=[(i % 2) * 1000 + b + 1 for b in range(tokens // block)],
            prompt_tokens=tokens,
            output_tokens=79,
            block_size=block,
        )
        for i in range(100)
    ]
    path = tmp_path / "turns.jsonl"
    write_trace(reqs, path, "native")
    server = ["--prefill-tps", "8000", "--decode-tps", "40", "--max-running", "1"]
    args = ["advise", str(path), "--mode", "serve", *server, "--policies", "lru,fifo"]
    args += ["--capacity-blocks", "250", "--points", "3", "--jobs", "1"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    model = ServerModel(prefill_tokens_per_s=8000, decode_tokens_per_s=40, max_running=1)
    saturated = {}
    for row in out["sweep"]:
        run = serve(reqs, row["policy"], row["capacity_blocks"], server=model).as_flat_dict()
        assert row["saturated"] == run["saturated"] and row["hit_rate"] == run["hit_rate"]
        saturated.setdefault(row["policy"], []).extend([row["capacity_blocks"]] * row["saturated"])
    assert len(saturated["lru"]) >= 5 and 250 in saturated["lru"]
    at = {r["policy"]: r for r in out["at_capacity"]["rows"]}
    assert at["lru"]["saturated"] and at["lru"]["hit_rate"] >= out["target_hit_rate"]  # the case at stake
    for name in ("lru", "fifo"):
        entry = out["smallest_within_target"][name]
        assert entry["capacity_blocks"] is None and entry["saturated_blocks"] == sorted(saturated[name])
    warning = next(w for w in out["warnings"] if "saturated in" in w)
    total = sum(map(len, saturated.values()))
    assert f"saturated in {total} of {len(out['sweep'])} runs" in warning
    assert "raise --prefill-tps" in warning and "raise --max-running" in warning
    assert "at your size: lru, fifo" in warning
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 0, text.output
    line = next(x for x in text.stdout.splitlines() if x.strip().startswith("250 *"))
    cell = f"{100 * at['lru']['hit_rate']:.2f}"
    assert line.split()[2:] == [cell, "s", cell, "s"], line
    assert "s: the modelled server saturated" in text.stdout
    # the best at your size is a saturated run's: its line says so, and the JSON flags it
    assert out["at_capacity"]["best_saturated"] is at[out["at_capacity"]["best"]]["saturated"] is True
    best = next(x for x in text.stdout.splitlines() if x.startswith("best at your size"))
    assert "its modelled server saturated" in best, best
    assert "no answer: not reached by an unsaturated run" in text.stdout


# --- review fixes ----------------------------------------------------------------------------------


def test_a_transformers_5_config_names_its_dtype_dtype(tmp_path):
    """transformers 5 saves ``dtype`` where 4 saved ``torch_dtype``: 2 * 32 * 8 * 128 * 2 bytes."""
    path = tmp_path / "config.json"
    fields = {
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
    }
    path.write_text(json.dumps({**fields, "dtype": "bfloat16"}))
    assert config_layout(path).bytes_per_token == 131072
    with pytest.raises(ValueError, match="--kv-dtype"):
        kv_layout(fields, "cfg")


def test_the_infinite_cache_has_no_smallest_size(trace_file):
    result = CliRunner().invoke(
        app,
        ["advise", str(trace_file), "--policies", "lru,infinite", "--points", "2", "--jobs", "1", "--json"],
    )
    assert result.exit_code == 0, result.output
    assert set(json.loads(result.stdout)["smallest_within_target"]) == {"lru"}


def test_serve_mode_does_not_promise_the_ceiling(trace_file, curve, tmp_path):
    """A cache that holds every distinct block hits the ceiling in cache mode only: in serve mode
    requests that overlap still miss what is being computed, and the warning says so (on stderr too,
    with --json, as simulate's warnings); a plot drawn is named there."""
    args = ["advise", str(trace_file), "--capacity-blocks", str(curve.distinct_blocks + 10), "--points", "2"]
    for mode, claim in (("cache", True), ("serve", False)):
        result = CliRunner().invoke(
            app, [*args, "--mode", mode, "--policies", "lru", "--jobs", "1", "--json"]
        )
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert any("holds every distinct block" in w for w in out["warnings"])
        assert any("any policy hits the ceiling" in w for w in out["warnings"]) == claim
        assert "warning: " in result.stderr and "holds every distinct block" in result.stderr  # as simulate's
    plotted = CliRunner().invoke(
        app, [*args, "--policies", "lru", "--jobs", "1", "--plot", tmp_path / "a.png"]
    )
    assert plotted.exit_code == 0, plotted.output
    assert f"wrote {tmp_path / 'a.png'}" in plotted.stderr and (tmp_path / "a.png").stat().st_size > 1000


def test_a_cache_of_exactly_every_distinct_block_is_told_so(trace_file, reqs, curve):
    """At exactly the trace's distinct blocks a cache-mode run evicts nothing (the simulator's own
    count), so the warning holds there too; one block fewer evicts and gets none."""
    from wakman.simulation import simulate

    exact = curve.distinct_blocks
    for capacity, holds in ((exact, True), (exact - 1, False)):
        assert (simulate(reqs, "fifo", capacity, mode="cache").evictions == 0) == holds
        args = ["--capacity-blocks", str(capacity), "--points", "2", "--mode", "cache", "--policies", "lru"]
        result = CliRunner().invoke(app, ["advise", str(trace_file), *args, "--jobs", "1", "--json"])
        assert result.exit_code == 0, result.output
        warned = any("holds every distinct block" in w for w in json.loads(result.stdout)["warnings"])
        assert warned == holds


def test_a_trace_without_reuse_needs_the_smallest_cache_not_none():
    """One request: the ceiling is 0 tokens, which any cache reaches; LRU's answer is the smallest
    cache there is, 1 block (it said 0, below --capacity-blocks' own minimum), as for the others."""
    one = [Request(arrival_s=0.0, block_keys=[1, 2], prompt_tokens=64, output_tokens=1, block_size=32)]
    curve = adv.lru_curve(one)
    assert curve.ceiling_tokens == 0 and curve.smallest_within(0.95) == 1


def test_advise_takes_the_kv_cache_tester_arrival_process_simulate_takes(tmp_path):
    """A kv-cache-tester trace's conversations start at a seeded Poisson rate that --rate and --seed
    set in simulate, sweep and stats; advise had neither flag, so it could not answer for the
    arrival process a simulate run used. Its LRU row at your size is simulate's run of that one."""
    folder = tmp_path / "conversations"
    folder.mkdir()
    for c in range(12):
        turns = [
            {"t": 20.0 * t, "type": "n", "in": 64 * (4 + 3 * t), "out": 1, "hash_ids": list(range(4 + 3 * t))}
            for t in range(4)
        ]
        conversation = {"id": f"c{c}", "block_size": 64, "hash_id_scope": "local", "requests": turns}
        (folder / f"c{c:02}.json").write_text(json.dumps(conversation))
    for seed in ("1", "2"):
        flags = ["--rate", "0.5", "--seed", seed, "--capacity-blocks", "20"]
        advised = CliRunner().invoke(
            app,
            ["advise", str(folder), *flags, "--policies", "lru", "--points", "2", "--jobs", "1", "--json"],
        )
        assert advised.exit_code == 0, advised.output
        at = json.loads(advised.stdout)["at_capacity"]
        lru = next(r for r in at["rows"] if r["policy"] == "lru")
        simulated = CliRunner().invoke(
            app, ["simulate", str(folder), *flags, "--policy", "lru", "--mode", "cache", "--json"]
        )
        assert simulated.exit_code == 0, simulated.output
        assert lru["hit_rate"] == json.loads(simulated.stdout.strip().splitlines()[-1])["hit_rate"]


def _small_trace(path: Path, rows: list[tuple[float, list[int], int]]) -> Path:
    write_trace(
        [
            Request(arrival_s=t, block_keys=k, prompt_tokens=p, output_tokens=4, block_size=32)
            for t, k, p in rows
        ],
        path,
        "native",
    )
    return path


def test_a_trace_without_reuse_and_a_cache_that_rejects_everything_are_said_plainly(tmp_path):
    """No prefix reuse: advise gave "LRU reaches it at 1 blocks" and a best policy for a ceiling of
    0; every request too long for the cache (serve mode): a best policy at 0.0000 over no request."""
    noreuse = _small_trace(
        tmp_path / "noreuse.jsonl", [(float(i), [10 * i + 1, 10 * i + 2], 64) for i in range(20)]
    )
    result = CliRunner().invoke(app, ["advise", str(noreuse), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert "no prefix reuse" in " ".join(result.stderr.split())
    assert "1 block = 32 tokens" in result.stdout and "1 blocks" not in result.stdout
    one = _small_trace(tmp_path / "one.jsonl", [(0.0, [1, 2, 3], 100)])
    args = ["advise", str(one), "--mode", "serve", "--capacity-blocks", "2", "--policies", "lru,s3fifo"]
    result = CliRunner().invoke(app, [*args, "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert "every request is too long for your cache (2 blocks)" in " ".join(result.stderr.split())


def test_a_hybrid_models_state_layers_hold_no_per_token_kv():
    """Mamba or linear-attention layers keep a fixed state per sequence: only the attention layers
    of a hybrid count (every layer was counted: 8x Jamba's KV, 4x Qwen3-Next's). Closed forms:
    2 * attention layers * KV heads * head_dim * 2 bytes."""
    base = {"num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16"}
    jamba = {**base, "num_hidden_layers": 32, "attn_layer_period": 8, "attn_layer_offset": 4}
    assert kv_layout(jamba).bytes_per_token == 2 * 4 * 8 * 128 * 2
    qwen_next = {**base, "num_hidden_layers": 48, "full_attention_interval": 4, "num_key_value_heads": 2}
    assert kv_layout(qwen_next).bytes_per_token == 2 * 12 * 2 * 128 * 2
    kinds = ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 6
    typed = {**base, "num_hidden_layers": 24, "layer_types": kinds}
    assert kv_layout(typed).bytes_per_token == 2 * 6 * 8 * 128 * 2
    nemotron = {**base, "num_hidden_layers": 8, "hybrid_override_pattern": "M-M*-M*M"}
    assert kv_layout(nemotron).bytes_per_token == 2 * 2 * 8 * 128 * 2
    sliding = {**base, "num_hidden_layers": 4, "layer_types": ["sliding_attention", "full_attention"] * 2}
    assert kv_layout(sliding).bytes_per_token == 2 * 4 * 8 * 128 * 2  # windows counted at full size
    with pytest.raises(ValueError, match="no attention layer"):
        kv_layout({**base, "num_hidden_layers": 4, "layer_types": ["mamba"] * 4})


def test_gpu_memory_gives_vllms_usable_blocks(tmp_path):
    """vLLM divides the KV memory into num_gpu_blocks blocks, block 0 its null block: the cache
    holds one fewer (the simulator's capacity). 1 GiB of 4,096-byte blocks (128 B a token, 32-token
    blocks): 262,144 blocks, 262,143 usable (advise used all 262,144)."""
    path = _small_trace(tmp_path / "t.jsonl", [(float(i), [i % 3 + 1, 10 + i], 64) for i in range(30)])
    args = ["advise", str(path), "--gpu-memory", "1", "--kv-bytes-per-token", "128", "--jobs", "1"]
    result = CliRunner().invoke(app, [*args, "--policies", "lru", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["at_capacity"]["capacity_blocks"] == 1024**3 // (128 * 32) - 1


def test_the_advice_plot_crosses_saturated_runs(monkeypatch, tmp_path):
    """The table marks a saturated serve-mode run ``s``; the plot drew it as any other point."""
    pytest.importorskip("matplotlib")
    import numpy as np

    from wakman.experiments import plots

    curve = adv.LruCurve(hit_tokens=np.array([0, 40, 50]), prompt_tokens=100, requests=10, block_size=16)
    rows = [
        {"policy": "s3fifo", "mode": "serve", "capacity_blocks": c, "hit_rate": h, "saturated": s}
        for c, h, s in ((1, 0.3, True), (2, 0.45, False))
    ]
    result = {"trace": "t.jsonl", "mode": "serve", "sweep": rows, "target_hit_rate": 0.475, "target": 0.95}
    result["at_capacity"] = None
    drawn = {}

    def keep(fig, path):
        ax = fig.axes[0]
        drawn.update({line.get_label(): (list(line.get_xdata()), line.get_marker()) for line in ax.lines})
        return path

    monkeypatch.setattr(plots, "save_figure", keep)
    plots.plot_advice(result, curve, None, tmp_path / "a.png")
    crossed = [v for k, v in drawn.items() if k.startswith("x: modelled server saturated")]
    assert crossed == [([1], "x")]


def test_tensor_parallel_stores_the_kv_as_vllm_splits_it():
    """--tensor-parallel N: the replica's KV bytes per token over its N GPUs (closed forms): GQA's
    KV heads split, at least one a GPU (Qwen2.5-7B's 4 heads on 8 GPUs: each stored twice); an MLA
    latent on every GPU (DeepSeek-V3: 8 times). --gpu-memory is the replica's, so its blocks follow."""
    llama70 = model_layout("meta-llama/Llama-3.1-70B-Instruct", tensor_parallel=8)
    assert llama70.bytes_per_token == 2 * 80 * 8 * 128 * 2  # 1 head on each of 8 GPUs: no copy
    qwen = model_layout("Qwen/Qwen2.5-7B-Instruct")
    assert (
        model_layout("Qwen/Qwen2.5-7B-Instruct", tensor_parallel=8).bytes_per_token
        == 2 * qwen.bytes_per_token
    )
    assert model_layout("Qwen/Qwen2.5-7B-Instruct", tensor_parallel=2).bytes_per_token == qwen.bytes_per_token
    deepseek = model_layout("deepseek-ai/DeepSeek-V3")
    assert model_layout("deepseek-ai/DeepSeek-V3", tensor_parallel=8).bytes_per_token == 8 * 61 * 576 * 2
    assert deepseek.bytes_per_token == 61 * 576 * 2
    with pytest.raises(ValueError, match="do not split"):
        model_layout("meta-llama/Llama-3.1-8B-Instruct", tensor_parallel=3)  # 8 heads over 3 GPUs
    at8 = model_layout("deepseek-ai/DeepSeek-V3", tensor_parallel=8)
    assert at8.blocks_in(640, 64) == 640 * 2**30 // (8 * 61 * 576 * 2 * 64) - 1  # 80 GiB a GPU
