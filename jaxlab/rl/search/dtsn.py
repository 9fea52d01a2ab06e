"""D-TSN: a differentiable best-first search tree inside the network (Mittal, Kang, Lee, ICLR 2025).

The search (one root; ``search_batch`` vmaps it over roots):

* The tree is a fixed-size array pytree of ``N = 1 + K * |A|`` nodes: node 0 is the root and the
  ``a``-th child made by expansion ``t`` is node ``1 + t * |A| + a``. Nodes carry the model's
  latent, the edge reward and discount, the value ``V(h_n)``, the discounted path return and the
  path discount; ``exists``/``valid``/``expanded`` masks define the open set
  ``O = {n : exists, valid, not expanded, not terminal}``.
* Expansion ``t = 0..K-1`` (a ``lax.scan``) scores every open node by (paper §3)

      g(n) = sum_{i < depth(n)} gamma^i r_i  +  gamma^{depth(n)} V(h_n)

  draws ``n_t ~ pi_t = softmax(g / T)`` over the open set (``mode="sample"``; ``"greedy"`` takes
  the arg max) and expands it: the injected model gives all ``|A|`` children at once,
  ``h' = T(h, a)``, ``r = R(h, a)`` and ``V(h')``. The first expansion is always the root.
* Backup (a reverse ``lax.scan`` over the expansions): leaves keep ``V^(n) = V(h_n)`` (0 when
  terminal), an expanded node takes ``V^(n) = max_a Q(n, a)`` with ``Q(n, a) = R(n, a) +
  gamma V^(child)``; the output is the root's ``Q(s, a)``.

The model is injected as a :class:`SearchModel` of pure functions (as ``recurrent_fn`` in mctx), so
the same search runs a learned latent world model (grid mazes) or a known one (Game of 24).

Why not mctx's ``Tree``: mctx allocates one node per *simulation* and keeps per-child statistics
(visit counts, prior logits, child values) for MCTS selection; it has no place for the latents of
unexpanded children, which best-first search must keep in its open set (every expansion creates
all ``|A|`` children with latents, rewards and values, ready to be expanded later). We keep
mctx's design (struct of fixed arrays, parents / action-from-parent / children index with ``-1``
for none, injected model functions) with D-TSN's fields instead, and add no dependency.

The learning rule (:func:`dtsn_loss`, one function whose ``jax.grad`` is the whole update):

* root-Q loss against the demonstrated action ``a*``: the cross-entropy of ``softmax(Q(s, .))``,
  ``L_Q = logsumexp_a Q(s, a) - Q(s, a*)``. The paper states the demonstration loss only as an
  action loss on the root Q-values (its offline-RL variant uses TD plus the CQL term
  ``logsumexp Q - Q(a)``); we use that CQL-form cross-entropy, the one term both variants share.
* latent consistency ``||T(E(s_t), a_t) - sg(E(s_{t+1}))||^2`` (target encoder output under
  stop-gradient, as in SPR/EfficientZero, so the latents cannot collapse by moving the target) and
  reward consistency ``(R(E(s_t), a_t) - r_t)^2``;
* REINFORCE over the expansion policy with the telescoping-sum baseline (paper eq. for
  ``grad E[L_K]``):

      grad E[L_K] = E[ grad L_K + sum_t (L_K - L_{t-1}) grad log pi_t(n_t) ]

  where ``L_t`` is the root-Q loss of the tree after ``t`` expansions (``L_{t-1}`` is fixed
  before ``n_t`` is drawn, so it is a valid baseline). It enters as the surrogate
  ``L_K + sum_t sg(L_K - L_{t-1}) log pi_t(n_t)``; ``baseline="none"`` uses ``sg(L_K)`` instead
  (the plain estimator, for the variance comparison).

Shapes: ``K`` expansions, ``A`` actions, ``N = 1 + K A`` nodes; latents are any pytree.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.core.config import ConfigError

NEG = -1e30  # logit / Q of a masked entry (finite, so gradients through where stay finite)


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """Static search hyper-parameters.

    Attributes:
        num_expansions: ``K``, expansions per search (the first one is the root), ``>= 1``.
        num_actions: ``|A|``, children per expansion.
        gamma: discount in ``g`` and in the backup.
        temperature: ``T`` of the expansion policy ``softmax(g / T)``, ``> 0``.
        expansion: ``"best_first"`` (D-TSN's stochastic/greedy best-first) or ``"breadth_first"``
            (the fixed, non-learned baseline: shallowest open node first, ties by index).
    """

    num_expansions: int = 10
    num_actions: int = 4
    gamma: float = 0.99
    temperature: float = 1.0
    expansion: Literal["best_first", "breadth_first"] = "best_first"

    def __post_init__(self):
        for name in ("num_expansions", "num_actions"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(name, v, "an int >= 1")
        if not (isinstance(self.gamma, int | float) and 0.0 < self.gamma <= 1.0):
            raise ConfigError("gamma", self.gamma, "a float in (0, 1]")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, int | float) or not (0.0 < t < math.inf):
            raise ConfigError(
                "temperature",
                t,
                "a finite float > 0 (softmax(g / T) needs T > 0; use "
                "mode='greedy' for the arg max)",
            )
        if self.expansion not in ("best_first", "breadth_first"):
            raise ConfigError("expansion", self.expansion, "'best_first' or 'breadth_first'")

    @property
    def num_nodes(self) -> int:
        return 1 + self.num_expansions * self.num_actions


@struct.dataclass
class Expansion:
    """All ``A`` children of one node, as the model predicts them.

    Attributes:
        latent: child latents (pytree, leaves ``[A, ...]``).
        reward: ``R(h, a)``, float32[A].
        discount: 1, or 0 where the child is terminal (its value is 0 and it is never expanded).
        valid: whether the action is legal (illegal children get ``Q = -inf`` and are never
            expanded).
    """

    latent: Any
    reward: Float[Array, " A"]
    discount: Float[Array, " A"]
    valid: Bool[Array, " A"]


@dataclasses.dataclass(frozen=True)
class SearchModel:
    """The injected model (pure functions of the parameters; hashable by identity).

    Attributes:
        encode: ``(params, obs) -> latent`` (``E``).
        expand: ``(params, latent) -> Expansion`` (``T``, ``R`` and termination for all actions).
        value: ``(params, latent) -> float32[]`` (``V``).
    """

    encode: Callable[[Any, Any], Any]
    expand: Callable[[Any, Any], Expansion]
    value: Callable[[Any, Any], Float[Array, ""]]


@struct.dataclass
class Tree:
    """A D-TSN search tree of ``N = 1 + K A`` nodes (module docstring).

    Attributes:
        latent: node latents (leaves ``[N, ...]``).
        parent: parent index, -1 for the root and unused nodes.
        action: action from the parent.
        depth: root 0.
        reward: reward on the edge into the node.
        discount: ``gamma`` times the edge's discount (0 into a terminal node).
        value: ``V(h_n)`` (0 at terminal nodes).
        path_return: ``sum_i gamma^i r_i`` along the path from the root.
        path_discount: product of edge discounts along the path (``gamma^depth``, 0 past a
            terminal edge).
        exists: the node has been created.
        valid: the action into it is legal.
        expanded: the node has been expanded.
        children: child indices ``[N, A]``, -1 before expansion.
        expanded_node: the node expanded at each step ``[K]`` (-1: nothing was open).
        log_prob: ``log pi_t(n_t)`` of each step ``[K]`` (0 when nothing was drawn).
    """

    latent: Any
    parent: Int[Array, " N"]
    action: Int[Array, " N"]
    depth: Int[Array, " N"]
    reward: Float[Array, " N"]
    discount: Float[Array, " N"]
    value: Float[Array, " N"]
    path_return: Float[Array, " N"]
    path_discount: Float[Array, " N"]
    exists: Bool[Array, " N"]
    valid: Bool[Array, " N"]
    expanded: Bool[Array, " N"]
    children: Int[Array, "N A"]
    expanded_node: Int[Array, " K"]
    log_prob: Float[Array, " K"]

    def open_mask(self) -> Bool[Array, " N"]:
        """The open set: created, legal, unexpanded, non-terminal nodes."""
        return self.exists & self.valid & ~self.expanded & (self.path_discount > 0)

    def scores(self) -> Float[Array, " N"]:
        """``g(n) = path return + path discount * V(h_n)``."""
        return self.path_return + self.path_discount * self.value


@struct.dataclass
class SearchOutput:
    """Result of one search: root ``q`` float32[A] (``NEG`` where illegal), its ``valid`` mask
    and the final ``tree``."""

    q: Float[Array, " A"]
    valid: Bool[Array, " A"]
    tree: Tree


def _init_tree(root_latent, root_value, cfg: SearchConfig) -> Tree:
    n, k, a = cfg.num_nodes, cfg.num_expansions, cfg.num_actions
    latent = jax.tree.map(
        lambda x: jnp.zeros((n,) + jnp.shape(x), jnp.result_type(x)).at[0].set(x), root_latent
    )
    zeros_f = jnp.zeros((n,), jnp.float32)
    first = jnp.arange(n) == 0
    return Tree(
        latent=latent,
        parent=jnp.full((n,), -1, jnp.int32),
        action=jnp.full((n,), -1, jnp.int32),
        depth=jnp.zeros((n,), jnp.int32),
        reward=zeros_f,
        discount=zeros_f,
        value=zeros_f.at[0].set(root_value),
        path_return=zeros_f,
        path_discount=first.astype(jnp.float32),
        exists=first,
        valid=first,
        expanded=jnp.zeros((n,), bool),
        children=jnp.full((n, a), -1, jnp.int32),
        expanded_node=jnp.full((k,), -1, jnp.int32),
        log_prob=jnp.zeros((k,), jnp.float32),
    )


def _select(key, tree: Tree, t, cfg: SearchConfig, mode: str, forced):
    """The node to expand at step ``t``, its log-probability and whether anything was open."""
    open_ = tree.open_mask()
    any_open = jnp.any(open_)
    if cfg.expansion == "breadth_first":
        n_nodes = cfg.num_nodes
        priority = jnp.where(open_, -(tree.depth * n_nodes + jnp.arange(n_nodes)), -(2**30))
        node = jnp.argmax(priority)
        return node, jnp.zeros((), jnp.float32), any_open
    logits = jnp.where(open_, tree.scores() / cfg.temperature, NEG)
    logp = jax.nn.log_softmax(logits)
    if forced is not None:
        node = forced[t]
    elif mode == "greedy":
        node = jnp.argmax(logits)
    else:
        node = jax.random.categorical(key, jax.lax.stop_gradient(logits))
    return node, jnp.where(any_open, logp[node], 0.0), any_open


def _expand(params, tree: Tree, node, t, do, model: SearchModel, cfg: SearchConfig) -> Tree:
    a = cfg.num_actions
    lat = jax.tree.map(lambda x: x[node], tree.latent)
    ex = model.expand(params, lat)
    values = jax.vmap(model.value, in_axes=(None, 0))(params, ex.latent)
    edge = cfg.gamma * ex.discount.astype(jnp.float32)
    idx = 1 + t * a + jnp.arange(a)

    def put(arr, new):
        return arr.at[idx].set(new)

    pd = tree.path_discount[node]
    new = tree.replace(
        latent=jax.tree.map(lambda x, c: x.at[idx].set(c), tree.latent, ex.latent),
        parent=put(tree.parent, jnp.full((a,), node, jnp.int32)),
        action=put(tree.action, jnp.arange(a, dtype=jnp.int32)),
        depth=put(tree.depth, jnp.full((a,), tree.depth[node] + 1, jnp.int32)),
        reward=put(tree.reward, ex.reward.astype(jnp.float32)),
        discount=put(tree.discount, edge),
        value=put(tree.value, jnp.where(ex.discount > 0, values, 0.0).astype(jnp.float32)),
        path_return=put(tree.path_return, tree.path_return[node] + pd * ex.reward),
        path_discount=put(tree.path_discount, pd * edge),
        exists=put(tree.exists, jnp.full((a,), do)),
        valid=put(tree.valid, ex.valid & do),
        expanded=tree.expanded.at[node].set(tree.expanded[node] | do),
        children=tree.children.at[node].set(jnp.where(do, idx, tree.children[node])),
    )
    return new


def search(
    key: PRNGKeyArray,
    params: Any,
    obs: Any,
    *,
    model: SearchModel,
    config: SearchConfig,
    mode: Literal["sample", "greedy"] = "sample",
    forced: Int[Array, " K"] | None = None,
) -> SearchOutput:
    """One D-TSN search from one observation (module docstring).

    Args:
        key: PRNG key of the stochastic expansion policy.
        params: model parameters (differentiable).
        obs: one observation (no batch axis).
        model: the injected model.
        config: static search configuration.
        mode: ``"sample"`` draws ``n_t ~ softmax(g / T)`` (training); ``"greedy"`` takes the arg
            max (evaluation).
        forced: optional node indices ``[K]`` to expand (enumerating trees in tests; step 0 must
            be the root, 0).

    Returns:
        ``SearchOutput`` with the root Q-values and the tree (with ``log_prob`` of each step).
    """
    if mode not in ("sample", "greedy"):
        raise ConfigError("mode", mode, "'sample' or 'greedy'")
    root = model.encode(params, obs)
    tree = _init_tree(root, model.value(params, root), config)

    def body(carry, t):
        tree, key = carry
        key, sub = jax.random.split(key)
        node, logp, do = _select(sub, tree, t, config, mode, forced)
        tree = _expand(params, tree, node, t, do, model, config)
        tree = tree.replace(
            expanded_node=tree.expanded_node.at[t].set(jnp.where(do, node, -1)),
            log_prob=tree.log_prob.at[t].set(logp),
        )
        return (tree, key), None

    (tree, _), _ = jax.lax.scan(body, (tree, key), jnp.arange(config.num_expansions))
    q, valid = backup(tree, config)
    return SearchOutput(q=q, valid=valid, tree=tree)


def backup(
    tree: Tree, config: SearchConfig, num_active: Int[Array, ""] | int | None = None
) -> tuple[Float[Array, " A"], Bool[Array, " A"]]:
    """Root ``Q(s, .)`` of the tree made by its first ``num_active`` expansions (default all).

    ``V^`` of an expanded node is ``max_a [R(n, a) + gamma d V^(child)]`` over legal children
    (a reverse scan: children always have larger indices than their parents), leaves keep
    ``V(h_n)``. Illegal root actions get ``NEG``.
    """
    k, a = config.num_expansions, config.num_actions
    m = k if num_active is None else num_active

    def body(vhat, t):
        node = tree.expanded_node[t]
        active = (t < m) & (node >= 0)
        idx = 1 + t * a + jnp.arange(a)
        q = jnp.where(tree.valid[idx], tree.reward[idx] + tree.discount[idx] * vhat[idx], NEG)
        safe = jnp.maximum(node, 0)
        vhat = vhat.at[safe].set(jnp.where(active, jnp.max(q), vhat[safe]))
        return vhat, None

    vhat, _ = jax.lax.scan(body, tree.value, jnp.arange(k), reverse=True)
    idx = 1 + jnp.arange(a)
    valid = tree.valid[idx]
    q = jnp.where(valid, tree.reward[idx] + tree.discount[idx] * vhat[idx], NEG)
    return q, valid


def search_batch(
    key: PRNGKeyArray,
    params: Any,
    obs: Any,
    *,
    model: SearchModel,
    config: SearchConfig,
    mode: Literal["sample", "greedy"] = "sample",
) -> SearchOutput:
    """:func:`search` vmapped over a batch of roots (``obs`` leaves ``[B, ...]``)."""
    batch = jax.tree.leaves(obs)[0].shape[0]
    keys = jax.random.split(key, batch)
    return jax.vmap(lambda k, o: search(k, params, o, model=model, config=config, mode=mode))(
        keys, obs
    )


def action_loss(q: Float[Array, " A"], valid: Bool[Array, " A"], action) -> Float[Array, ""]:
    """Root-Q cross-entropy ``logsumexp_{legal a} Q(s, a) - Q(s, a*)``."""
    logits = jnp.where(valid, q, NEG)
    return jax.nn.logsumexp(logits) - logits[action]


@struct.dataclass
class Transitions:
    """A batch of demonstration steps (leading axis ``B``).

    Attributes:
        obs: ``s_t``; action: ``a_t`` (the demonstrated action); reward: ``r_t``; next_obs:
        ``s_{t+1}``; weight: 1 for real steps, 0 for padding.
    """

    obs: Any
    action: Int[Array, " B"]
    reward: Float[Array, " B"]
    next_obs: Any
    weight: Float[Array, " B"]


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Static weights and options of the D-TSN objective.

    Attributes:
        latent_weight: weight of the latent consistency loss (0 for a known model).
        reward_weight: weight of the reward consistency loss (0 for a known model).
        reinforce: add the REINFORCE term for the expansion policy.
        baseline: ``"telescoping"`` (``L_K - L_{t-1}``) or ``"none"`` (``L_K``).
    """

    latent_weight: float = 1.0
    reward_weight: float = 1.0
    reinforce: bool = True
    baseline: Literal["telescoping", "none"] = "telescoping"

    def __post_init__(self):
        for name in ("latent_weight", "reward_weight"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                raise ConfigError(name, v, "a float >= 0")
        if self.baseline not in ("telescoping", "none"):
            raise ConfigError("baseline", self.baseline, "'telescoping' or 'none'")


def losses_by_expansions(tree: Tree, config: SearchConfig, action) -> Float[Array, " K"]:
    """``L_t`` for ``t = 1..K``: the root-Q loss of the tree after its first ``t`` expansions."""
    steps = jnp.arange(1, config.num_expansions + 1)
    q, valid = jax.vmap(lambda m: backup(tree, config, m))(steps)
    return jax.vmap(action_loss, in_axes=(0, 0, None))(q, valid, action)


def reinforce_surrogate(
    tree: Tree, config: SearchConfig, action, *, baseline: str = "telescoping"
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """``(L_K, L_K + sum_t c_t log pi_t(n_t))`` with ``c_t = sg(L_K - L_{t-1})`` (or ``sg(L_K)``).

    The first expansion (the root, the only open node) is deterministic, so its term is 0.
    """
    losses = losses_by_expansions(tree, config, action)
    final = losses[-1]
    if baseline == "telescoping":
        prev = jnp.concatenate([jnp.zeros((1,)), losses[:-1]])
        coef = final - prev
    else:
        coef = jnp.broadcast_to(final, losses.shape)
    coef = jax.lax.stop_gradient(coef).at[0].set(0.0)
    return final, final + jnp.sum(coef * tree.log_prob)


def _sq(tree_a, tree_b) -> Float[Array, ""]:
    leaves = jax.tree.leaves(jax.tree.map(lambda x, y: jnp.sum((x - y) ** 2), tree_a, tree_b))
    return sum(leaves)


def dtsn_loss(
    key: PRNGKeyArray,
    params: Any,
    batch: Transitions,
    *,
    model: SearchModel,
    config: SearchConfig,
    loss: LossConfig = LossConfig(),
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """The D-TSN objective whose ``jax.grad`` (w.r.t. ``params``) is the whole update.

    ``sum_b w_b [L_K + REINFORCE surrogate + latent_weight L_T + reward_weight L_R] / sum_b w_b``
    (module docstring). Returns ``(objective, metrics)``; metrics hold the plain losses.
    """
    out = search_batch(key, params, batch.obs, model=model, config=config, mode="sample")
    act = batch.action.astype(jnp.int32)
    if loss.reinforce and config.expansion == "best_first":
        lk, surrogate = jax.vmap(
            lambda tr, a: reinforce_surrogate(tr, config, a, baseline=loss.baseline)
        )(out.tree, act)
    else:
        lk = jax.vmap(action_loss)(out.q, out.valid, act)
        surrogate = lk
    w = batch.weight.astype(jnp.float32)
    denom = jnp.maximum(jnp.sum(w), 1.0)
    objective = jnp.sum(w * surrogate) / denom
    metrics = {
        "loss_q": jnp.sum(w * lk) / denom,
        "accuracy": jnp.sum(w * (jnp.argmax(out.q, -1) == act)) / denom,
    }
    if loss.latent_weight > 0 or loss.reward_weight > 0:

        def consistency(obs, a, r, next_obs):
            h = model.encode(params, obs)
            ex = model.expand(params, h)
            pred = jax.tree.map(lambda x: x[a], ex.latent)
            target = jax.lax.stop_gradient(model.encode(params, next_obs))
            return _sq(pred, target), (ex.reward[a] - r) ** 2

        lt, lr = jax.vmap(consistency)(batch.obs, act, batch.reward, batch.next_obs)
        metrics["loss_latent"] = jnp.sum(w * lt) / denom
        metrics["loss_reward"] = jnp.sum(w * lr) / denom
        objective = (
            objective
            + loss.latent_weight * metrics["loss_latent"]
            + loss.reward_weight * metrics["loss_reward"]
        )
    metrics["objective"] = objective
    return objective, metrics


def greedy_action(
    params: Any, obs: Any, *, model: SearchModel, config: SearchConfig
) -> Int[Array, ""]:
    """Evaluation policy: arg max of the root Q of a greedy-expansion search (one observation)."""
    out = search(jax.random.key(0), params, obs, model=model, config=config, mode="greedy")
    return jnp.argmax(out.q).astype(jnp.int32)
