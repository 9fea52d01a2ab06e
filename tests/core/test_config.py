"""Config resolution: defaults, presets, dotted overrides, and every error path."""

import dataclasses
import math
import re
from typing import Literal

import pytest

from jaxlab.core import config as C
from jaxlab.core.loop import LoopConfig


@dataclasses.dataclass(frozen=True)
class Optim:
    lr: float = 1e-3
    name: Literal["adam", "sgd"] = "adam"
    betas: tuple[float, ...] = (0.9, 0.95)


@dataclasses.dataclass(frozen=True)
class Model:
    layers: int = 2
    width: int = 32

    def __post_init__(self):
        if self.layers < 1:
            raise C.ConfigError("model.layers", self.layers, "an integer >= 1")


@dataclasses.dataclass(frozen=True)
class Cfg:
    seed: int = 0
    tag: str = "x"
    optim: Optim = Optim()
    model: Model = Model()
    loop: LoopConfig = LoopConfig()


def test_defaults_are_hashable_and_frozen():
    cfg = C.resolve(Cfg)
    assert hash(cfg) == hash(Cfg())
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 1


def test_overrides_parse_types():
    cfg = C.resolve(
        Cfg,
        overrides=[
            "optim.lr=3e-4",
            "model.layers=4",
            "optim.name=sgd",
            "tag=123",
            "optim.betas=[0.8, 0.99]",
        ],
    )
    assert cfg.optim.lr == pytest.approx(3e-4) and isinstance(cfg.optim.lr, float)
    assert cfg.model.layers == 4
    assert cfg.optim.name == "sgd"
    assert cfg.tag == "123"  # str fields keep the text verbatim
    assert cfg.optim.betas == (0.8, 0.99)


def test_preset_then_overrides(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("model:\n  layers: 6\n  width: 64\noptim:\n  lr: 0.01\n")
    cfg = C.resolve(Cfg, preset=C.load_yaml(p), overrides=["model.width=16"])
    assert (cfg.model.layers, cfg.model.width, cfg.optim.lr) == (6, 16, 0.01)


def test_int_accepted_for_float():
    assert C.resolve(Cfg, overrides=["optim.lr=1"]).optim.lr == 1.0


@pytest.mark.parametrize(
    "override, key, fragment",
    [
        ("optim.lrr=1", "optim.lrr", "did you mean 'lr'"),
        ("modle.layers=3", "modle", "did you mean 'model'"),
        ("model.layers=three", "model.layers", "int"),
        ("optim.name=rmsprop", "optim.name", "'adam', 'sgd'"),
        ("model.layers=0", "model.layers", ">= 1"),
        ("loop.total_steps=-5", "loop.total_steps", ">= 1"),
        ("optim=3", "optim", "mapping"),
    ],
)
def test_errors_name_key_value_and_expected(override, key, fragment):
    with pytest.raises(C.ConfigError) as e:
        C.resolve(Cfg, overrides=[override])
    assert e.value.key == key
    assert fragment in str(e.value)


def test_malformed_override():
    with pytest.raises(C.ConfigError, match="key=value"):
        C.resolve(Cfg, overrides=["optim.lr"])


def test_bad_preset_file(tmp_path):
    with pytest.raises(C.ConfigError, match="existing YAML"):
        C.load_yaml(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(C.ConfigError, match="mapping"):
        C.load_yaml(tmp_path / "list.yaml")


def test_yaml_round_trip_and_diff():
    cfg = C.resolve(Cfg, overrides=["model.width=8"])
    back = C.from_dict(Cfg, C.load_yaml_text(C.to_yaml(cfg)))
    assert back == cfg
    assert C.diff(cfg, Cfg()) == ["model.width"]


def test_replace_dotted():
    cfg = C.replace(Cfg(), **{"loop.total_steps": 7, "seed": 3})
    assert cfg.loop.total_steps == 7 and cfg.seed == 3


@dataclasses.dataclass(frozen=True)
class Graph:
    name: Literal["csbm", "karate"] = "csbm"
    phi: float = 0.0


@dataclasses.dataclass(frozen=True)
class WithVariant:
    graph: Graph = Graph()


def test_string_for_nested_config_selects_its_name():
    cfg = C.resolve(WithVariant, overrides=["graph=karate", "graph.phi=0.25"])
    assert cfg.graph == Graph(name="karate", phi=0.25)
    with pytest.raises(C.ConfigError, match="graph.name"):
        C.resolve(WithVariant, overrides=["graph=cora"])


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("optim.lr=abc", "config key 'optim.lr': got 'abc', expected a float"),
        ("optim.lr=true", "config key 'optim.lr': got True, expected a float"),
        ("optim.lr=.inf", "config key 'optim.lr': got inf, expected a finite float"),
        ("optim.lr=-.inf", "expected a finite float"),
        ("optim.lr=.nan", "expected a finite float"),
        ("optim.lr=[1]", "config key 'optim.lr'"),
    ],
)
def test_float_fields_name_the_key_and_reject_non_finite(override, fragment):
    with pytest.raises(C.ConfigError, match=re.escape(fragment)):
        C.resolve(Cfg, overrides=[override])
    assert C.resolve(Cfg, overrides=["optim.lr=1e-3"]).optim.lr == 1e-3  # YAML leaves it a str


@dataclasses.dataclass(frozen=True)
class Bounded:
    high: float = C.allow_nonfinite(math.inf)
    low: float = 0.0


def test_a_field_may_declare_that_it_allows_non_finite_values():
    assert C.resolve(Bounded, overrides=["high=-.inf"]).high == -math.inf
    with pytest.raises(C.ConfigError, match="'low'"):
        C.resolve(Bounded, overrides=["low=.inf"])


@dataclasses.dataclass(frozen=True)
class Inner:
    top_k: int = 2

    def __post_init__(self):
        if self.top_k < 1:
            raise C.ConfigError("top_k", self.top_k, "a positive integer")


@dataclasses.dataclass(frozen=True)
class Outer:
    moe: Inner = Inner()


@dataclasses.dataclass(frozen=True)
class Nested:
    model: Outer = Outer()


def test_nested_validation_errors_carry_the_full_dotted_key():
    with pytest.raises(C.ConfigError, match="config key 'model.moe.top_k': got 0") as e:
        C.resolve(Nested, overrides=["model.moe.top_k=0"])
    assert e.value.key == "model.moe.top_k"


def test_config_file_errors_name_the_file_not_a_preset_key(tmp_path):
    bad = tmp_path / "slice.yaml"
    bad.write_text("a: [1\n")
    with pytest.raises(C.ConfigError, match=r"config file .*slice\.yaml: expected valid YAML") as e:
        C.load_yaml(bad)
    assert "preset" not in str(e.value)
    bad.write_text("- 1\n")
    with pytest.raises(C.ConfigError, match="expected a YAML mapping at the top level"):
        C.load_yaml(bad)
    with pytest.raises(C.ConfigError, match="expected an existing YAML file"):
        C.load_yaml(tmp_path / "missing.yaml")
