import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # test helpers (lcs_oracle, streams)

SHARED = Path(__file__).resolve().parents[1].parent / "shared"

MOONCAKE = SHARED / "traces" / "mooncake_conversation_trace.jsonl"
KV_TARBALL = SHARED / "traces" / "weka_claude_code_traces.tar.xz"
