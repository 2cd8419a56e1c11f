"""The vLLM plugin's options (``wakman.vllm_plugin.settings``, no vLLM needed): what each
``WAKMAN_*`` variable sets, and the one-line errors for values the plugin cannot use."""

from __future__ import annotations

import re

import pytest

from wakman.adaptive import PAPER, PLUS
from wakman.vllm_plugin.settings import PluginSettings, SettingsError


def test_defaults_are_stock_lru_and_the_presets():
    assert PluginSettings.from_env({}).policy == "lru"
    assert PluginSettings.from_env({}).adaptive is None
    assert PluginSettings.from_env({"WAKMAN_POLICY": "wakman-plus"}).adaptive == PLUS
    assert PluginSettings.from_env({"WAKMAN_POLICY": "Wakman "}).adaptive == PAPER
    assert PluginSettings.from_env({"WAKMAN_POLICY": "chain-lru"}).policy == "chain-lru"


def test_manager_variables_change_the_preset():
    env = {
        "WAKMAN_POLICY": "wakman-plus",
        "WAKMAN_INTERVAL_S": "5",
        "WAKMAN_CANDIDATES": "lru, s3fifo",
        "WAKMAN_HYSTERESIS": "0.5",
    }
    config = PluginSettings.from_env(env).adaptive
    assert config.interval_s == config.first_decision_s == 5.0 and config.window_s == PLUS.window_s
    assert config.candidates == ("lru", "s3fifo") and config.start_policy == "lru"
    assert config.hysteresis == pytest.approx(0.005)
    assert config.half_life_s == PLUS.half_life_s  # the rest is the preset's


def test_sessions_put_chain_lru_in_session_mode_wherever_it_runs():
    assert not PluginSettings.from_env({"WAKMAN_POLICY": "chain-lru"}).sessions
    assert PluginSettings.from_env({"WAKMAN_POLICY": "chain-lru", "WAKMAN_SESSIONS": "1"}).sessions
    plus = PluginSettings.from_env({"WAKMAN_POLICY": "wakman-plus", "WAKMAN_SESSIONS": "1"})
    assert plus.sessions and plus.adaptive.policy_params["chain-lru"] == {"sessions": True}
    assert PLUS.policy_params.get("chain-lru", {}).get("sessions") is None  # the preset is untouched


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"WAKMAN_POLICY": "mru"}, "WAKMAN_POLICY='mru'"),
        ({"WAKMAN_POLICY": "lru", "WAKMAN_HYSTERESIS": "1"}, "only apply to wakman / wakman-plus"),
        ({"WAKMAN_POLICY": "wakman-plus", "WAKMAN_HYSTERESIS": "two"}, "not a number of points"),
        ({"WAKMAN_POLICY": "wakman-plus", "WAKMAN_HYSTERESIS": "-1"}, "in [0, 100) points"),
        ({"WAKMAN_POLICY": "wakman", "WAKMAN_INTERVAL_S": "0"}, "WAKMAN_INTERVAL_S='0': interval_s must be"),
        # AdaptiveConfig's own bound (a millisecond), not a looser copy of it
        ({"WAKMAN_POLICY": "wakman", "WAKMAN_INTERVAL_S": "0.0005"}, "WAKMAN_INTERVAL_S='0.0005'"),
        ({"WAKMAN_POLICY": "wakman-plus", "WAKMAN_WINDOW_S": "inf"}, "WAKMAN_WINDOW_S='inf': window_s"),
        ({"WAKMAN_POLICY": "wakman", "WAKMAN_CANDIDATES": "lru"}, "give two or more"),
        ({"WAKMAN_REPLAY": "later"}, "WAKMAN_REPLAY='later'"),
        ({"WAKMAN_POLICY": "chain-lru", "WAKMAN_SESSIONS": "yes"}, "WAKMAN_SESSIONS='yes'"),
        ({"WAKMAN_POLICY": "s3fifo", "WAKMAN_SESSIONS": "1"}, "WAKMAN_SESSIONS=1 needs chain-lru"),
        ({"WAKMAN_POLICY": "wakman", "WAKMAN_SESSIONS": "1"}, "chain-lru among the candidates of wakman"),
    ],
)
def test_bad_values_are_refused_with_the_variable_named(env, message):
    with pytest.raises(SettingsError, match=re.escape(message)):
        PluginSettings.from_env(env)


