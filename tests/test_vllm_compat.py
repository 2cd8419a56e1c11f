"""The start-up check: supported vLLM releases, and the stock code wakman's hooks rely on."""

from __future__ import annotations

import pytest

from vllm_support import need_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.bare_vllm]
need_vllm()

from vllm.v1.core.block_pool import BlockPool  # noqa: E402

from wakman.vllm_plugin import compat  # noqa: E402


def test_the_installed_vllm_passes():
    import vllm

    assert compat.check_vllm_version() == vllm.__version__


@pytest.mark.parametrize("version", ["0.31.2", "0.35.0", "1.0.0"])
def test_other_versions_are_refused_naming_the_supported_ones(version):
    with pytest.raises(
        compat.UnsupportedVllmVersion, match=r"supports vLLM 0\.32\.x, 0\.33\.x, 0\.34\.x; found vLLM"
    ):
        compat.check_vllm_version(version)


def test_a_changed_stock_method_is_refused_by_name(monkeypatch):
    """A release that changes what a hook relies on fails on that change, whatever its number."""
    stock = BlockPool.free_blocks

    def free_blocks(self, ordered_blocks):
        for block in ordered_blocks:
            block.ref_cnt -= 1
        self.free_block_queue.append_n(list(ordered_blocks))

    monkeypatch.setattr(BlockPool, "free_blocks", free_blocks)
    with pytest.raises(compat.UnsupportedVllmVersion, match=r"BlockPool\.free_blocks") as err:
        compat.check_vllm_version("0.33.1")
    assert "touch" not in str(err.value)
    monkeypatch.setattr(BlockPool, "free_blocks", stock)
    compat.check_vllm_version("0.33.1")


def _documented():
    def f(x):
        """Doc."""
        # a comment
        return [i for i in range(x) if i % 2]

    return f


def _reformatted():
    def f(x):
        return [i for i in range(x) if i % 2]

    return f


def _changed():
    def f(x):
        return [i for i in range(x) if i % 3]

    return f


def _annotated():
    def f(x: int) -> list[int]:
        out: list[int] = [i for i in range(x) if i % 2]
        return out

    return f


def _retyped():
    def f(x: float) -> tuple[int, ...]:
        out: tuple[int, ...] = [i for i in range(x) if i % 2]
        return out

    return f


def test_fingerprints_ignore_docstrings_comments_and_layout():
    same, also, other = (compat.fingerprint(g()) for g in (_documented, _reformatted, _changed))
    assert same == also != other


def test_fingerprints_ignore_type_annotations():
    """An annotation changes nothing at run time: a release that only retyped a method passes
    (``Sequence[...]`` to ``Iterable[...]`` in ``BlockPool.touch`` refused a working vLLM)."""
    assert compat.fingerprint(_annotated()) == compat.fingerprint(_retyped())


def test_a_method_without_readable_source_is_refused_in_one_line(monkeypatch):
    """A relied-on method whose source cannot be read (a compiled or .pyc-only vLLM) is refused as
    a changed one, by name; ``inspect.getsource``'s OSError escaped as a traceback."""
    namespace: dict = {}
    exec("def touch(self, blocks):\n    pass\n", namespace)  # no file to read its source from
    monkeypatch.setattr(BlockPool, "touch", namespace["touch"])
    assert compat.installed_fingerprints()["BlockPool.touch"] == compat.UNREADABLE
    with pytest.raises(compat.UnsupportedVllmVersion, match=r"BlockPool\.touch"):
        compat.check_vllm_version("0.33.1")


def test_the_schedulers_relied_on_methods_are_checked(monkeypatch):
    """WakmanScheduler relies on ``finish_requests`` returning the requests it finished: a release
    that returned their ids passed the check and then killed the engine at the first abort."""
    from vllm.v1.core.sched.scheduler import Scheduler

    stock = Scheduler.finish_requests

    def finish_requests(self, request_ids, finished_status):
        stock(self, request_ids, finished_status)
        return list(request_ids)

    monkeypatch.setattr(Scheduler, "finish_requests", finish_requests)
    with pytest.raises(compat.UnsupportedVllmVersion, match=r"Scheduler\.finish_requests"):
        compat.check_vllm_version("0.33.1")


def test_every_stock_queue_method_is_filled():
    assert compat.missing_queue_methods() == []


# ------------------------------------------------------------------ the CPU offload tier's check


def test_the_installed_vllm_passes_the_offload_check():
    import vllm

    assert compat.check_offload_vllm_version() == vllm.__version__


@pytest.mark.parametrize("version", ["0.31.2", "0.35.0"])
def test_the_offload_check_refuses_other_versions_saying_what_to_take_out(version):
    with pytest.raises(compat.UnsupportedVllmVersion) as err:
        compat.check_offload_vllm_version(version)
    message = str(err.value)
    assert "supports vLLM 0.32.x, 0.33.x, 0.34.x; found vLLM" in message
    assert "out of --kv-transfer-config" in message and "--scheduler-cls" not in message


