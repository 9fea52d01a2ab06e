"""The env registry: names, options and errors."""

from __future__ import annotations

import pytest

from jaxlab import envs


def test_make_returns_env_and_params_with_options_applied():
    env, params = envs.make("point-mass", max_steps=7, auto_reset=False)
    assert params.max_steps == 7 and env.auto_reset is False


def test_unknown_name_and_option_are_clear_errors():
    with pytest.raises(ValueError, match="unknown env name='nope'.*point-mass"):
        envs.make("nope")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['colour'\]"):
        envs.make("point-mass", colour="red")
    with pytest.raises(ValueError, match="max_steps"):
        envs.make("point-mass", max_steps=0)


def test_kinetix_option_errors():
    with pytest.raises(ValueError, match="needs level=PATH"):
        envs.make("kinetix-level")
    with pytest.raises(ValueError, match="at most one of"):
        envs.make("kinetix-s", level="a.json", levels=["b.json"])
    with pytest.raises(ValueError, match="action_type='bad'"):
        envs.make("kinetix-s", action_type="bad")
    with pytest.raises(ValueError, match="observation_type='bad'"):
        envs.make("kinetix-s", observation_type="bad")
    with pytest.raises(FileNotFoundError, match="missing.json"):
        envs.make("kinetix-s", level="missing.json")


def test_describe_lists_options():
    text = envs.describe("kinetix-s")
    assert "level" in text and "observation_type" in text
    assert envs.spec("kinetix-m").test_options["observation_type"] == "symbolic_flat"