def test_an_empty_variable_means_unset():
    """`WAKMAN_REPLAY= vllm serve ...` (set but empty) is the default, as for WAKMAN_SESSIONS and
    WAKMAN_POLICY."""
    assert PluginSettings.from_env({"WAKMAN_REPLAY": " "}).replay == PluginSettings.from_env({}).replay
    assert PluginSettings.from_env({"WAKMAN_POLICY": ""}).policy == "lru"
    assert PluginSettings.from_env({}).policy == "lru"
    assert PluginSettings.from_env({"WAKMAN_POLICY": "chain-lru", "WAKMAN_SESSIONS": ""}).sessions is False


@pytest.mark.parametrize(
    "var", ["WAKMAN_INTERVAL_S", "WAKMAN_WINDOW_S", "WAKMAN_HYSTERESIS", "WAKMAN_CANDIDATES"]
)
def test_a_blank_manager_variable_means_unset(var):
    """A manager variable set to blanks is unset too: with lru it was "only apply to wakman",
    with wakman "' ' is not a number of seconds"."""
    assert PluginSettings.from_env({"WAKMAN_POLICY": "lru", var: " "}).policy == "lru"
    assert PluginSettings.from_env({"WAKMAN_POLICY": "wakman", var: " \t"}).adaptive == PAPER


def test_a_replay_runs_inline_where_the_variable_is_set_but_blank():
    """``wakman replay --engine vllm`` runs its decisions inline unless ``WAKMAN_REPLAY`` says
    otherwise; set but blank (unset to the settings) it ran them in a thread."""
    from wakman.vllm_plugin.replay import with_replay_defaults

    for env in ({}, {"WAKMAN_REPLAY": ""}, {"WAKMAN_REPLAY": "  "}):
        assert PluginSettings.from_env(with_replay_defaults(env)).replay == "inline"
    assert PluginSettings.from_env(with_replay_defaults({"WAKMAN_REPLAY": "thread"})).replay == "thread"


@pytest.fixture
def loggers():
    """The ``wakman``, ``vllm`` and root loggers' state, restored after the test."""
    import logging

    names = ("wakman", "vllm", "")
    saved = {
        n: (logging.getLogger(n).handlers[:], logging.getLogger(n).level, logging.getLogger(n).propagate)
        for n in names
    }
    for n in ("wakman", "vllm"):
        logging.getLogger(n).handlers = []
    yield
    for n, (handlers, level, propagate) in saved.items():
        lg = logging.getLogger(n)
        lg.handlers, lg.propagate = handlers, propagate
        lg.setLevel(level)


def test_wakman_records_reach_the_handlers_vllm_has_when_they_are_emitted(loggers):
    """As in vLLM's API server: the plugin routes ``wakman`` before vLLM configures its logging;
    records go to vLLM's handlers of the moment, at vLLM's level, once each; without vLLM handlers
    they go to the root's."""
    import logging

    from wakman.vllm_plugin.plugin import log_through_vllm

    log_through_vllm()
    log_through_vllm()  # idempotent: one forwarder
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(f"{self.name}:{record.getMessage()}")

    root = logging.getLogger()
    root_handler = Collect()
    root_handler.name = "root"
    root.addHandler(root_handler)
    root.setLevel(logging.WARNING)
    log = logging.getLogger("wakman.vllm_plugin.scheduler")
    log.info("before vLLM: below the root's level")
    log.warning("before vLLM: warning")
    vllm_logger = logging.getLogger("vllm")
    first = Collect()
    first.name = "vllm1"
    vllm_logger.addHandler(first)  # vLLM configures its logging after the plugin loaded
    vllm_logger.setLevel(logging.INFO)
    log.info("policy line")
    log.debug("below vLLM's level")
    second = Collect()
    second.name = "vllm2"
    vllm_logger.handlers = [second]  # a reconfiguration replaces vLLM's handlers
    log.info("after reconfiguration")
    assert seen == [
        "root:before vLLM: warning",
        "vllm1:policy line",
        "vllm2:after reconfiguration",
    ]


def test_an_empty_sessions_variable_is_unset():
    assert not PluginSettings.from_env({"WAKMAN_POLICY": "lru", "WAKMAN_SESSIONS": " "}).sessions
