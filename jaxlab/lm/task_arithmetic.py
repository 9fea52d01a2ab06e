"""The data model and one-layer transformer of the task-vector theory, and λ-grid evaluation.

Li et al., ICLR 2025 (arXiv 2504.10957), §3: a binary task ``T`` has a discriminative pattern
``μ_T ∈ R^d``; a sample is ``P`` tokens, some equal to ``+y μ_T`` (the label's pattern), fewer to
``−y μ_T`` (confusion tokens), the rest drawn from orthonormal task-irrelevant patterns ``v_j``
(orthogonal to every ``μ``), plus small Gaussian noise; the label ``y ∈ {±1}`` is the sign that
dominates. Two tasks are **irrelevant** (``⟨μ_1, μ_2⟩ = 0``), **aligned** (``> 0``) or
**contradictory** (``< 0``); here ``μ_2 = α μ_1 + √(1−α²) μ_⊥``.

The model (paper eq. 2) is one single-head self-attention layer followed by a ReLU MLP with fixed
output signs ``a_i = ±1/m`` and mean pooling over positions:

    f(X) = (1/P) Σ_l Σ_i a_i · relu(W_O,i Σ_s W_V x_s softmax_s(x_sᵀ W_Kᵀ W_Q x_l))

trained with the hinge loss ``max(0, 1 − y f(X))`` by SGD; ``Ψ = (W_Q, W_K, W_V, W_O)``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jaxlab.core import optim as optim_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig

#: the fine-tuning optimiser: plain SGD at rate 0.5 (the paper's CPU check)
SGD = OptimConfig(name="sgd", lr=0.5)

Relation = Literal["irrelevant", "aligned", "contradictory"]
RELATIONS: dict[str, float] = {"irrelevant": 0.0, "aligned": 0.7, "contradictory": -0.7}


@dataclasses.dataclass(frozen=True)
class TaskDataConfig:
    """Static sizes of the data model.

    Attributes:
      d: token dimension.
      tokens: tokens per sample ``P``.
      label_tokens: tokens equal to ``+y μ_T``.
      confusion_tokens: tokens equal to ``−y μ_T`` (fewer than ``label_tokens``).
      irrelevant_patterns: number ``M`` of orthonormal task-irrelevant patterns.
      noise: std of the Gaussian noise added to every token.
    """

    d: int = 32
    tokens: int = 16
    label_tokens: int = 4
    confusion_tokens: int = 2
    irrelevant_patterns: int = 8
    noise: float = 0.05

    def __post_init__(self) -> None:
        for name in ("d", "tokens", "label_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")
        for name in ("confusion_tokens", "irrelevant_patterns"):
            if getattr(self, name) < 0:
                raise ConfigError(name, getattr(self, name), "an integer >= 0")
        if not self.noise >= 0.0:
            raise ConfigError("noise", self.noise, "a std >= 0")
        if self.confusion_tokens >= self.label_tokens:
            raise ConfigError(
                "confusion_tokens", self.confusion_tokens, f"< label_tokens={self.label_tokens}"
            )
        if self.label_tokens + self.confusion_tokens > self.tokens:
            raise ConfigError(
                "label_tokens", self.label_tokens, f"label + confusion tokens <= {self.tokens}"
            )
        if self.irrelevant_patterns + 3 > self.d:
            raise ConfigError(
                "irrelevant_patterns", self.irrelevant_patterns, f"<= d - 3 = {self.d - 3}"
            )


def patterns(
    key: PRNGKeyArray, cfg: TaskDataConfig, alpha: float | Float[Array, ""]
) -> tuple[Float[Array, "3 d"], Float[Array, "M d"]]:
    """``(μ, V)``: rows ``μ_1``, ``μ_2 = α μ_1 + √(1−α²) μ_⊥`` and the out-of-domain target
    ``μ' = (μ_1 + μ_2)/‖μ_1 + μ_2‖``; ``V`` the ``M`` irrelevant patterns, orthonormal and
    orthogonal to ``μ_1, μ_⊥`` (one random orthonormal basis, so ``α`` may be traced)."""
    q, _ = jnp.linalg.qr(jax.random.normal(key, (cfg.d, cfg.d)))
    basis = q.T
    mu1, mu_perp = basis[0], basis[1]
    mu2 = alpha * mu1 + jnp.sqrt(1.0 - alpha**2) * mu_perp
    ood = (mu1 + mu2) / jnp.linalg.norm(mu1 + mu2)
    return jnp.stack([mu1, mu2, ood]), basis[2 : 2 + cfg.irrelevant_patterns]


def sample(
    key: PRNGKeyArray,
    cfg: TaskDataConfig,
    mu: Float[Array, " d"],
    irrelevant: Float[Array, "M d"],
    batch: int,
) -> tuple[Float[Array, "batch P d"], Float[Array, " batch"]]:
    """``batch`` samples of the task with pattern ``mu``: tokens and labels ``y ∈ {±1}``."""
    ky, kp, kv, kn = jax.random.split(key, 4)
    y = jax.random.rademacher(ky, (batch,), dtype=jnp.float32)
    n_lab, n_con = cfg.label_tokens, cfg.confusion_tokens
    signs = jnp.concatenate(
        [jnp.ones(n_lab), -jnp.ones(n_con), jnp.zeros(cfg.tokens - n_lab - n_con)]
    )
    which = jax.random.randint(kv, (batch, cfg.tokens), 0, irrelevant.shape[0])
    irr = irrelevant[which] * (signs == 0)[None, :, None]
    tokens = irr + (y[:, None, None] * signs[None, :, None]) * mu[None, None, :]
    tokens = jax.vmap(lambda k, t: jax.random.permutation(k, t, axis=0))(
        jax.random.split(kp, batch), tokens
    )
    tokens = tokens + cfg.noise * jax.random.normal(kn, tokens.shape)
    return tokens, y


class OneLayerTransformer(nn.Module):
    """One single-head attention layer + ReLU MLP with fixed ``±1/m`` output weights (eq. 2).

    Attributes:
      width: MLP hidden units ``m`` (even; half the output weights are ``+1/m``).
      init_std: std of ``W_Q, W_K, W_V, W_O`` at initialisation.
    """

    width: int = 64
    init_std: float = 0.1

    @nn.compact
    def __call__(self, x: Float[Array, "*batch P d"]) -> Float[Array, " *batch"]:
        d = x.shape[-1]
        init = nn.initializers.normal(self.init_std)
        wq = self.param("W_Q", init, (d, d))
        wk = self.param("W_K", init, (d, d))
        wv = self.param("W_V", init, (d, d))
        wo = self.param("W_O", init, (self.width, d))
        scores = jnp.einsum("...se,...le->...ls", x @ wk.T, x @ wq.T)
        attn = jax.nn.softmax(scores, axis=-1)
        mixed = jnp.einsum("...ls,...se->...le", attn, x @ wv.T)
        hidden = nn.relu(mixed @ wo.T)
        a = jnp.where(jnp.arange(self.width) < self.width // 2, 1.0, -1.0) / self.width
        return jnp.mean(hidden @ a, axis=-1)


def hinge_loss(scores: Float[Array, " batch"], y: Float[Array, " batch"]) -> Float[Array, ""]:
    """``mean max(0, 1 − y f(X))``."""
    return jnp.mean(jnp.maximum(0.0, 1.0 - y * scores))


def accuracy(
    model: nn.Module, params, x: Float[Array, "b P d"], y: Float[Array, " b"]
) -> Float[Array, ""]:
    """Fraction of ``sign f(X) = y`` (ties count as wrong)."""
    return jnp.mean(jnp.sign(model.apply(params, x)) == y)


def finetune_step(
    key: PRNGKeyArray,
    model: nn.Module,
    params,
    opt_state,
    opt: optax.GradientTransformation,
    cfg: TaskDataConfig,
    mu: Float[Array, " d"],
    irrelevant: Float[Array, "M d"],
    batch: int,
    place=lambda x: x,
):
    """One ``opt`` step on the hinge loss of a fresh batch of the task with pattern ``mu``
    (``place``: applied to the batch's arrays, e.g. a sharding constraint); returns ``(params,
    opt_state, loss)``."""
    x, y = sample(key, cfg, mu, irrelevant, batch)
    x, y = place(x), place(y)
    loss, g = jax.value_and_grad(lambda q: hinge_loss(model.apply(q, x), y))(params)
    u, opt_state = opt.update(g, opt_state, params)
    return optax.apply_updates(params, u), opt_state, loss


def finetune(
    key: PRNGKeyArray,
    model: nn.Module,
    params,
    cfg: TaskDataConfig,
    mu: Float[Array, " d"],
    irrelevant: Float[Array, "M d"],
    *,
    steps: int = 200,
    batch: int = 32,
    optim: OptimConfig = SGD,
):
    """``steps`` of :func:`finetune_step` from ``params`` (``lax.scan``), optimiser ``optim``."""
    opt = optim_lib.make(optim, steps)

    def step(carry, t):
        p, s = carry
        p, s, loss = finetune_step(
            jax.random.fold_in(key, t), model, p, s, opt, cfg, mu, irrelevant, batch
        )
        return (p, s), loss

    (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), jnp.arange(steps))
    return params, losses


def lambda_grid(lo: float = -2.0, hi: float = 2.0, num: int = 9) -> Float[Array, "g g 2"]:
    """The grid ``{(λ_1, λ_2)}`` over ``[lo, hi]²`` with ``num`` values per axis."""
    ls = jnp.linspace(lo, hi, num)
    return jnp.stack(jnp.meshgrid(ls, ls, indexing="ij"), axis=-1)


def write_heatmaps(
    directory: str | Path,
    prefix: str,
    grid: Float[ArrayLike, "g g 2"],
    values: dict[str, Float[ArrayLike, "g g"]],
    title: str = "",
) -> list[Path]:
    """One heat map PNG per entry of ``values`` (``[g, g]``: rows ``λ_1 = grid[:, 0, 0]``, columns
    ``λ_2 = grid[0, :, 1]``), written as ``<directory>/<prefix>_<name>.png`` with
    :func:`jaxlab.media.plot_heatmap` (values annotated, colour scale [0, 1])."""
    from jaxlab import media

    grid = np.asarray(grid)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, v in values.items():
        paths.append(
            media.plot_heatmap(
                directory / f"{prefix}_{name}.png",
                np.asarray(v),
                xticks=[f"{t:g}" for t in grid[0, :, 1]],
                yticks=[f"{t:g}" for t in grid[:, 0, 0]],
                xlabel="λ2",
                ylabel="λ1",
                title=f"{title} {name}".strip(),
                vmin=0.0,
                vmax=1.0,
                annotate=grid.shape[0] <= 9,
            )
        )
    return paths


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """Static settings of :func:`run_experiment`.

    Attributes:
      data: the data model's sizes.
      width: MLP width of the one-layer transformer.
      batch: samples per fine-tuning step of each task from ``Ψ_0`` (hinge loss; the number of
        steps and the optimiser are :func:`run_experiment`'s ``steps`` and ``optim``).
      eval_samples: test samples per task.
      grid: values per axis of the ``λ`` grid over ``[grid_lo, grid_hi]``.
      rank: rank of the truncated task vectors.
      keep: fraction of entries kept by magnitude pruning.
    """

    data: TaskDataConfig = TaskDataConfig()
    width: int = 64
    batch: int = 32
    eval_samples: int = 512
    grid: int = 9
    grid_lo: float = -2.0
    grid_hi: float = 2.0
    rank: int = 1
    keep: float = 0.5

    def __post_init__(self) -> None:
        for name in ("width", "batch", "eval_samples", "rank"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")
        if self.grid < 2:
            raise ConfigError("grid", self.grid, "an integer >= 2")
        if not self.grid_lo < self.grid_hi:
            raise ConfigError("grid_hi", self.grid_hi, f"a value > grid_lo={self.grid_lo}")
        if not 0.0 < self.keep <= 1.0:
            raise ConfigError("keep", self.keep, "a fraction in (0, 1]")


def setup(key: PRNGKeyArray, cfg: ExperimentConfig, alpha: Float[Array, ""] | float):
    """``(model, Ψ_0, μ [3, d], V [M, d], test sets)`` of one experiment: patterns with
    ``⟨μ_1, μ_2⟩ = alpha``, the initial parameters and ``cfg.eval_samples`` test samples of
    ``T_1``, ``T_2`` and the out-of-domain task ``μ'``."""
    d = cfg.data
    model = OneLayerTransformer(width=cfg.width)
    kp, ki, ke = jax.random.split(key, 3)
    mu, irrelevant = patterns(kp, d, alpha)
    p0 = model.init(ki, jnp.zeros((1, d.tokens, d.d)))
    tests = tuple(
        sample(jax.random.fold_in(ke, i), d, mu[i], irrelevant, cfg.eval_samples) for i in range(3)
    )
    return model, p0, mu, irrelevant, tests


def evaluate_edits(
    model: nn.Module, cfg: ExperimentConfig, p0, p1, p2, tests
) -> dict[str, Float[Array, "g g 3"]]:
    """Accuracies of ``Ψ_0 + λ_1 ΔΨ_1 + λ_2 ΔΨ_2`` over the λ grid on each test set, for the
    full, rank-``cfg.rank`` and ``cfg.keep``-pruned task vectors (variants vmapped, the grid in
    row-sized chunks)."""
    from jaxlab.lm import task_vectors as tv

    vectors = [tv.task_vector(p1, p0), tv.task_vector(p2, p0)]
    names = ("full", "low_rank", "pruned")
    variants = [
        vectors,
        [tv.low_rank(v, cfg.rank) for v in vectors],
        [tv.magnitude_prune(v, cfg.keep) for v in vectors],
    ]
    # one model application for every (variant, λ, test set): variants stacked, tests concatenated
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *variants)
    x = jnp.concatenate([t[0] for t in tests])
    y = jnp.concatenate([t[1] for t in tests])
    grid = lambda_grid(cfg.grid_lo, cfg.grid_hi, cfg.grid)

    def evaluate(vecs, lam):
        correct = jnp.sign(model.apply(tv.edit(p0, vecs, lam), x)) == y
        return jnp.mean(correct.reshape(len(tests), -1), axis=-1)

    # λ points in chunks of one grid row (lax.map), variants vmapped: bounded memory
    per_variant = jax.vmap(evaluate, (0, None))
    acc = jax.lax.map(
        lambda lam: per_variant(stacked, lam), grid.reshape(-1, 2), batch_size=cfg.grid
    )  # [g*g, variants, tests]
    acc = jnp.moveaxis(acc, 1, 0).reshape(len(names), cfg.grid, cfg.grid, len(tests))
    out = {name: acc[i] for i, name in enumerate(names)}
    out["grid"] = grid
    return out


