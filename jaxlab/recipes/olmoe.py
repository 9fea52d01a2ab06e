"""``olmoe``: an OLMoE-style mixture-of-experts decoder LM on the shared loop.

The dense ``lm-tiny`` recipe (data, AdamW schedule, parameter placement, state) with every FFN
replaced by the OLMoE MoE layer (:class:`jaxlab.lm.moe.MoEFeedForward`) and the OLMoE objective
``CE + w_LB L_LB + w_RZ L_RZ`` (:func:`jaxlab.lm.olmoe.moe_objective`; the weights
``model.moe.lb_loss_weight`` and ``model.moe.z_loss_weight`` are traced). Every step logs routing
statistics (:func:`jaxlab.lm.routing_stats.summarize`). With ``mesh.expert > 1`` the MoE layers run
expert-parallel.

``jaxlab eval olmoe --run-dir DIR --analysis routing`` (:func:`eval_main`) analyses the routing of
the final checkpoint on validation batches (:mod:`jaxlab.lm.routing_analysis`: per-layer expert
load, router saturation against the early checkpoint kept at step ``analysis_early_step``, expert
co-activation); it prints a table and writes PNG plots and ``routing.json`` to ``DIR/analysis``.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import jax

from jaxlab.core import json_files
from jaxlab.core import run as run_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import Hook, LoopConfig
from jaxlab.core.optim import OptimConfig
from jaxlab.core.recipe import Parts, Recipe, hparams_of, register
from jaxlab.core.sharding import MeshConfig
from jaxlab.lm import olmoe as olmoe_lib
from jaxlab.lm import training
from jaxlab.lm.data import (
    ByteLMDataConfig,
    train_iterator,
)
from jaxlab.lm.model import Decoder, DecoderConfig
from jaxlab.lm.moe import MoEConfig


@dataclasses.dataclass(frozen=True)
class OlmoeConfig:
    """Config of the ``olmoe`` recipe (``model.moe`` must be set; OLMoE puts it in every layer).

    Attributes:
      analysis_early_step: the step whose checkpoint is kept under ``run_dir/early`` for the
        router-saturation analysis.
      analysis_batches: validation batches used by ``jaxlab eval olmoe --analysis routing``.
      init_from: ``hf:DIR`` fine-tunes a Hugging Face OLMoE directory (its architecture replaces
        the model's; :mod:`jaxlab.lm.hub.init_from`) on ``data.source``.
    """

    seed: int = 0
    model: DecoderConfig = DecoderConfig(
        d_model=64, n_layers=2, n_heads=4, head_dim=16, d_ff=128, max_len=128,
        moe=MoEConfig(num_experts=8, top_k=2, expert_ff=64),
    )  # fmt: skip
    data: ByteLMDataConfig = ByteLMDataConfig(seq_len=128, batch_size=32)
    optim: OptimConfig = training.OPTIM
    mesh: MeshConfig = MeshConfig()
    val_batches: int = 16
    analysis_early_step: int = 100
    analysis_batches: int = 8
    init_from: str = ""
    loop: LoopConfig = LoopConfig(
        total_steps=600, steps_per_call=10, log_every=50, eval_every=100, checkpoint_every=200
    )

    def __post_init__(self):
        if self.model.moe is None:
            raise ConfigError("model.moe", None, "an MoEConfig (the olmoe recipe is MoE)")
        training.check_lm_config(self)
        sizes = {a: getattr(self.mesh, a) for a in olmoe_lib.TOKEN_AXES}
        olmoe_lib.check_layout(self.model, self.data.batch_size, sizes)
        for name in ("analysis_early_step", "analysis_batches"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")


def expert_parallel(cfg: OlmoeConfig, mesh: jax.sharding.Mesh) -> bool:
    """Whether the MoE layers run expert-parallel on ``mesh`` (its layout checked first)."""
    sizes = dict(zip(mesh.axis_names, mesh.devices.shape, strict=True))
    olmoe_lib.check_layout(cfg.model, cfg.data.batch_size, sizes)
    return cfg.model.moe.expert_parallel or sizes.get("expert", 1) > 1


def build(cfg: OlmoeConfig, mesh: jax.sharding.Mesh) -> Parts:
    host, hosts = jax.process_index(), jax.process_count()
    ep = expert_parallel(cfg, mesh)
    model = Decoder(olmoe_lib.with_expert_parallel(cfg.model, ep))
    batch = training.abstract_batch(cfg.data, mesh)
    total = cfg.loop.total_steps
    step = training.make_train_step(model, cfg.optim, total, olmoe_lib.moe_objective)
    evaluation = olmoe_lib.Evaluation(cfg, model, batch, mesh, ep)
    # batch 1 needs no mesh, and both layouts have the same parameters
    init_model = Decoder(olmoe_lib.with_expert_parallel(cfg.model, False))
    return Parts(
        init=training.make_init(
            init_model, cfg.optim, total, cfg.data.seq_len, hparams_of(RECIPE, cfg)
        ),
        train_step=olmoe_lib.in_mesh(step, mesh) if ep else step,
        abstract_batch=batch,
        data=lambda: train_iterator(
            cfg.data, shard_index=host, shard_count=hosts, vocab_size=cfg.model.vocab_size
        ),
        evaluate=evaluation.evaluate,
        finalize=evaluation.finalize,
        units_per_step=(cfg.data.batch_size * cfg.data.seq_len, "tok"),
    )


def eval_main(cfg: OlmoeConfig, run_dir: Path, argv: list[str]) -> int:
    """``jaxlab eval olmoe --run-dir DIR [--analysis routing] [--batches N]``: without
    ``--analysis`` the evaluation of the latest checkpoint (JSON); with it the routing analysis of
    :func:`jaxlab.lm.routing_analysis.write_report` in ``DIR/analysis``."""
    p = argparse.ArgumentParser(prog="jaxlab eval olmoe")
    p.add_argument("--analysis", choices=["routing"], default=None)
    p.add_argument("--batches", type=int, default=cfg.analysis_batches)
    args = p.parse_args(argv)
    run_dir = Path(run_dir)
    run = run_lib.open_run(run_dir, recipe=RECIPE, devices=jax.devices()[:1])
    if args.analysis is None:
        print(
            json_files.dumps(
                {"step": run.step, **run.parts.evaluate(run.state)}, where="the evaluation"
            )
        )
        return 0
    olmoe_lib.analyse_run(run, cfg, run_dir, args.batches)
    return 0


def early_checkpoint_hook(cfg: OlmoeConfig, run_dir: str | Path) -> Hook:
    """A loop hook keeping the step-``analysis_early_step`` state under ``run_dir/early``."""

    def fn(step: int, state: Any, metrics: dict) -> None:
        if step == cfg.analysis_early_step:
            olmoe_lib.save_early(run_dir, cfg, step, state)

    return Hook(fn, every=cfg.analysis_early_step)


RECIPE = register(
    Recipe(
        name="olmoe",
        config_cls=OlmoeConfig,
        build=build,
        description="OLMoE-style MoE decoder LM (dropless top-k, LB + router z-loss, expert parallel)",
        eval_main=eval_main,
        hooks=lambda cfg, run_dir: (early_checkpoint_hook(cfg, run_dir),),
        traced=training.TRACED + olmoe_lib.TRACED,
        finetune=training.finetune,
    )
)
