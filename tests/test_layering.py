"""The house's arrows point down: ``core`` <- ``nn`` <- families <- ``recipes`` <- ``cli``.

Every ``import`` in the package (function-level ones included) is read from the source; an arrow
from ``core`` upward, from a family into ``recipes`` or the command line, between two recipes, or
sideways between families other than the ones listed below, or a family that builds recipe
``Parts``, fails with the file that holds it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jaxlab

ROOT = Path(jaxlab.__file__).parent

FOUNDATION = {"core", "nn", "media"}
FAMILIES = {"physics", "envs", "rl", "lm", "decoding", "diffusion", "graph", "causal", "workflows"}
TOP = {"recipes", "cli", "commands", "studio", "__init__"}

#: family -> the families it may import besides the foundation, and why
SIDEWAYS: dict[str, set[str]] = {
    "envs": {"physics"},  # the Kinetix env space is built on the physics engine
    "rl": {"envs"},  # agents are trained on the env contract
    "diffusion": {"envs"},  # the Diffusion Planner is trained on and drives the driving world
    "workflows": {"decoding"},  # the LM executor samples through the decoding layer
}


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "jaxlab" and node.level == 0:
            out += [f"jaxlab.{a.name}" for a in node.names]  # from jaxlab import media
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return [m for m in out if m == "jaxlab" or m.startswith("jaxlab.")]


def _area(module_path: Path) -> str:
    rel = module_path.relative_to(ROOT).parts
    return rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")


def _edges() -> list[tuple[str, str, str, str]]:
    """(area, imported area, file, imported module) for every import of another area."""
    edges = []
    for path in sorted(ROOT.rglob("*.py")):
        src = _area(path)
        for mod in _imports(path):
            parts = mod.split(".")
            dst = parts[1] if len(parts) > 1 else "__init__"
            if dst != src or src == "recipes":
                edges.append((src, dst, str(path.relative_to(ROOT)), mod))
    return edges


def test_the_package_has_the_areas_the_rule_names():
    areas = {_area(p) for p in ROOT.rglob("*.py")}
    assert FOUNDATION | FAMILIES | {"recipes", "cli"} <= areas
    assert len(_edges()) > 100  # the scan reads the imports


def test_arrows_only_point_down():
    bad = []
    for src, dst, where, mod in _edges():
        if src == "core" and dst != "core":
            bad.append(f"{where}: core imports {mod}")
        elif src in ("nn", "media") and dst not in ("core", "nn", "media"):
            bad.append(f"{where}: {src} imports {mod}")
        elif src in FAMILIES and mod.startswith("jaxlab.core.recipe"):
            bad.append(f"{where}: the {src} family builds recipe parts ({mod})")
        elif src in FAMILIES and dst in TOP:
            bad.append(f"{where}: the {src} family imports {mod}")
        elif src in FAMILIES and dst in FAMILIES and dst not in SIDEWAYS.get(src, set()):
            bad.append(f"{where}: the {src} family imports the {dst} family ({mod})")
        elif src == "recipes" and mod.startswith("jaxlab.recipes."):
            bad.append(f"{where}: a recipe imports another recipe ({mod})")
    assert not bad, "\n".join(bad)