def run_experiment(
    key: PRNGKeyArray,
    cfg: ExperimentConfig,
    alpha: Float[Array, ""] | float,
    optim: OptimConfig = SGD,
    steps: int = 200,
) -> dict[str, Float[Array, "g g 3"]]:
    """Fine-tunes ``Ψ_1, Ψ_2`` from one ``Ψ_0`` (``steps`` each) on tasks with ``⟨μ_1, μ_2⟩ = alpha`` and evaluates
    the edits over the λ grid (:func:`evaluate_edits`) on ``T_1``, ``T_2`` and ``μ'`` (last axis).
    Jit with ``cfg``, ``optim`` (the fine-tuning optimiser) and ``steps`` static; vmap over ``alpha``
    (relations) and ``key`` (seeds).

    Returns:
      ``{"full", "low_rank", "pruned": [g, g, 3] accuracies, "grid": [g, g, 2],
      "finetune_loss": [2, steps]}``.
    """
    k_setup, k1, k2 = jax.random.split(key, 3)
    model, p0, mu, irrelevant, tests = setup(k_setup, cfg, alpha)
    kwargs = dict(steps=steps, batch=cfg.batch, optim=optim)
    # both fine-tunes are one vmapped program
    tuned, losses = jax.vmap(
        lambda k, m: finetune(k, model, p0, cfg.data, m, irrelevant, **kwargs)
    )(jnp.stack([k1, k2]), mu[:2])
    p1, p2 = (jax.tree.map(lambda p, i=i: p[i], tuned) for i in range(2))
    out = evaluate_edits(model, cfg, p0, p1, p2, tests)
    out["finetune_loss"] = losses
    return out


