"""The L levels of the benchmarks' L rows, as Kinetix JSON files both implementations load.

* ``official``: every human-designed L level shipped in the ``kinetix-env`` wheel
  (``kinetix/levels/l/*.json`` in the peer venv, ``benchmarks/peers/.venv-kinetix``), the levels
  the Kinetix paper tests its general agent on zero-shot.
* ``random``: ``n`` levels drawn by jaxlab's generator (``jaxlab.envs.kinetix.generator``, keys
  ``0 .. n-1``) at L sizes, the distribution the general agent trains on, written with
  ``levels.save_level`` so the original loads the same levels.

Every level of a set has L's static sizes, so one compiled program serves the whole set.
"""

from __future__ import annotations

import glob
import statistics
from pathlib import Path

import jax

from benchmarks.harness import PEERS

SETS = ("official", "random")
LEVEL_DIR = PEERS / "l_levels"  # the random levels and the list handed to the peer (git-ignored)


def official_levels() -> list[Path]:
    """The wheel's ``levels/l/*.json`` (sorted; empty without the peer venv)."""
    pattern = str(PEERS / ".venv-kinetix" / "lib" / "python*" / "site-packages" / "kinetix")
    return sorted(Path(p) for d in glob.glob(pattern) for p in glob.glob(f"{d}/levels/l/*.json"))


def random_levels(n: int, out_dir: Path) -> list[Path]:
    """``n`` generator levels at L sizes written to ``out_dir/random_<k>.json`` (reused when
    present: the generator is deterministic per key)."""
    from jaxlab.core.compile import jit
    from jaxlab.envs.kinetix.generator import sample_level
    from jaxlab.envs.kinetix.levels import save_level
    from jaxlab.envs.kinetix.state import EnvParams, StaticEnvParams

    static = StaticEnvParams.from_size("l")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"random_{k}.json" for k in range(n)]
    missing = [k for k, p in enumerate(paths) if not p.exists()]
    if missing:
        sample = jit(lambda key: sample_level(key, static))
        for k in missing:
            save_level(paths[k], sample(jax.random.key(k)), static, EnvParams())
    return paths


def level_files(sets: str, n_random: int, out_dir: Path) -> list[Path]:
    """The files of the comma-separated ``sets`` (``official``, ``random``)."""
    names = [s.strip() for s in sets.split(",") if s.strip()]
    bad = [s for s in names if s not in SETS]
    if bad:
        raise ValueError(f"--l-levels: {bad} not in {SETS}")
    out: list[Path] = []
    if "official" in names:
        found = official_levels()
        if not found:
            raise FileNotFoundError(
                "no official L levels: run `bash benchmarks/peers/setup_kinetix_peer.sh`"
            )
        out += found
    if "random" in names:
        out += random_levels(n_random, out_dir)
    return out


def level_name(path: Path) -> str:
    """``l/<stem>`` for an official level, ``random/<stem>`` for a generated one."""
    return f"{'random' if path.stem.startswith('random_') else 'l'}/{path.stem}"


def level_summary(what: str, n: int, ratios: dict[str, float], **extra) -> dict:
    """Median and worst ``jaxlab / original`` ratio over levels (official and random apart)."""
    rec = {"what": what, "n": n, "levels": len(ratios), **extra}
    for group, prefix in (("all", ""), ("official", "l/"), ("random", "random/")):
        vals = {k: v for k, v in ratios.items() if k.startswith(prefix)}
        if vals:
            worst = min(vals, key=vals.get)
            rec[f"{group}_median_ratio"] = round(statistics.median(vals.values()), 3)
            rec[f"{group}_worst_ratio"] = round(vals[worst], 3)
            rec[f"{group}_worst_level"] = worst
    return rec
