"""The vLLM plugin's options (``wakman.vllm_plugin.settings``, no vLLM needed): what each
``WAKMAN_*`` variable sets, and the one-line errors for values the plugin cannot use."""

from __future__ import annotations

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


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"WAKMAN_POLICY": "mru"}, "WAKMAN_POLICY='mru'"),
        ({"WAKMAN_POLICY": "lru", "WAKMAN_HYSTERESIS": "1"}, "only apply to wakman / wakman-plus"),
        ({"WAKMAN_POLICY": "wakman-plus", "WAKMAN_HYSTERESIS": "two"}, "not a number of points"),
        ({"WAKMAN_POLICY": "wakman-plus", "WAKMAN_HYSTERESIS": "-1"}, "0 to 100 points"),
        ({"WAKMAN_POLICY": "wakman", "WAKMAN_INTERVAL_S": "0"}, "must be > 0 seconds"),
        ({"WAKMAN_POLICY": "wakman", "WAKMAN_CANDIDATES": "lru"}, "give two or more"),
        ({"WAKMAN_REPLAY": "later"}, "WAKMAN_REPLAY='later'"),
    ],
)
def test_bad_values_are_refused_with_the_variable_named(env, message):
    with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
        PluginSettings.from_env(env)
