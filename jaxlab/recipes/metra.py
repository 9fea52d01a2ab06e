"""``metra``: unsupervised skill discovery with METRA (``jaxlab.rl.skills.metra``) on a point env or a
Kinetix morphology, run by the shared loop.

The wiring (seeds vmapped, data-parallel replay batches, evaluation of coverage and zero-shot
goal reaching, the skills PNG) is ``jaxlab.rl.skills.recipe_parts``, shared with the other
skill recipe. ``jaxlab eval RUN`` prints the coverage of the skills, of a random and of the zero
policy, and the goal success.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from jaxlab.core.config import ConfigError
from jaxlab.core.recipe import Recipe, register
from jaxlab.rl.skills.recipe_parts import SkillRecipeConfig, build


@dataclasses.dataclass(frozen=True)
class MetraConfig(SkillRecipeConfig):
    """``SkillRecipeConfig`` with ``method="metra"``."""

    method: str = "metra"

    def __post_init__(self):
        if self.method != "metra":
            raise ConfigError("method", self.method, "'metra' (the recipe's method)")
        super().__post_init__()


RECIPE = register(
    Recipe(
        name="metra",
        config_cls=MetraConfig,
        build=build,
        description="METRA: skills that maximise (phi(s')-phi(s))^T z under a temporal-distance constraint (dual descent), SAC policy",
        presets_dir=Path(__file__).parent / "presets" / "metra",
        default_preset="cpu",
    )
)
