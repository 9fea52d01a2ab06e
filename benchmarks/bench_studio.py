"""Studio play-mode frame time at S, M and L: one env step on the server plus the frame's JSON.

For each size a shipped level of that size is opened in a studio workspace and played with the
right arrow held: ``step+json`` is ``Studio.step`` (the jitted env step, the frame payload) plus
``json.dumps`` of it, ``websocket`` the round trip of one step message through the app's play
WebSocket (starlette's in-process test client). ``keeps_up`` compares the mean frame time with
the env's frame period ``dt * frame_skip`` (1/30 s by default).

    python -m benchmarks.bench_studio [--sizes s,m,l] [--frames 200]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.harness import emit_rate
from jaxlab.envs.kinetix.levels import load_level

LEVELS = Path(__file__).resolve().parents[1] / "jaxlab" / "envs" / "kinetix" / "levels"


def level_file(size: str) -> Path:
    return sorted((LEVELS / size).glob("*.json"))[0]


def measure(size: str, frames: int) -> None:
    from starlette.testclient import TestClient

    from jaxlab.studio.server import Studio, make_app

    path = level_file(size)
    level = load_level(path)
    studio = Studio(level, path.parent)
    _, ws = studio.new_workspace()
    msg = {"type": "step", "keys": ["ArrowRight"]}
    studio.reset(ws)
    t0 = time.perf_counter()
    json.dumps(studio.step(ws, msg))
    compile_s = time.perf_counter() - t0
    studio.reset(ws)
    t0 = time.perf_counter()
    for _ in range(frames):
        json.dumps(studio.step(ws, msg))
        if ws.done:
            studio.reset(ws)
    per = (time.perf_counter() - t0) / frames
    period = float(level.params.dt) * level.static_params.frame_skip
    size_row = {"level": f"{size}/{path.name}", "frames": frames}
    emit_rate("studio_frame", size_row, compile_s, per, 1 / per, "frames/s",
              part="step+json", frame_period_s=period, keeps_up=per < period)  # fmt: skip
    with TestClient(make_app(studio)) as client:
        wid = client.post("/api/workspace").json()["workspace"]
        with client.websocket_connect(f"/ws/{wid}") as sock:
            sock.send_json({"type": "reset"})
            sock.receive_json()
            t0 = time.perf_counter()
            for _ in range(frames):
                sock.send_json(msg)
                if sock.receive_json().get("done"):
                    sock.send_json({"type": "reset"})
                    sock.receive_json()
            per = (time.perf_counter() - t0) / frames
    emit_rate("studio_frame", size_row, compile_s, per, 1 / per, "frames/s",
              part="websocket", frame_period_s=period, keeps_up=per < period)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="s,m,l")
    parser.add_argument("--frames", type=int, default=200)
    args = parser.parse_args(argv)
    for size in args.sizes.split(","):
        if size not in ("s", "m", "l"):
            parser.error(f"--sizes: {size!r} is not one of s, m, l")
        measure(size, args.frames)
    return 0


if __name__ == "__main__":
    sys.exit(main())
