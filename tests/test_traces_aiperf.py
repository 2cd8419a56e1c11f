"""Files wakman writes are accepted by AIPerf's own Mooncake trace loader.

AIPerf is heavy and pins its own dependency versions, so it lives in a separate environment that
``make test`` builds (``.venv-aiperf``); ``WAKMAN_AIPERF_PYTHON`` points at its interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import MOONCAKE
from test_traces_formats import sample_requests
from wakman.traces import read_trace, write_trace

ROOT = Path(__file__).resolve().parents[1]
AIPERF_PYTHON = os.environ.get("WAKMAN_AIPERF_PYTHON", str(ROOT / ".venv-aiperf" / "bin" / "python"))

CHECK = """
import json, sys
from aiperf.dataset.loader.models import MooncakeTrace
from aiperf.dataset.loader.mooncake_trace import MooncakeTraceDatasetLoader
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
bad = [i for i, row in enumerate(rows) if not MooncakeTraceDatasetLoader.can_load(data=row)]
parsed = [MooncakeTrace.model_validate(row) for row in rows]
print(json.dumps({"rows": len(rows), "refused": bad,
                  "fields": [[p.timestamp, p.delay, p.input_length, p.output_length, p.hash_ids, p.session_id]
                             for p in parsed]}))
"""


def aiperf_check(path: Path) -> dict:
    if not Path(AIPERF_PYTHON).exists():
        if os.environ.get("CI"):
            pytest.fail(f"AIPerf environment missing at {AIPERF_PYTHON}: run `make test`")
        pytest.skip("AIPerf environment not built (make test builds .venv-aiperf)")
    out = subprocess.run([AIPERF_PYTHON, "-c", CHECK, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_aiperf_accepts_written_mooncake_rows(tmp_path):
    path = tmp_path / "mooncake.jsonl"
    requests = list(read_trace(MOONCAKE))[:500]
    write_trace(requests, path, "mooncake")
    result = aiperf_check(path)
    assert result["rows"] == 500 and result["refused"] == []
    for req, (ts, _delay, isl, osl, ids, _sid) in zip(requests, result["fields"], strict=True):
        assert ts == pytest.approx(req.arrival_s * 1000) and isl == req.prompt_tokens
        assert osl == req.output_tokens and ids == list(req.block_keys)


def test_aiperf_accepts_written_session_rows(tmp_path):
    path = tmp_path / "sessions.jsonl"
    write_trace(sample_requests(), path, "aiperf-sessions")
    result = aiperf_check(path)
    assert result["rows"] == 5 and result["refused"] == []
    # every turn at its arrival (AIPerf counts a delay from the previous answer, not its arrival)
    assert [f[0] for f in result["fields"]] == [0, 250, 1500, 2125, 4000]
    assert [f[1] for f in result["fields"]] == [None] * 5
