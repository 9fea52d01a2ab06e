"""``metra`` and ``csf``: unsupervised skill discovery with METRA (``jaxlab.rl.skills.metra``) or
CSF (``jaxlab.rl.skills.csf``) on a point env or a Kinetix morphology, run by the shared loop.

The two recipes differ only in ``method``; the wiring (seeds vmapped, data-parallel replay
batches, evaluation of coverage and zero-shot goal reaching, the skills PNG) is
``jaxlab.rl.skills.recipe_parts``. ``jaxlab eval RUN`` prints the coverage of the skills, of a
random and of the zero policy, and the goal success.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from jaxlab.core.config import ConfigError
from jaxlab.core.recipe import Recipe, register
from jaxlab.rl.skills.recipe_parts import SkillRecipeConfig, build


class _FixedMethod(SkillRecipeConfig):
    """A ``SkillRecipeConfig`` whose ``method`` is the recipe's own (its field default)."""

    def __post_init__(self):
        expected = type(self).__dataclass_fields__["method"].default
        if self.method != expected:
            raise ConfigError("method", self.method, f"'{expected}' (the recipe's method)")
        super().__post_init__()


@dataclasses.dataclass(frozen=True)
class MetraConfig(_FixedMethod):
    """``SkillRecipeConfig`` with ``method="metra"``."""

    method: str = "metra"


@dataclasses.dataclass(frozen=True)
class CsfConfig(_FixedMethod):
    """``SkillRecipeConfig`` with ``method="csf"``."""

    method: str = "csf"


def _register(name: str, config_cls: type, description: str) -> Recipe:
    return register(
        Recipe(
            name=name,
            config_cls=config_cls,
            build=build,
            description=description,
            presets_dir=Path(__file__).parent / "presets" / name,
            default_preset="cpu",
        )
    )


METRA = _register(
    "metra",
    MetraConfig,
    "METRA: skills that maximise (phi(s')-phi(s))^T z under a temporal-distance constraint "
    "(dual descent), SAC policy",
)
CSF = _register(
    "csf",
    CsfConfig,
    "CSF: contrastive successor features (contrastive phi, bottleneck reward, SF critics), "
    "unsupervised skills",
)
