"""The L levels of the benchmarks' L rows, as Kinetix JSON files both implementations load.

* ``official``: every human-designed L level shipped in the ``kinetix-env`` wheel
  (``kinetix/levels/l/*.json`` in the peer venv, ``benchmarks/peers/.venv-kinetix``), the levels
  the Kinetix paper tests its general agent on zero-shot.
* ``random``: ``n`` levels drawn by jaxlab's generator (``jaxlab.envs.kinetix.generator``, keys
  ``0 .. n-1``) at L sizes, the distribution the general agent trains on, written with
  ``levels.save_level`` so the original loads the same levels.

Every level of a set has L's static sizes, so one compiled program serves the whole set.
:func:`ratio_lines` turns jaxlab's and the original's records on these levels into the per-level
ratio lines and the summary lines that ``bench_physics`` and ``bench_kinetix`` emit.
"""

from __future__ import annotations

import glob
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

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


def ratio_lines(
    ours: Mapping[tuple, Mapping[str, Any]],
    peer_rows: Iterable[Mapping[str, Any]],
    *,
    what: str,
    summary_what: str,
    peer: str,
    by: Sequence[str],
    unit: str,
    **fixed: Any,
) -> Iterator[dict]:
    """The L rows' comparison with the original, as the JSON lines to emit.

    Each of the original's records ``peer_rows`` is yielded, followed, when ``ours`` holds the
    same level at the same ``by`` values, by a ``what`` line: both rates and compile times and
    ``ratio = jaxlab rate / original rate``. Then one ``summary_what`` line
    (:func:`level_summary`) per group of ``by`` values, in the order the original first gave it.

    Args:
      ours: jaxlab's records keyed ``(scene, *values of by)``.
      peer: the original's name in the keys (``{peer}_rate``, ``{peer}_compile_s``).
      by: the record fields that tell measurements of one level apart, ending with ``"n"``.
      fixed: settings both sides ran with, written into every line after the ``by`` labels.
    """
    ratios: dict[tuple, dict[str, float]] = {}
    for rec in peer_rows:
        yield rec
        group = tuple(rec[f] for f in by)
        mine = ours.get((rec["scene"], *group))
        if mine is None:
            continue
        ratio = mine["rate"] / rec["rate"]
        ratios.setdefault(group, {})[rec["scene"]] = ratio
        labels = {f: rec[f] for f in by if f != "n"}
        yield {
            "what": what,
            "size": "L",
            "n": rec["n"],
            "scene": rec["scene"],
            **labels,
            **fixed,
            "jaxlab_rate": mine["rate"],
            f"{peer}_rate": rec["rate"],
            "ratio": round(ratio, 3),
            "jaxlab_compile_s": mine["compile_s"],
            f"{peer}_compile_s": rec["compile_s"],
            "unit": unit,
        }
    for group, by_level in ratios.items():
        values = dict(zip(by, group, strict=True))
        n = values.pop("n")
        yield level_summary(summary_what, n, by_level, **values, **fixed)
