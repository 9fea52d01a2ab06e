"""Runnable methods: one module per recipe, registered on import.

``NAMES`` maps each recipe name to its module, so the registry can list recipes without importing
every family (importing a recipe pulls in its whole family).
"""

NAMES: dict[str, str] = {
    "lm-tiny": "lm_tiny",
    "olmoe": "olmoe",
    "precision": "precision",
    "gnn": "gnn",
    "diffusion": "diffusion",
    "ld3": "ld3",
    "preference": "preference",
    "kinetix-ppo": "kinetix_ppo",
    "distill": "distill",
    "task-arithmetic": "task_arithmetic",
    "sac": "sac",
    "dtsn": "dtsn",
    "dept": "dept",
    "dreamer": "dreamer",
    "ls-imagine": "dreamer",
    "metra": "skills",
    "csf": "skills",
    "planner": "planner",
    "loopy": "loopy",
    "cyberhost": "cyberhost",
}
MODULES: tuple[str, ...] = tuple(sorted(set(NAMES.values())))
