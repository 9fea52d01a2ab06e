"""Progressive distillation on sparse parity (arXiv 2410.05464): loss, schedule, teacher, students.

One teacher run (module fixture, n=16, k=3, exact probes over all 2^16 inputs) is shared by the
phase-transition, probe, persistence and student tests; the students of all four methods and two
seeds are one vmapped program.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.lm import distill
from jaxlab.lm import sparse_parity as sp
from tests.typecheck import unchecked

SGD_02 = OptimConfig(name="sgd", lr=0.2)
TASK = sp.SparseParity(n=16, k=3)
TEACHER = distill.ParityMLP(width=512)
STUDENT = distill.ParityMLP(width=64)
TEACHER_SPEC = distill.TrainSpec(steps=600, batch=256, every=20, optim=SGD_02)
MULTIPLIER = 2.0
LONG_STUDENT_SPEC = distill.TrainSpec(steps=2000, batch=64, every=50, optim=SGD_02)


# ----------------------------------------------------------------------------- pure pieces


def _np_log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _np_kd(s, t, y, alpha, tau, reverse):
    """NumPy loss and analytic gradient in the student's logits of α·CE(y, s) + (1−α)·KL with
    the teacher tempered (softmax(t/τ)) and the student not (softmax(s))."""
    b = s.shape[0]
    log_ps, log_pt = _np_log_softmax(s), _np_log_softmax(t / tau)
    ps, pt, onehot = np.exp(log_ps), np.exp(log_pt), np.eye(s.shape[1])[y]
    ce = -log_ps[np.arange(b), y]
    if reverse:
        d = log_ps - log_pt
        kl = (ps * d).sum(-1)
        g_kl = ps * (d - kl[:, None])
    else:
        kl = (pt * (log_pt - log_ps)).sum(-1)
        g_kl = ps - pt
    loss = np.mean(alpha * ce + (1 - alpha) * kl)
    return loss, (alpha * (ps - onehot) + (1 - alpha) * g_kl) / b


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("alpha", [0.0, 0.3])
def test_distillation_loss_and_gradient_match_numpy(alpha, tau, reverse):
    """Only the teacher is tempered: value and ∂/∂s equal the NumPy reference at every τ."""
    rng = np.random.default_rng(0)
    s, t = (rng.normal(size=(2, 7, 3)) * 3).astype(np.float64)
    y = rng.integers(0, 3, 7)
    want, want_grad = _np_kd(s, t, y, alpha, tau, reverse)

    t32, y32 = jnp.asarray(t, jnp.float32), jnp.asarray(y)

    def f(s):
        return distill.distillation_loss(s, t32, y32, alpha=alpha, tau=tau, reverse=reverse)

    got, grad = jax.jit(jax.value_and_grad(f))(jnp.asarray(s, jnp.float32))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-6)


def test_kd_loss_anneals_the_temperature_and_refuses_nonpositive_ones():
    """``linear``: τ_u = max(τ(1 − u/steps), τ_min); the loss uses τ_u; τ <= 0 names the key."""
    kd = distill.KDLoss(tau=2.0, anneal="linear", tau_min=0.1)
    taus = [float(kd.temperature(u, 100)) for u in (0, 50, 99, 100)]
    np.testing.assert_allclose(taus, [2.0, 1.0, 0.1, 0.1], rtol=1e-6)
    assert float(distill.KDLoss(tau=3.0).temperature(77, 100)) == 3.0
    rng = np.random.default_rng(2)
    s, t = rng.normal(size=(2, 5, 4)).astype(np.float32)
    y = rng.integers(0, 4, 5)
    got = kd(jnp.asarray(s), jnp.asarray(t), jnp.asarray(y), alpha=0.0, step=50, steps=100)
    np.testing.assert_allclose(got, _np_kd(s, t, y, 0.0, 1.0, False)[0], rtol=1e-5)
    for bad in (0.0, -1.0):
        with pytest.raises(ConfigError, match="'tau'"):
            distill.KDLoss(tau=bad)
    with pytest.raises(ConfigError, match="'tau_min'"):
        distill.KDLoss(tau_min=0.0)
    with pytest.raises(ConfigError, match="'kl'"):
        distill.KDLoss(kl="both")


def test_distillation_loss_gradient_ignores_the_teacher():
    s, t, y = jnp.ones((2, 2)), jnp.array([[1.0, 0.0], [0.0, 2.0]]), jnp.array([0, 1])
    g = jax.grad(lambda t: distill.distillation_loss(s, t, y, alpha=0.0))(t)
    np.testing.assert_array_equal(g, 0.0)
    # zero at s = t for α = 0
    assert float(distill.distillation_loss(t, t, y, alpha=0.0)) == pytest.approx(0.0, abs=1e-6)


def test_saturate_schedule_moves_on_when_the_accuracy_stops_rising():
    """The teacher moves to the next *selected* checkpoint once the newest accuracy is within 0.01
    of the mean of the 5 before it and 0.01 above the accuracy of the last move; a plateau
    without progress since then keeps it; the last selected checkpoint is kept."""
    selected = jnp.array([True, False, True, True])
    accs = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6] + [0.6] * 6 + [0.7] + [0.8] * 6 + [0.9] * 8
    update = jax.jit(distill.saturation_update)
    sat, index = distill.saturation_init(selected), []
    for a in accs:
        sat = update(sat, jnp.float32(a), selected)
        index.append(int(sat.index))
    # moves after the 11th evaluation (plateau at 0.6) and the 19th (plateau at 0.8)
    assert index == [0] * 10 + [2] * 8 + [3] * 9, index


def test_saturate_student_follows_selected_checkpoints_in_order():
    """``saturate=True`` trains a student whose teacher index starts at the first selected
    checkpoint, only takes selected ones and never goes back."""
    small, task = distill.ParityMLP(width=8), sp.SparseParity(n=6, k=2)
    keys = jax.random.split(jax.random.PRNGKey(3), 4)
    params = [small.init(k, jnp.zeros((1, task.n))) for k in keys]
    run = distill.TeacherRun(
        params=jax.tree.map(lambda *p: jnp.stack(p), *params),
        steps=jnp.array([10, 20, 30, 40], jnp.int32),
        losses=jnp.zeros((40,), jnp.float32),
    )
    spec = distill.TrainSpec(steps=120, batch=16, every=4, optim=SGD_02)
    selected = jnp.array([False, True, False, True])
    x, _ = sp.sample(jax.random.PRNGKey(4), task, 64)
    train = jax.jit(distill.train_student, static_argnums=(1, 2, 6, 7), static_argnames="saturate")
    curve = train(
        jax.random.PRNGKey(5), small, small, run, selected, 0.0, task, spec, x, saturate=True
    )
    index = np.asarray(curve.teacher_index)
    assert index[0] == 1 and set(index.tolist()) <= {1, 3} and np.all(np.diff(index) >= 0)
    assert np.all(np.isfinite(np.asarray(curve.loss)))


def test_schedule_picks_first_selected_checkpoint_at_or_after_t_times_multiplier():
    steps = jnp.array([100, 200, 300, 400])
    every = jnp.ones(4, bool)
    two = jnp.array([False, True, False, True])
    idx = jax.jit(distill.schedule_index)
    assert int(idx(0, steps, every, 1.0)) == 0
    assert int(idx(100, steps, every, 1.0)) == 0  # at: 100 >= 100
    assert int(idx(101, steps, every, 1.0)) == 1
    assert int(idx(60, steps, every, 5.0)) == 2  # 300 >= 60·5
    assert int(idx(1000, steps, every, 1.0)) == 3  # past the end: the last one
    assert int(idx(10, steps, two, 1.0)) == 1  # first *selected*
    assert int(idx(250, steps, two, 1.0)) == 3
    final = jnp.array([False, False, False, True])
    assert int(idx(0, steps, final, 1.0)) == 3
    # vmap over methods (selection masks) and steps equals the loop
    masks = jnp.stack([every, two, final])
    us = jnp.arange(0, 500, 60)
    batched = jax.vmap(
        jax.vmap(lambda u, m: distill.schedule_index(u, steps, m, 1.0), (0, None)), (None, 0)
    )(us, masks)
    loop = [[int(idx(u, steps, m, 1.0)) for u in us] for m in masks]
    np.testing.assert_array_equal(batched, loop)


def test_method_selection_and_bad_input():
    np.testing.assert_array_equal(distill.method_selection("two_shot", 5, 1), [0, 1, 0, 0, 1])
    np.testing.assert_array_equal(distill.method_selection("one_shot", 3, None), [0, 0, 1])
    assert distill.method_selection("progressive", 4, None).all()
    with pytest.raises(ConfigError, match="checkpoint_steps"):
        distill.method_selection("progressive", 1, None)  # no intermediate checkpoints
    with pytest.raises(ConfigError, match="transition"):
        distill.method_selection("two_shot", 4, 3)  # the final one is not intermediate
    with pytest.raises(ConfigError, match="method"):
        unchecked(distill.method_selection)("three_shot", 4, 1)  # its own validation
    with pytest.raises(ConfigError, match="'k': got 5"):
        sp.SparseParity(n=4, k=5)
    with pytest.raises(ConfigError, match="every"):
        distill.TrainSpec(steps=100, every=30)
    with pytest.raises(ValueError, match="never fell"):
        distill.phase_transition_step(np.full(100, np.log(2.0)))


def test_parity_labels_and_sampler():
    x = sp.all_inputs(4)
    assert x.shape == (16, 4) and set(np.unique(x)) == {-1.0, 1.0}
    assert len({tuple(r) for r in np.asarray(x)}) == 16
    y = sp.labels(sp.SparseParity(4, 2), x)
    np.testing.assert_array_equal(y, (np.asarray(x[:, 0] * x[:, 1]) < 0).astype(int))
    # the exact parity has zero degree-1 correlations, a coordinate has correlation 1/2
    np.testing.assert_allclose(sp.degree1_correlations(y.astype(jnp.float32), x), 0.0, atol=1e-7)
    c = sp.degree1_correlations((x[:, 2] + 1) / 2, x)
    np.testing.assert_allclose(c, [0, 0, 0.5, 0], atol=1e-7)
    # sampler: the 8 patterns of 3 coordinates are uniform (chi-square, 7 dof, p = 0.001 at 24.3)
    xs, _ = sp.sample(jax.random.PRNGKey(0), sp.SparseParity(8, 3), 8000)
    codes = np.asarray(((xs[:, :3] + 1) / 2) @ jnp.array([1.0, 2.0, 4.0])).astype(int)
    counts = np.bincount(codes, minlength=8)
    assert ((counts - 1000) ** 2 / 1000).sum() < 24.3


# ----------------------------------------------------------------------------- teacher


@pytest.fixture(scope="module")
def teacher_run():
    run = jax.jit(distill.train_teacher, static_argnums=(1, 2, 3))(
        jax.random.PRNGKey(0), TEACHER, TASK, TEACHER_SPEC
    )
    return jax.device_get(run)


@pytest.fixture(scope="module")
def transition(teacher_run):
    return distill.transition_checkpoint(teacher_run)


def test_teacher_plateaus_then_drops_sharply(teacher_run):
    losses = np.asarray(teacher_run.losses)
    step = distill.phase_transition_step(losses)
    log2 = np.log(2.0)
    plateau = losses[: step - 60]
    assert step >= 100, step  # a plateau of at least 100 steps
    assert np.abs(plateau - log2).max() < 0.03, plateau.max()
    # then the loss falls from 0.9·log2 to below 0.1·log2 within fewer steps than the plateau
    below = np.nonzero(np.convolve(losses, np.ones(20) / 20, "valid") < 0.1 * log2)[0]
    assert below.size and below[0] + 19 - step < step, (step, below[:1])
    assert losses[-20:].mean() < 0.05


def test_transition_checkpoint_carries_the_support(teacher_run, transition):
    x = sp.all_inputs(TASK.n)
    picked = jax.tree.map(lambda p: p[jnp.array([transition, -1])], teacher_run.params)
    sub = distill.TeacherRun(params=picked, steps=teacher_run.steps[:2], losses=teacher_run.losses)
    corr, acc = jax.jit(distill.probe_run, static_argnums=(0, 2))(TEACHER, sub, TASK, x)
    on, off = sp.support_ratio(TASK, corr)
    assert float(on[0]) >= 5 * float(off[0]), (on, off)  # intermediate: on-support ≫ off
    assert float(on[1]) <= 0.25 * float(on[0]), (on, off)  # final: the curriculum is gone
    assert float(acc[1]) == 1.0


def test_teacher_run_round_trips_through_the_checkpointer(teacher_run, tmp_path):
    @dataclasses.dataclass(frozen=True)
    class Cfg:
        n: int = 16

    few = distill.TeacherRun(
        params=jax.tree.map(lambda p: p[:3], teacher_run.params),
        steps=teacher_run.steps[:3],
        losses=teacher_run.losses[: int(teacher_run.steps[2])],
    )
    assert distill.save_teacher_run(few, tmp_path / "t", Cfg()) == [20, 40, 60]
    abstract = jax.eval_shape(lambda: jax.tree.map(lambda p: p[0], few.params))
    back = distill.load_teacher_run(tmp_path / "t", Cfg(), abstract)
    np.testing.assert_array_equal(back.steps, few.steps)
    jax.tree.map(np.testing.assert_array_equal, back.params, few.params)
    np.testing.assert_array_equal(back.losses, few.losses)


# ----------------------------------------------------------------------------- students


@pytest.fixture(scope="module")
def student_curves():
    """n=20, k=4 (harder for a 32-wide student than n=16, k=3): one teacher, 2 seeds x 4 methods."""
    task = sp.SparseParity(n=20, k=4)
    spec = distill.TrainSpec(steps=800, batch=256, every=20, optim=SGD_02)
    run = jax.jit(distill.train_teacher, static_argnums=(1, 2, 3))(
        jax.random.PRNGKey(0), TEACHER, task, spec
    )
    transition = distill.transition_checkpoint(run)
    masks = jnp.asarray(
        np.stack([distill.method_selection(m, len(run.steps), transition) for m in distill.METHODS])
    )
    alphas = jnp.array([0.0, 0.0, 0.0, 1.0])
    eval_x, _ = sp.sample(jax.random.PRNGKey(7), task, 1024)
    student = distill.ParityMLP(width=32)

    def one(key, mask, alpha):
        return distill.train_student(
            key,
            student,
            TEACHER,
            run,
            mask,
            alpha,
            task,
            LONG_STUDENT_SPEC,
            eval_x,
            multiplier=MULTIPLIER,
        )

    curves = jax.jit(jax.vmap(jax.vmap(one, (None, 0, 0)), (0, None, None)))(
        jax.random.split(jax.random.PRNGKey(1), 2), masks, alphas
    )
    return jax.device_get(curves)


def test_two_shot_student_gets_the_curriculum_early(student_curves):
    """The transition checkpoint's curriculum shows in the student: a fifth into training, the
    2-shot student (taught by that checkpoint) is clearly ahead of one-shot and label students
    (seed-mean accuracy).
    (The >= 2x samples-to-95 % comparison over seeds is in
    experiments/distill_figures/distill_figures.py.)"""
    acc = np.asarray(student_curves.accuracy).mean(0)  # [methods, evals]
    fifth = acc.shape[-1] // 5
    got = dict(zip(distill.METHODS, acc[:, fifth], strict=True))
    assert got["two_shot"] >= max(got["one_shot"], got["labels"]) + 0.08, got
    # every method ends up solving the task
    assert acc[:, -1].min() >= 0.95, acc[:, -1]


def test_transformer_teacher_trains_with_checkpoints():
    model = distill.ParityTransformer(d_model=16, n_heads=2, head_dim=8, d_ff=32, n_layers=1)
    spec = distill.TrainSpec(steps=4, batch=8, every=2, optim=OptimConfig(name="adam", lr=1e-3))
    run = jax.jit(distill.train_teacher, static_argnums=(1, 2, 3))(
        jax.random.PRNGKey(0), model, sp.SparseParity(8, 2), spec
    )
    np.testing.assert_array_equal(run.steps, [2, 4])
    assert all(leaf.shape[0] == 2 for leaf in jax.tree.leaves(run.params))
    assert np.isfinite(np.asarray(run.losses)).all() and run.losses.shape == (4,)
    first, last = (distill.checkpoint_params(run, i) for i in (0, 1))
    assert any(
        not np.allclose(a, b)
        for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(last), strict=True)
    )


def test_weighted_loss_schedule_and_torch_init():
    """Masked-position weights average only the weighted rows; the warm-up + cosine schedule peaks
    at lr after 6 % of the steps and ends at 0; the PyTorch init is U(±1/√fan_in) with a head
    bias."""
    rng = np.random.default_rng(1)
    s, t = rng.normal(size=(2, 6, 3)).astype(np.float32)
    y = rng.integers(0, 3, 6)
    w = np.array([1, 0, 1, 1, 0, 0], np.float32)
    ce = -_np_log_softmax(s)[np.arange(6), y]
    pt = np.exp(_np_log_softmax(t))
    full = 0.4 * ce + 0.6 * (pt * (np.log(pt) - _np_log_softmax(s))).sum(-1)
    got = distill.distillation_loss(
        jnp.asarray(s), jnp.asarray(t), jnp.asarray(y), alpha=0.4, weights=jnp.asarray(w)
    )
    np.testing.assert_allclose(got, np.dot(w, full) / w.sum(), rtol=1e-5)
    spec = distill.TrainSpec(
        steps=100, every=10, optim=distill.warmup_cosine(0.5, 100, name="sgd", b2=0.999)
    )
    lr = spec.learning_rate()
    assert float(lr(0)) == 0.0 and float(lr(6)) == pytest.approx(0.5) and float(lr(100)) < 1e-6
    with pytest.raises(ConfigError, match="schedule"):
        distill.TrainSpec(steps=100, every=10, optim=OptimConfig(schedule="step"))
    params = distill.ParityMLP(64, torch_init=True).init(jax.random.PRNGKey(0), jnp.ones((1, 16)))
    k = np.asarray(params["params"]["hidden"]["kernel"])
    assert np.abs(k).max() <= 0.25 and np.abs(k).max() > 0.2  # U(±1/√16)
    assert params["params"]["head"]["bias"].shape == (2,)
