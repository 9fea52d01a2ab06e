"""D-TSN search and learning rule (``jaxlab.rl.search.dtsn``).

* exact model + oracle values => optimal actions (grid mazes: every free cell of a few layouts;
  Game of 24: solvable instances);
* the tree is what best-first search builds (hand-checked tiny tree), backup is max over
  children, jit/vmap agree with a loop;
* REINFORCE on a tiny tree (K = 3, |A| = 2, a tabular model): an enumeration of every expansion
  sequence written from the paper's definitions (no search code) gives each sequence's
  probability and losses ``L_1 .. L_K``, which the search reproduces exactly; the estimator's
  mean over 4 x 10^4 samples equals the enumeration's gradient of E[L_K] within 3 standard
  errors, and the telescoping baseline lowers the summed variance (ratio asserted < 0.8);
* bad input names the field.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.envs import game24, grid_maze
from jaxlab.rl.search import dtsn

GAMMA = 0.9


# ---------------------------------------------------------------- exact models
def maze_exact_model():
    """Latent = (walls, goal, dist field, pos); the env's moves; V = oracle value."""

    def expand(params, lat):
        walls, goal, dist, pos = lat
        nxt = jax.vmap(lambda a: grid_maze.move(walls, pos, a))(jnp.arange(4))
        at_goal = jnp.all(nxt == goal[None], axis=-1)
        rep = lambda x: jnp.broadcast_to(x, (4,) + x.shape)  # noqa: E731
        return dtsn.Expansion(
            latent=(rep(walls), rep(goal), rep(dist), nxt),
            reward=at_goal.astype(jnp.float32),
            discount=jnp.where(at_goal, 0.0, 1.0),
            valid=jnp.ones((4,), bool),
        )

    def value(params, lat):
        walls, goal, dist, pos = lat
        return grid_maze.oracle_value(dist, pos, GAMMA)

    return dtsn.SearchModel(encode=lambda p, obs: obs, expand=expand, value=value)


def test_exact_maze_model_and_oracle_values_pick_shortest_path_actions():
    model = maze_exact_model()
    cfg = dtsn.SearchConfig(num_expansions=3, num_actions=4, gamma=GAMMA)
    size = 6

    @jax.jit
    @jax.vmap
    def check(key):
        maze = grid_maze.generate(key, size, size, 0.3)
        dist = grid_maze.distances(maze.walls, maze.goal)
        cells = jnp.stack(jnp.meshgrid(jnp.arange(size), jnp.arange(size), indexing="ij"), -1)
        cells = cells.reshape(-1, 2).astype(jnp.int32)

        def one(pos):
            lat = (maze.walls, maze.goal, dist, pos)
            a = dtsn.greedy_action(None, lat, model=model, config=cfg)
            nxt = grid_maze.move(maze.walls, pos, a)
            return dist[nxt[0], nxt[1]] == dist[pos[0], pos[1]] - 1

        d = dist[cells[:, 0], cells[:, 1]]
        relevant = (d >= 1) & (d < grid_maze.UNREACHABLE)
        return jax.vmap(one)(cells), relevant

    ok, relevant = check(jax.random.split(jax.random.key(0), 3))
    assert np.all(np.asarray(relevant).sum(-1) > 3)
    assert bool(jnp.all(ok | ~relevant))


def test_exact_game24_model_and_oracle_values_pick_solving_actions():
    def expand(params, lat):
        numbers, alive = lat
        nn_, na, valid = jax.vmap(game24.apply_action, in_axes=(None, None, 0))(
            numbers, alive, jnp.arange(game24.NUM_ACTIONS)
        )
        success = jax.vmap(game24.is_success)(nn_, na)
        terminal = jnp.sum(na, -1) <= 1
        return dtsn.Expansion(
            latent=(nn_, na),
            reward=jnp.where(valid & success, 1.0, 0.0),
            discount=jnp.where(terminal | ~valid, 0.0, 1.0),
            valid=valid,
        )

    model = dtsn.SearchModel(
        encode=lambda p, obs: (obs, jnp.ones((4,), bool)),
        expand=expand,
        value=lambda p, lat: game24.oracle_value(lat[0], lat[1], GAMMA),
    )
    cfg = dtsn.SearchConfig(num_expansions=1, num_actions=game24.NUM_ACTIONS, gamma=GAMMA)
    pool = game24.solvable_instances()
    inst = jnp.asarray(pool[np.random.default_rng(0).choice(len(pool), 3, replace=False)])

    @jax.jit
    def run(numbers):
        out = dtsn.search(jax.random.key(0), None, numbers, model=model, config=cfg, mode="greedy")
        a = jnp.argmax(out.q)
        n2, a2, valid = game24.apply_action(numbers, jnp.ones((4,), bool), a)
        return valid & game24.solvable(n2, a2), jnp.max(out.q)

    ok, qmax = jax.vmap(run)(inst.astype(jnp.float32))
    assert bool(jnp.all(ok))
    np.testing.assert_allclose(np.asarray(qmax), GAMMA**2, rtol=1e-6)


