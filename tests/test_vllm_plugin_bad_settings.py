"""A ``WAKMAN_*`` value the plugin cannot use stops vLLM at start-up with one line naming
the variable (docs/vllm.md: "Bad values stop vLLM at start-up with a message naming the variable"),
from the ``vllm.general_plugins`` entry point as vLLM calls it (``load_general_plugins`` calls it
bare, so whatever it raises is a traceback)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from wakman.vllm_plugin.settings import PluginSettings, SettingsError


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"WAKMAN_POLICY": "wakman", "WAKMAN_INTERVAL_S": "nan"}, "WAKMAN_INTERVAL_S"),
        ({"WAKMAN_POLICY": "wakman", "WAKMAN_INTERVAL_S": "inf"}, "WAKMAN_INTERVAL_S"),
        ({"WAKMAN_POLICY": "wakman-plus", "WAKMAN_WINDOW_S": "nan"}, "WAKMAN_WINDOW_S"),
        ({"WAKMAN_POLICY": "wakman", "WAKMAN_CANDIDATES": "lru,lru"}, "WAKMAN_CANDIDATES"),
        ({"WAKMAN_POLICY": "wakman", "WAKMAN_CANDIDATES": "lru, LRU, s3fifo"}, "WAKMAN_CANDIDATES"),
    ],
)
def test_unusable_numbers_and_candidates_name_their_variable(env, variable):
    with pytest.raises(SettingsError, match=variable):
        PluginSettings.from_env(env)


@pytest.mark.vllm
@pytest.mark.bare_vllm
@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"WAKMAN_POLICY": "mru"}, "WAKMAN_POLICY"),
        ({"WAKMAN_POLICY": "wakman", "WAKMAN_INTERVAL_S": "soon"}, "WAKMAN_INTERVAL_S"),
        ({"WAKMAN_POLICY": "lru", "WAKMAN_REPLAY": "later"}, "WAKMAN_REPLAY"),
        ({"WAKMAN_POLICY": "lru", "WAKMAN_METRICS_DIR": sys.executable}, "WAKMAN_METRICS_DIR"),  # a file
    ],
)
def test_plugin_register_refuses_a_bad_setting_in_one_line(env, variable):
    from vllm_support import need_vllm

    need_vllm()
    code = "from wakman.vllm_plugin.plugin import register; register()"
    full = {k: v for k, v in os.environ.items() if not k.startswith("WAKMAN_") or k == "WAKMAN_REQUIRE_VLLM"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**full, **env}, timeout=300
    )
    lines = proc.stderr.strip().splitlines()  # vLLM's import may log a line or two first
    ours = [line for line in lines if line.startswith("wakman")]
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert ours == lines[-1:] and lines[-1].startswith("wakman: ") and variable in lines[-1], lines


@pytest.mark.vllm
@pytest.mark.bare_vllm
@pytest.mark.parametrize(
    ("env", "argv", "needle"),
    [
        (  # the offload tier's policy is checked at start-up too, not when vLLM builds the tier
            {"WAKMAN_OFFLOAD_POLICY": "bogus"},
            [
                "vllm",
                "serve",
                "M",
                "--kv-transfer-config",
                '{"cache_policy_module_path": "wakman.vllm_plugin.offload"}',
            ],
            "WAKMAN_OFFLOAD_POLICY='bogus'",
        ),
        (  # the wakman scheduler without the prefix cache it orders (was vLLM's engine-init traceback)
            {"WAKMAN_POLICY": "s3fifo"},
            [
                "vllm",
                "serve",
                "M",
                "--scheduler-cls",
                "wakman.vllm_plugin.WakmanScheduler",
                "--no-enable-prefix-caching",
            ],
            "--no-enable-prefix-caching",
        ),
    ],
)
def test_plugin_register_refuses_what_the_command_line_asks_in_one_line(env, argv, needle):
    from vllm_support import need_vllm

    need_vllm()
    code = f"import sys; sys.argv = {argv!r}; from wakman.vllm_plugin.plugin import register; register()"
    full = {k: v for k, v in os.environ.items() if not k.startswith("WAKMAN_") or k == "WAKMAN_REQUIRE_VLLM"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**full, **env}, timeout=300
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[-1].startswith("wakman: ") and needle in lines[-1], lines


@pytest.mark.vllm
@pytest.mark.bare_vllm
@pytest.mark.parametrize("scheduler", [False, True])
@pytest.mark.parametrize(
    "server",
    [["vllm", "serve", "M"], ["/venv/lib/vllm/entrypoints/openai/api_server.py", "--model", "M"]],
    ids=["vllm-serve", "python-m-api-server"],
)
def test_wakman_policy_without_the_wakman_scheduler_warns_once(scheduler, server):
    """``WAKMAN_POLICY`` set for a server that runs stock vLLM's scheduler (``vllm serve``, or
    ``python -m vllm.entrypoints.openai.api_server``, the README's form for a CPU build): one warning
    line (stock vLLM used to run without a word); none with ``--scheduler-cls``, and none in a
    process the server starts (it inherits the environment)."""
    from vllm_support import need_vllm

    need_vllm()
    argv = server + ["--scheduler-cls", "wakman.vllm_plugin.WakmanScheduler"] * scheduler
    child = f"import sys; sys.argv = {argv!r}; from wakman.vllm_plugin.plugin import register; register()"
    code = f"{child}\nimport subprocess\nsubprocess.run([sys.executable, '-c', {child!r}], check=True)"
    full = {k: v for k, v in os.environ.items() if not k.startswith("WAKMAN_") or k == "WAKMAN_REQUIRE_VLLM"}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**full, "WAKMAN_POLICY": "s3fifo"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("wakman: warning:")]
    if scheduler:
        assert warnings == []
    else:
        assert len(warnings) == 1 and "--scheduler-cls wakman.vllm_plugin.WakmanScheduler" in warnings[0]
