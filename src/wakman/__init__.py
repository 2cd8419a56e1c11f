"""wakman: a workload-aware KV-cache manager for LLM serving."""

__version__ = "0.1.0"