# ---------------------------------------------------------------- a tabular binary tree
NUM_IDS = 15  # heap-indexed binary tree of depth 3


def tabular_model():
    """Latent = heap id; children 2h+1+a; R = theta_r[h, a]; V = theta_v[h]."""

    def expand(params, h):
        kids = 2 * h + 1 + jnp.arange(2)
        return dtsn.Expansion(
            latent=kids,
            reward=params["r"][h],
            discount=jnp.ones((2,)),
            valid=jnp.ones((2,), bool),
        )

    return dtsn.SearchModel(encode=lambda p, obs: obs, expand=expand, value=lambda p, h: p["v"][h])


TAB = tabular_model()
TINY = dtsn.SearchConfig(num_expansions=2, num_actions=2, gamma=GAMMA, temperature=0.5)


def tab_params():
    k1, k2 = jax.random.split(jax.random.key(3))
    return {
        "r": 0.5 * jax.random.normal(k1, (NUM_IDS, 2)),
        "v": jax.random.normal(k2, (NUM_IDS,)),
    }


def test_tree_layout_scores_and_max_backup_by_hand():
    p = tab_params()
    out = dtsn.search(
        jax.random.key(0), p, jnp.int32(0), model=TAB, config=TINY, forced=jnp.array([0, 2])
    )
    t = out.tree
    np.testing.assert_array_equal(np.asarray(t.expanded_node), [0, 2])
    np.testing.assert_array_equal(np.asarray(t.parent), [-1, 0, 0, 2, 2])
    np.testing.assert_array_equal(np.asarray(t.depth), [0, 1, 1, 2, 2])
    np.testing.assert_array_equal(np.asarray(t.latent), [0, 1, 2, 5, 6])
    r, v = np.asarray(p["r"]), np.asarray(p["v"])
    g = np.asarray(t.scores())
    np.testing.assert_allclose(g[1], r[0, 0] + GAMMA * v[1], rtol=1e-6)
    np.testing.assert_allclose(g[3], r[0, 1] + GAMMA * r[2, 0] + GAMMA**2 * v[5], rtol=1e-6)
    # pi over the open set {1, 2} at step 2
    logits = np.array([g[1], g[2]]) / TINY.temperature
    want_logp = logits[1] - np.log(np.exp(logits).sum())
    np.testing.assert_allclose(float(t.log_prob[1]), want_logp, rtol=1e-5)
    q2 = max(r[2, 0] + GAMMA * v[5], r[2, 1] + GAMMA * v[6])
    want_q = [r[0, 0] + GAMMA * v[1], r[0, 1] + GAMMA * q2]
    np.testing.assert_allclose(np.asarray(out.q), want_q, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(t.open_mask()), [False, True, False, True, True])


def test_search_batch_equals_a_loop_and_jit_equals_eager():
    p = tab_params()
    cfg = dtsn.SearchConfig(num_expansions=4, num_actions=2, gamma=GAMMA)
    roots = jnp.array([0, 1, 2], jnp.int32)
    batched = jax.jit(lambda k: dtsn.search_batch(k, p, roots, model=TAB, config=cfg))(
        jax.random.key(5)
    )
    keys = jax.random.split(jax.random.key(5), 3)
    for b in range(3):
        one = dtsn.search(keys[b], p, roots[b], model=TAB, config=cfg)
        np.testing.assert_allclose(np.asarray(batched.q[b]), np.asarray(one.q), rtol=1e-6)
        np.testing.assert_array_equal(
            np.asarray(batched.tree.expanded_node[b]), np.asarray(one.tree.expanded_node)
        )


# An enumeration of the tabular tree written from the paper's definitions, sharing no code with
# the search: a node is its heap id h (children 2h+1+a), so a tree is the set of expanded ids.
def _path(h):
    """``[(ancestor, action), ...]`` from the root down to heap id ``h``."""
    out = []
    while h > 0:
        parent = (h - 1) // 2
        out.append((parent, (h - 1) % 2))
        h = parent
    return out[::-1]


def _ref_score(p, h):
    """``g(h) = sum_i gamma^i r_i + gamma^depth V(h)``."""
    steps = _path(h)
    ret = sum(GAMMA**i * p["r"][n, a] for i, (n, a) in enumerate(steps))
    return ret + GAMMA ** len(steps) * p["v"][h]


def _ref_loss(p, expanded, action):
    """Root-Q cross-entropy of the tree whose expanded ids are ``expanded`` (max backup)."""

    def vhat(h):
        if h not in expanded:
            return p["v"][h]
        return jnp.max(jnp.stack([p["r"][h, a] + GAMMA * vhat(2 * h + 1 + a) for a in (0, 1)]))

    q = jnp.stack([p["r"][0, a] + GAMMA * vhat(1 + a) for a in (0, 1)])
    return jnp.log(jnp.sum(jnp.exp(q))) - q[action]


