"""Bundled data: the Mooncake chat trace (kvcache-ai/Mooncake, FAST25-release
``traces/conversation_trace.jsonl``, Apache-2.0), gzipped, as the default trace."""

from importlib.resources import files
from pathlib import Path

BUNDLED_MOONCAKE = Path(str(files("wakman.data") / "mooncake_conversation_trace.jsonl.gz"))
BUNDLED_MOONCAKE_ATTRIBUTION = (
    "Mooncake conversation trace: kvcache-ai/Mooncake (FAST'25 release), Apache-2.0"
)