def grid_index(grid: Float[ArrayLike, "g g 2"], lam1: float, lam2: float) -> tuple[int, int]:
    """Indices of the grid point ``(λ_1, λ_2)`` (which must be on the grid) of a
    :func:`lambda_grid` (JAX, or NumPy as fetched from a result)."""
    grid = np.asarray(grid)
    i = int(np.argmin(np.abs(grid[:, 0, 0] - lam1)))
    j = int(np.argmin(np.abs(grid[0, :, 1] - lam2)))
    if not (np.isclose(grid[i, 0, 0], lam1) and np.isclose(grid[0, j, 1], lam2)):
        raise ValueError(f"(λ1, λ2)=({lam1}, {lam2}): not a point of the grid")
    return i, j


def summarize(grids: dict[str, np.ndarray], relations: tuple[str, ...]) -> dict[str, Any]:
    """Per relation (``grids``' leading axis, in the order of ``relations``) and variant: the
    accuracies at addition ``(1, 1)`` and negation ``(1, −1)``, the best ``min(T1, T2)`` over the
    grid (with its λ) and the best out-of-domain accuracy (with its λ)."""
    out: dict[str, Any] = {}
    for r, rel in enumerate(relations):
        grid = np.asarray(grids["grid"][r])
        flat = grid.reshape(-1, 2)
        rel_out = {}
        for variant in ("full", "low_rank", "pruned"):
            acc = np.asarray(grids[variant][r])

            def at(l1, l2, acc=acc, grid=grid):
                i, j = grid_index(grid, l1, l2)
                return {t: round(float(acc[i, j, n]), 4) for n, t in enumerate(("T1", "T2", "OOD"))}

            both = np.minimum(acc[..., 0], acc[..., 1]).reshape(-1)
            ood = acc[..., 2].reshape(-1)
            rel_out[variant] = {
                "add": at(1.0, 1.0),
                "negate": at(1.0, -1.0),
                "best_both": round(float(both.max()), 4),
                "best_both_lambda": flat[both.argmax()].tolist(),
                "best_ood": round(float(ood.max()), 4),
                "best_ood_lambda": flat[ood.argmax()].tolist(),
            }
        out[rel] = rel_out
    return out


def write_relation_heatmaps(
    directory: str | Path, grids: dict[str, np.ndarray], relations: tuple[str, ...]
) -> list[Path]:
    """``heatmap_<relation>_{T1,T2,both,ood}.png`` of the full task vectors per relation: T1, T2,
    ``min(T1, T2)`` and the out-of-domain target."""
    paths = []
    for r, rel in enumerate(relations):
        full = np.asarray(grids["full"][r])
        panels = {
            "T1": full[..., 0],
            "T2": full[..., 1],
            "both": np.minimum(full[..., 0], full[..., 1]),
            "ood": full[..., 2],
        }
        title = f"{rel} (α={RELATIONS[rel]:+.1f}):"
        paths += write_heatmaps(directory, f"heatmap_{rel}", grids["grid"][r], panels, title)
    return paths