def _ref_sequences(p, action, k):
    """Every expansion sequence of ``k`` steps (the first is the root): a list of ``(node
    indices in the search's layout, probability, [L_1 .. L_k])``. The ``t``-th expansion's
    children take indices ``1 + 2 t + a``; ``n_t ~ softmax(g / T)`` over the open ids."""
    out = []

    def walk(order, index, prob, losses):
        expanded = set(order)
        losses = losses + [_ref_loss(p, expanded, action)]
        if len(order) == k:
            out.append(([index[h] for h in order], prob, losses))
            return
        open_ = [c for h in order for c in (2 * h + 1, 2 * h + 2) if c not in expanded]
        logits = jnp.stack([_ref_score(p, h) for h in open_]) / TINY3.temperature
        pi = jnp.exp(logits - jnp.log(jnp.sum(jnp.exp(logits))))
        t = len(order)
        for j, h in enumerate(open_):
            kids = {2 * h + 1 + a: 1 + 2 * t + a for a in (0, 1)}
            walk(order + [h], {**index, **kids}, prob * pi[j], losses)

    walk([0], {0: 0, 1: 1, 2: 2}, jnp.float32(1.0), [])
    return out


TINY3 = dtsn.SearchConfig(num_expansions=3, num_actions=2, gamma=GAMMA, temperature=0.5)


def _ref_gradient(params, action):
    """``grad E[L_K] = grad sum_seq P(seq) L_K(seq)`` over the enumeration."""

    def expected(p):
        return sum(prob * losses[-1] for _, prob, losses in _ref_sequences(p, action, 3))

    g = jax.grad(expected)(params)
    return np.concatenate([np.asarray(g["r"]).reshape(-1), np.asarray(g["v"]).reshape(-1)])


def test_search_probabilities_and_losses_equal_an_independent_enumeration():
    """For every expansion sequence of K = 3 the search's ``log pi_t(n_t)`` and its losses
    ``L_1 .. L_K`` (the telescoping baseline's terms) equal the enumeration's."""
    p, action = tab_params(), 1
    seqs = _ref_sequences(p, action, 3)
    assert len(seqs) == 6 and abs(float(sum(prob for _, prob, _ in seqs)) - 1.0) < 1e-5

    @jax.jit
    def run(forced):
        out = dtsn.search(
            jax.random.key(0), p, jnp.int32(0), model=TAB, config=TINY3, forced=forced
        )
        return jnp.sum(out.tree.log_prob), dtsn.losses_by_expansions(out.tree, TINY3, action)

    for nodes, prob, losses in seqs:
        logp, got = run(jnp.array(nodes))
        np.testing.assert_allclose(float(logp), np.log(float(prob)), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(got), np.asarray(losses), rtol=1e-5, atol=1e-6)


def _estimates(params, action, baseline, num):
    def one(key):
        def surrogate(p):
            out = dtsn.search(key, p, jnp.int32(0), model=TAB, config=TINY3)
            return dtsn.reinforce_surrogate(out.tree, TINY3, action, baseline=baseline)[1]

        g = jax.grad(surrogate)(params)
        return jnp.concatenate([g["r"].reshape(-1), g["v"].reshape(-1)])

    return jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(11), num))


def test_reinforce_estimator_is_unbiased_and_the_baseline_lowers_variance():
    """The estimator's mean over samples equals the enumerated ``grad E[L_K]`` (K = 3) within 3
    standard errors for both baselines; the telescoping one has the lower summed variance."""
    params, action, num = tab_params(), 1, 40_000
    exact = _ref_gradient(params, action)
    var = {}
    for baseline in ("telescoping", "none"):
        g = np.asarray(_estimates(params, action, baseline, num), np.float64)
        mean, se = g.mean(0), g.std(0) / np.sqrt(num)
        assert np.all(np.abs(mean - exact) <= 3 * se + 1e-6), (baseline, mean, exact, se)
        var[baseline] = float(g.var(0).sum())
    assert np.abs(exact).sum() > 0.1  # the test is not vacuous
    ratio = var["telescoping"] / var["none"]
    assert ratio < 0.8, ratio


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "field,kwargs",
    [
        ("num_expansions", {"num_expansions": 0}),
        ("temperature", {"temperature": 0.0}),
        ("temperature", {"temperature": float("inf")}),
        ("num_actions", {"num_actions": 0}),
        ("gamma", {"gamma": 1.5}),
    ],
)
def test_bad_search_config_names_the_field(field, kwargs):
    with pytest.raises(ConfigError) as e:
        dtsn.SearchConfig(**kwargs)
    assert e.value.key == field and field in str(e.value)
