"""``jaxlab levels ...``: inspect, render and roll out Kinetix level files; keep the level library.

Commands::

    jaxlab levels show FILE.json
    jaxlab levels render FILE.json --out run.gif [--policy random|zero] [--steps N] [--seed S]
    jaxlab levels rollout FILE.json --steps N --save-trajectory out.npz [--policy zero|random]
                                    [--seed S]
    jaxlab levels library [--list] [--write [--force]] [--render DIR] [--verify [SIZE ...]]
                          [--search [NAME ...] [--seed S] [--candidates N] [--save]]

``render`` writes a GIF of the episode (a ``.png`` out path writes the first frame only);
``rollout`` writes per-step arrays (slot order as in the file; row k is the state after k + 1 env
steps; the simulation never resets: termination is recorded and the scene keeps running):
``polygon_position`` [N, P, 2], ``polygon_rotation`` [N, P], ``circle_position`` [N, C, 2],
``circle_rotation`` [N, C], ``reward`` [N], ``terminated`` [N], ``truncated`` [N].
``library`` works on the project's own level library (``jaxlab.envs.kinetix.library``): list it,
(re)write its JSON files, render each level's first frame to ``DIR/<size>_<name>.png``, search
solutions (one JSON line per level; ``--save`` stores them in ``solutions.json``) or replay the
stored solutions and the no-op policy. Existing output files are kept unless ``--overwrite`` is
given (``library --write``: unless ``--force``). Errors print ``error: ...`` and
return status 2.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from jaxlab.core import atomic, json_files

ROLE = ("default", "green", "blue", "red")


def _fmt(v) -> str:
    text = np.array2string(
        np.asarray(v), precision=3, separator=", ", suppress_small=True, max_line_width=10**6
    )
    return " ".join(text.split())


def cmd_show(args: argparse.Namespace) -> int:
    from jaxlab.envs.kinetix.levels import load_level
    from jaxlab.envs.kinetix.state import EnvParams

    state, sp, params = load_level(args.file)
    s = state.sim
    print(f"level: {args.file}")
    print(
        f"sizes: polygons {sp.num_polygons} (4 static), circles {sp.num_circles}, joints "
        f"{sp.num_joints}, thrusters {sp.num_thrusters}; frame_skip {sp.frame_skip}"
    )
    default = EnvParams()
    changed = {
        k: getattr(params, k)
        for k in default.__dataclass_fields__
        if getattr(params, k) != getattr(default, k)
    }
    print(f"gravity: {_fmt(s.gravity)}; params differing from defaults: {changed or 'none'}")
    P = sp.num_polygons
    for kind, bodies, roles, dens in (
        ("polygon", s.polygon, state.polygon_shape_roles, state.polygon_densities),
        ("circle", s.circle, state.circle_shape_roles, state.circle_densities),
    ):
        for i in np.flatnonzero(np.asarray(bodies.active)):
            g = i if kind == "polygon" else i + P
            if kind == "polygon" and i in (1, 2, 3):
                continue
            fixed = "fixated" if float(bodies.inverse_mass[i]) == 0 else "dynamic"
            name = "floor" if kind == "polygon" and i == 0 else kind
            if kind == "polygon":
                n = int(bodies.n_vertices[i])
                shape = f"vertices {_fmt(np.asarray(bodies.vertices[i])[:n])}"
            else:
                shape = f"radius {float(bodies.radius[i]):.3f}"
            print(
                f"  [{g}] {name} {i}: role {ROLE[int(roles[i])]}, {fixed}, position "
                f"{_fmt(bodies.position[i])}, rotation {float(bodies.rotation[i]):.3f}, "
                f"density {float(dens[i]):.3f}, friction {float(bodies.friction[i]):.3f}, {shape}"
            )
    j = s.joint
    for i in np.flatnonzero(np.asarray(j.active)):
        kind = "fixed" if bool(j.is_fixed_joint[i]) else "revolute"
        motor = ""
        if not bool(j.is_fixed_joint[i]):
            motor = (
                f", motor {'on' if bool(j.motor_on[i]) else 'off'} (speed "
                f"{float(j.motor_speed[i]):.2f}, power {float(j.motor_power[i]):.2f}, binding "
                f"{int(state.motor_bindings[i])}{', auto' if bool(state.motor_auto[i]) else ''})"
            )
            if bool(j.motor_has_joint_limits[i]):
                motor += (
                    f", limits [{float(j.min_rotation[i]):.2f}, {float(j.max_rotation[i]):.2f}]"
                )
        print(f"  joint {i}: {kind} {int(j.a_index[i])} <-> {int(j.b_index[i])}{motor}")
    t = s.thruster
    for i in np.flatnonzero(np.asarray(t.active)):
        print(
            f"  thruster {i}: on shape {int(t.object_index[i])}, rotation "
            f"{float(t.rotation[i]):.3f}, power {float(t.power[i]):.2f}, binding "
            f"{int(state.thruster_bindings[i])}"
        )
    return 0


@functools.lru_cache(maxsize=8)
def _simulator(env, steps: int, policy: str):
    """A jitted ``(state, params, key) -> trajectory`` for ``env`` (cached per equal env)."""
    import jax

    space = env.action_space()
    noop = env.noop_action()

    def run(state, params, key):
        def body(s, k):
            k_act, k_step = jax.random.split(k)
            action = space.sample(k_act) if policy == "random" else noop
            _, s, r, term, trunc, _ = env.step(k_step, s, action, params)
            return s, (s, r, term, trunc)

        _, out = jax.lax.scan(body, state, jax.random.split(key, steps))
        return out

    return jax.jit(run)


def _simulate(path: str, steps: int, policy: str, seed: int):
    import jax

    from jaxlab.envs.kinetix.env import KinetixEnv
    from jaxlab.envs.kinetix.levels import load_level

    if steps < 1:
        raise ValueError(f"--steps {steps}; expected >= 1")
    state, sp, params = load_level(path)
    env = KinetixEnv(
        sp, level=state, observation_type="symbolic_flat", auto_reset=False, params=params
    )
    traj = _simulator(env, steps, policy)(state, params, jax.random.key(seed))
    return env, params, jax.device_get(traj)


def _check_out(path: Path, overwrite: bool) -> None:
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path}: exists; pass --overwrite to replace it")
    if not path.parent.exists():
        raise FileNotFoundError(f"{path.parent}: no such directory for the output")


def cmd_rollout(args: argparse.Namespace) -> int:
    out = Path(args.save_trajectory)
    _check_out(out, args.overwrite)
    _, _, (states, reward, term, trunc) = _simulate(args.file, args.steps, args.policy, args.seed)
    s = states.sim
    arrays = {
        "polygon_position": s.polygon.position,
        "polygon_rotation": s.polygon.rotation,
        "circle_position": s.circle.position,
        "circle_rotation": s.circle.rotation,
        "reward": reward,
        "terminated": term,
        "truncated": trunc,
    }
    with atomic.replacing(out) as tmp, open(tmp, "wb") as f:
        np.savez(f, **{k: np.asarray(v) for k, v in arrays.items()})
    first = np.flatnonzero(np.asarray(term))
    print(
        f"wrote {out}: {args.steps} steps, return {float(np.sum(reward)):.3f}, "
        f"first termination at step {int(first[0]) + 1 if first.size else 'none'}"
    )
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    import jax

    from jaxlab.envs.kinetix.render import make_render_pixels, save_gif, save_png, to_image

    out = Path(args.out)
    _check_out(out, args.overwrite)
    if out.suffix.lower() not in (".gif", ".png"):
        raise ValueError(f"--out {out}: expected a .gif or .png file name")
    if args.downscale < 1:
        raise ValueError(f"--downscale {args.downscale}; expected >= 1")
    from jaxlab.envs.kinetix.levels import load_level

    state0, sp, params = load_level(args.file)
    render = jax.jit(make_render_pixels(sp, downscale=args.downscale))
    if out.suffix.lower() == ".png":
        save_png(out, to_image(render(state0, params)))
        print(f"wrote {out}: initial frame")
        return 0
    _, _, (states, reward, term, _) = _simulate(args.file, args.steps, args.policy, args.seed)
    frames = [to_image(render(state0, params))]
    for k in range(args.steps):
        frames.append(to_image(render(jax.tree.map(lambda x, k=k: x[k], states), params)))
    save_gif(out, frames, fps=args.fps)
    print(f"wrote {out}: {len(frames)} frames, return {float(np.sum(reward)):.3f}")
    return 0


def cmd_library(args: argparse.Namespace) -> int:
    """The level library's maintenance: list, write, render, search and verify (in that order)."""
    from jaxlab.envs.kinetix import library as lib

    if args.list:
        for name in lib.names():
            print(f"{name:32s} {lib.LIBRARY[name].description}")
    if args.write:
        for path in lib.write_all(force=args.force):
            print(f"wrote {path}")
    if args.render:
        for path in lib.render_all(args.render):
            print(f"rendered {path}")
    if args.search is not None:
        _search_library(args)
    if args.verify is not None:
        for size in args.verify or ("s", "m", "l"):
            for name, (sol, end, noop) in lib.replay_size(size).items():
                print(json.dumps({"level": name, "solution": sol, "end": end, "noop": noop}))
    return 0


