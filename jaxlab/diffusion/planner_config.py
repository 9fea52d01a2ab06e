"""The config of a Diffusion Planner run in the driving world: the planner, the world's scenes,
the expert data, the optimiser, the EMA and the closed-loop evaluation's size.

The ``planner`` recipe nests it field by field (it is the recipe's config); the functions of
:mod:`.planner_data`, :mod:`.planner_training` and :mod:`.planner_eval` take it.
"""

from __future__ import annotations

import dataclasses

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.optim import OptimConfig
from jaxlab.core.sharding import MeshConfig
from jaxlab.diffusion.planner import PlannerConfig
from jaxlab.envs.driving.perturbation import StatePerturbation
from jaxlab.envs.driving.world import check_world_params


@dataclasses.dataclass(frozen=True)
class PlannerRunConfig:
    """Attributes:
    model: the planner (sizes, sampler, guidance; its capacities match the world's).
    scene_type, route_visible: the world's scenes (-1: all three types) and whether the planner
        sees the ego's route lanes.
    agent_type_probs: the world's probabilities of a neighbour being a vehicle, a pedestrian or
        a bicycle (``DrivingParams.agent_type_probs``; all vehicles by default).
    perception_range: the distance (m) within which the world's neighbours are observed at each
        history step (``DrivingParams.perception_range``; 0, the default, observes all).
    n_scenes, log_steps: expert rollouts and the samples taken from each (training data).
    augment: the ego state perturbation of the training samples (the original's
        ``StatePerturbation``; ``augment.prob`` 0 turns it off).
    batch_size: training samples per step.
    optim: AdamW, a linear warm-up, then a constant rate (the default) or ``optim.schedule``
        ``cosine`` (decays to 0 at ``loop.total_steps``) or ``linear``; clipping at norm 1.
    decay_fraction: with a ``constant`` schedule, the last ``decay_fraction`` of
        ``loop.total_steps`` takes the rate linearly to 0 (warm-up, stable, decay: Hagele et al.
        2024). 0 (the default) never decays. A float, so that a resumed run can be given a decay
        tail (``--allow-change decay_fraction`` with ``loop.total_steps`` raised).
    ema_decay: the cap of the EMA decay of the weights used for sampling, in [0, 1); traced.
    static_scene_weight: the loss weight of a training scene with a static obstacle (a parked
        car: any ``static_valid``) relative to one without (``planner_loss``'s ``scene_weight``);
        1 (the default) weighs all scenes alike. A float, so that a resumed run can change it
        (``--allow-change static_scene_weight``).
    eval_scenes, eval_steps: closed-loop evaluation size.
    gif_scenes: scenes of the closed-loop GIF ``finalize`` writes (0: none).
    """

    seed: int = 0
    model: PlannerConfig = PlannerConfig()
    scene_type: int = -1
    route_visible: bool = True
    agent_type_probs: tuple[float, float, float] = (1.0, 0.0, 0.0)
    perception_range: float = 0.0
    n_scenes: int = 256
    log_steps: int = 30
    augment: StatePerturbation = StatePerturbation()
    batch_size: int = 256
    optim: OptimConfig = OptimConfig(lr=5e-4, warmup_steps=100, weight_decay=1e-4, clip_norm=1.0)
    decay_fraction: float = 0.0
    ema_decay: float = 0.999
    static_scene_weight: float = 1.0
    eval_scenes: int = 32
    eval_steps: int = 50
    gif_scenes: int = 2
    mesh: MeshConfig = MeshConfig()
    loop: LoopConfig = LoopConfig(total_steps=2000, steps_per_call=50, log_every=100)

    def __post_init__(self):
        for name in ("n_scenes", "log_steps", "batch_size", "eval_scenes", "eval_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(name, v, "a positive int")
        if self.gif_scenes < 0:
            raise ConfigError("gif_scenes", self.gif_scenes, "an integer >= 0")
        check_world_params(self.agent_type_probs, self.perception_range)
        if self.scene_type not in (-1, 0, 1, 2):
            raise ConfigError("scene_type", self.scene_type, "-1, 0, 1 or 2")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError("ema_decay", self.ema_decay, "a decay in [0, 1)")
        if not self.static_scene_weight > 0:
            raise ConfigError("static_scene_weight", self.static_scene_weight, "a float > 0")
        if not 0.0 <= self.decay_fraction < 1.0:
            raise ConfigError("decay_fraction", self.decay_fraction, "a float in [0, 1)")
        if self.decay_fraction and self.optim.schedule != "constant":
            raise ConfigError(
                "decay_fraction", self.decay_fraction, "0 unless optim.schedule is 'constant'"
            )
        if self.decay_fraction and self.optim.name != "adamw":
            raise ConfigError(
                "decay_fraction", self.decay_fraction, "0 unless optim.name is 'adamw'"
            )