def test_a_changed_offload_manager_method_is_refused_by_name(monkeypatch):
    """A manager whose calls to its policy changed fails on that method, whatever its number."""
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    def lookup(self, key, req_context):
        return self._policy.get(key) is not None

    monkeypatch.setattr(CPUOffloadingManager, "lookup", lookup)
    with pytest.raises(compat.UnsupportedVllmVersion, match=r"CPUOffloadingManager\.lookup") as err:
        compat.check_offload_vllm_version("0.33.1")
    assert "prepare_store" not in str(err.value)
    monkeypatch.undo()
    compat.check_offload_vllm_version("0.33.1")


def test_the_installed_code_is_one_release_s_and_a_mixture_is_refused(monkeypatch):
    """The installed vLLM's methods all match its own release, for both checks; methods that each
    match some release but no release as a whole (the installed manager with ``touch`` gained or
    lost: 0.34 dropped it) are refused, naming each method's releases."""
    import vllm

    for relied_on, known in (
        (compat.RELIED_ON, compat.KNOWN_FINGERPRINTS),
        (compat.OFFLOAD_RELIED_ON, compat.KNOWN_OFFLOAD_FINGERPRINTS),
    ):
        assert vllm.__version__ in compat.common_releases(compat.installed_fingerprints(relied_on), known)
    found = compat.installed_fingerprints(compat.OFFLOAD_RELIED_ON)
    mixed = dict(found)
    touch = next(
        fp for fp in compat.KNOWN_OFFLOAD_FINGERPRINTS["CPUOffloadingManager.touch"] if fp != compat.ABSENT
    )
    mixed["CPUOffloadingManager.touch"] = None if found["CPUOffloadingManager.touch"] else touch
    assert compat.changed_methods(mixed, compat.KNOWN_OFFLOAD_FINGERPRINTS) == []
    assert compat.common_releases(mixed, compat.KNOWN_OFFLOAD_FINGERPRINTS) == set()
    monkeypatch.setattr(compat, "installed_fingerprints", lambda relied_on=compat.RELIED_ON: mixed)
    with pytest.raises(compat.UnsupportedVllmVersion, match="matches no single release") as err:
        compat.check_offload_vllm_version("0.33.1")
    assert "CPUOffloadingManager.touch (" in str(err.value)


def test_an_offload_policy_built_through_the_python_api_checks_the_version(monkeypatch):
    """vLLM's factory builds the policy (as ``LLM(..., kv_transfer_config=...)`` does) without the
    plugin's entry point seeing a command line that names wakman: building it refuses an
    unsupported vLLM all the same."""
    import vllm
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    from wakman.vllm_plugin import offload

    def build() -> object:
        manager = CPUOffloadingManager(
            8, cache_policy="WakmanS3FIFO", cache_policy_module_path=offload.__name__
        )
        return manager._policy

    offload.checked_vllm.cache_clear()
    monkeypatch.setattr(vllm, "__version__", "0.35.0")
    with pytest.raises(compat.UnsupportedVllmVersion, match=r"found vLLM 0\.35\.0") as err:
        build()
    assert "kv_transfer_config" in str(err.value)
    monkeypatch.undo()
    offload.checked_vllm.cache_clear()
    assert build().policy_name == "s3fifo"


def test_install_on_a_bare_pool_checks_the_version(monkeypatch):
    """``wakman.vllm_plugin.install(pool, policy)``, the public call for a bare vLLM pool, refuses an
    unsupported vLLM (or a changed relied-on method) as the scheduler does, naming the releases."""
    import vllm

    from wakman.policies import make_policy
    from wakman.vllm_plugin import block_pool, install

    block_pool._checked_vllm.cache_clear()
    monkeypatch.setattr(vllm, "__version__", "0.35.0")
    with pytest.raises(compat.UnsupportedVllmVersion, match=r"found vLLM 0\.35\.0") as err:
        install(BlockPool(9, enable_caching=True, hash_block_size=16), make_policy("lru", 8))
    assert "install" in str(err.value)
    monkeypatch.undo()
    block_pool._checked_vllm.cache_clear()
    found = compat.installed_fingerprints()
    changed = {**found, "BlockPool.free_blocks": "0000000000000000"}
    monkeypatch.setattr(compat, "installed_fingerprints", lambda relied_on=compat.RELIED_ON: changed)
    with pytest.raises(compat.UnsupportedVllmVersion, match=r"BlockPool\.free_blocks"):
        install(BlockPool(9, enable_caching=True, hash_block_size=16), make_policy("lru", 8))
    monkeypatch.undo()
    block_pool._checked_vllm.cache_clear()
    pool = install(BlockPool(9, enable_caching=True, hash_block_size=16), make_policy("lru", 8))
    assert block_pool.is_installed(pool)