def _search_library(args: argparse.Namespace) -> None:
    """``library --search``: one JSON line per level; ``--save`` merges into ``solutions.json``."""
    import jax

    from jaxlab.envs.kinetix import library as lib

    path = lib.SOLUTIONS_FILE
    sols = json_files.read_json(path) if path.exists() else {}
    for name in args.search or lib.names():
        found = lib.search_solution(
            jax.random.key(args.seed),
            name,
            candidates=args.candidates,
            rounds=args.rounds,
            segments=args.segments,
        )
        steps = sum(n for _, n in found) if found else None
        print(json.dumps({"level": name, "solved": found is not None, "steps": steps}))
        if found is not None:
            sols[name] = [[list(a), n] for a, n in found]
    if args.save:
        ordered = {n: sols[n] for n in lib.names() if n in sols}
        atomic.write_text(path, json.dumps(ordered, indent=1) + "\n")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jaxlab levels", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("show", help="print a level's contents")
    s.add_argument("file")
    s.set_defaults(fn=cmd_show)

    s = sub.add_parser("render", help="render an episode to a GIF (or the first frame to PNG)")
    s.add_argument("file")
    s.add_argument("--out", required=True)
    s.add_argument("--policy", choices=("random", "zero"), default="zero")
    s.add_argument("--steps", type=int, default=128)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--downscale", type=int, default=2, help="frame = screen_dim // downscale")
    s.add_argument("--fps", type=float, default=30.0)
    s.add_argument("--overwrite", action="store_true")
    s.set_defaults(fn=cmd_render)

    s = sub.add_parser("rollout", help="simulate and save per-step arrays to .npz")
    s.add_argument("file")
    s.add_argument("--steps", type=int, required=True)
    s.add_argument("--policy", choices=("random", "zero"), default="zero")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--save-trajectory", required=True)
    s.add_argument("--overwrite", action="store_true")
    s.set_defaults(fn=cmd_rollout)

    s = sub.add_parser("library", help="the shipped level library: list, write, render, search")
    s.add_argument("--write", action="store_true", help="write the level JSON files")
    s.add_argument("--force", action="store_true", help="replace differing files")
    s.add_argument("--list", action="store_true", help="list the levels")
    s.add_argument("--render", metavar="DIR", help="render first frames to DIR")
    s.add_argument("--search", nargs="*", metavar="NAME", help="search solutions")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--candidates", type=int, default=256)
    s.add_argument("--rounds", type=int, default=6)
    s.add_argument("--segments", type=int, default=16)
    s.add_argument("--save", action="store_true", help="store found solutions")
    s.add_argument("--verify", nargs="*", metavar="SIZE", help="replay solutions and no-op")
    s.set_defaults(fn=cmd_library)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``jaxlab levels`` with ``argv`` (without the program name); returns the exit status."""
    from jaxlab.envs.kinetix.levels import LevelFormatError

    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:
        return int(e.code or 0)
    try:
        return args.fn(args)
    except (LevelFormatError, ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
