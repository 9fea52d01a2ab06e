"""``jaxlab studio [LEVEL.json] [--run-dir RUN] [--port P] [--host H] [--dir DIR]``.

Starts the studio's web server (uvicorn) and prints its address. The level (default: the empty
arena at ``--size``) is every new tab's starting level; open and save work on ``*.json`` files of
``--dir`` (default: the level's folder, else the current one). With ``--run-dir`` the trained
``kinetix-ppo`` policy of that run can play; a run without one is refused before the server
starts. Binds 127.0.0.1 unless ``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jaxlab studio",
        description="A Kinetix level editor and player in the browser, on jaxlab's engine.",
    )
    p.add_argument("level", nargs="?", default=None, help="a Kinetix level JSON file to open")
    p.add_argument("--run-dir", default=None, help="a kinetix-ppo run whose policy can play")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default localhost)")
    p.add_argument("--dir", default=None, help="folder of level files to open and save")
    p.add_argument("--size", default="s", choices=("s", "m", "l"), help="empty level's size")
    return p


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    try:
        import uvicorn
    except ImportError:
        from jaxlab.core.errors import UserError

        raise UserError(
            "the studio needs starlette and uvicorn", "pip install 'jaxlab[studio]'"
        ) from None
    from jaxlab.envs.kinetix.levels import load_level
    from jaxlab.studio.server import Studio, empty_level, make_app

    level = load_level(args.level) if args.level else empty_level(args.size)
    directory = Path(args.dir) if args.dir else (Path(args.level).parent if args.level else Path())
    if not directory.is_dir():
        raise FileNotFoundError(f"--dir {directory}: no such folder")
    agent = None
    if args.run_dir:
        from jaxlab.studio.agent import AgentPolicy

        agent = AgentPolicy(args.run_dir)
    app = make_app(Studio(level, directory, agent))
    print(f"jaxlab studio: http://{args.host}:{args.port}/ (Ctrl-C to stop)", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
