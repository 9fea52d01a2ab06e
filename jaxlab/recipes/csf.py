"""``csf``: unsupervised skill discovery with CSF (``jaxlab.rl.skills.csf``) on a point env or a
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
class CsfConfig(SkillRecipeConfig):
    """``SkillRecipeConfig`` with ``method="csf"``."""

    method: str = "csf"

    def __post_init__(self):
        if self.method != "csf":
            raise ConfigError("method", self.method, "'csf' (the recipe's method)")
        super().__post_init__()


RECIPE = register(
    Recipe(
        name="csf",
        config_cls=CsfConfig,
        build=build,
        description="CSF: contrastive successor features (contrastive phi, bottleneck reward, SF critics), unsupervised skills",
        presets_dir=Path(__file__).parent / "presets" / "csf",
        default_preset="cpu",
    )
)
