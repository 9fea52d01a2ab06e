"""The studio's web app (Starlette): the page, a JSON API per workspace, and the play WebSocket.

Each browser tab opens a workspace (``POST /api/workspace``) holding its own level, undo and redo
stacks and play state; workspaces share nothing but the compiled steps. Routes (``SID`` a workspace):

- ``GET /`` the page; ``/static/...`` its assets (``StaticFiles`` refuses paths outside them);
- ``GET /api/files``: the ``*.json`` levels in the studio's directory;
- ``POST /api/workspace/SID/edit`` an edit (``editor.OPS``); ``undo``, ``redo``;
  ``random`` ``{"size": "s"|"m"|"l", "seed": k}``; ``open`` ``{"name": FILE}`` or
  ``{"text": JSON}``; ``save`` ``{"name": FILE}`` (into the directory, atomically and under the
  folder's run lock; replacing a file this tab did not open or last save answers 409 unless
  ``"overwrite": true``, so two studios on one folder never overwrite each other silently);
  ``GET /api/workspace/SID/level.json`` the level as a download;
- ``WS /ws/SID``: ``{"type": "step", "keys": [...], "agent": bool, "n": k}`` steps ``k``
  frames and answers each with a frame; ``{"type": "reset"}`` restarts the episode.

A refused request answers 400 with ``{"error": message, "scene": the unchanged level}``, so
the page keeps showing (and can undo to) what it had.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import secrets
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import jax
import numpy as np
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from jaxlab.core.run_lock import RunLock, RunLockedError
from jaxlab.envs.kinetix.generator import sample_levels
from jaxlab.envs.kinetix.levels import (
    MAX_LEVEL_BYTES,
    Level,
    level_from_json,
    level_from_text,
    level_to_json,
    load_level,
    save_level,
)
from jaxlab.envs.kinetix.state import EnvParams, EnvState, StaticEnvParams, create_empty_env
from jaxlab.studio import editor, player

STATIC_DIR = Path(__file__).parent / "static"
#: Workspaces kept at once (the oldest idle one is dropped beyond this).
MAX_WORKSPACES = 64
#: Undo depth per workspace.
MAX_UNDO = 200
#: Frames of the last episode kept for its GIF.
MAX_EPISODE_FRAMES = 2000
#: Frames one step message may ask for.
MAX_FRAMES_PER_MESSAGE = 1000


def empty_level(size: str = "s") -> Level:
    """The empty arena (floor, walls, ceiling) at preset ``size``."""
    sp = StaticEnvParams.from_size(size)
    return level_from_json(level_to_json(create_empty_env(sp), sp, EnvParams()), "empty")


@dataclasses.dataclass
class Workspace:
    """One tab's level, its undo/redo stacks and the episode being played."""

    level: Level
    undo: list[Level] = dataclasses.field(default_factory=list)
    redo: list[Level] = dataclasses.field(default_factory=list)
    play: EnvState | None = None
    play_static: StaticEnvParams | None = None
    episode_return: float = 0.0
    done: bool = False
    episode: list[EnvState] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    #: file name -> SHA-256 of the bytes this tab last opened or saved there
    known: dict[str, str] = dataclasses.field(default_factory=dict)

    def set_level(self, level: Level) -> None:
        """Replace the level (undoable) and restart play."""
        self.undo = (self.undo + [self.level])[-MAX_UNDO:]
        self.redo = []
        self.level = level
        self.play = None


class StudioError(ValueError):
    """A refused request (its message is shown on the page)."""


class SaveConflictError(StudioError):
    """A save would replace a level file whose content this tab does not know."""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextlib.contextmanager
def _directory_lock(directory: Path, wait_s: float = 5.0):
    """The level folder's run lock, waiting up to ``wait_s`` for another studio's save (a save
    holds it for milliseconds); past that the holder is named (``RunLockedError``)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            lock = RunLock(directory).acquire()
            break
        except RunLockedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    try:
        yield
    finally:
        lock.release()


class Studio:
    """The app's state: workspaces, the level directory, the optional agent."""

    def __init__(self, level: Level, directory: Path, agent=None):
        self.initial = level
        self.directory = directory.resolve()
        self.agent = agent
        self.workspaces: OrderedDict[str, Workspace] = OrderedDict()
        self._lock = threading.Lock()

    def new_workspace(self) -> tuple[str, Workspace]:
        sid, ws = secrets.token_hex(8), Workspace(self.initial)
        with self._lock:
            self.workspaces[sid] = ws
            while len(self.workspaces) > MAX_WORKSPACES:
                self.workspaces.popitem(last=False)
        return sid, ws

    def workspace(self, sid: str) -> Workspace:
        with self._lock:
            if sid not in self.workspaces:
                raise KeyError(sid)
            self.workspaces.move_to_end(sid)
            return self.workspaces[sid]

    def file(self, name: Any) -> Path:
        """``name`` in the studio's directory: a plain ``*.json`` file name, nothing else."""
        if (
            not isinstance(name, str)
            or not name.endswith(".json")
            or Path(name).name != name
            or name.startswith(".")
        ):
            raise StudioError(
                f"file name {name!r}: expected a plain NAME.json in {self.directory} "
                "(no folders, no path outside it)"
            )
        path = (self.directory / name).resolve()
        if path.parent != self.directory:
            raise StudioError(f"file name {name!r}: outside {self.directory}")
        return path

    def files(self) -> list[str]:
        return sorted(p.name for p in self.directory.glob("*.json") if p.is_file())

    # ------------------------------------------------------------------ level requests
    def request(self, s: Workspace, kind: str, body: dict) -> dict:
        """Apply one level request to workspace ``s``; returns the reply (the new scene)."""
        if kind == "edit":
            s.set_level(editor.apply_edit(s.level, body))
        elif kind == "undo":
            if not s.undo:
                raise StudioError("nothing to undo")
            s.redo.append(s.level)
            s.level, s.play = s.undo.pop(), None
        elif kind == "redo":
            if not s.redo:
                raise StudioError("nothing to redo")
            s.undo.append(s.level)
            s.level, s.play = s.redo.pop(), None
        elif kind == "random":
            s.set_level(random_level(body.get("size", "s"), body.get("seed", 0)))
        elif kind == "open":
            if "text" in body:
                text = body["text"]
                if not isinstance(text, str):
                    raise StudioError("open: text must be the level file's JSON text")
                s.set_level(level_from_text(text, str(body.get("source", "opened file"))))
            else:
                path = self.file(body.get("name"))
                s.set_level(load_level(path))
                s.known[path.name] = _digest(path)
        elif kind == "save":
            path = self.save(s, body.get("name"), overwrite=body.get("overwrite") is True)
            return {"scene": player.scene(s.level), "saved": path.name}
        else:
            raise StudioError(f"unknown request {kind!r}")
        return {"scene": player.scene(s.level)}

    def save(self, s: Workspace, name: Any, *, overwrite: bool) -> Path:
        """Writes ``s``'s level to ``name`` under the directory's run lock
        (:class:`jaxlab.core.run_lock.RunLock`, shared with other studios and commands on the
        folder) and atomically. An existing file is replaced only if it holds what this tab last
        opened or saved there, or with ``overwrite``: another studio's or tab's level is never
        overwritten silently.

        Raises:
          SaveConflictError: the file exists and this tab does not know its current content.
        """
        path = self.file(name)
        with _directory_lock(self.directory):
            current = _digest(path) if path.exists() else None
            if current is not None and current != s.known.get(path.name) and not overwrite:
                changed = path.name in s.known
                raise SaveConflictError(
                    f"{path.name}: "
                    + (
                        "changed on disk since this tab opened or saved it (another studio or "
                        "tab saved it)"
                        if changed
                        else "exists and holds a level this tab did not open"
                    )
                    + "; save under another name, or confirm to replace it"
                )
            save_level(path, s.level.state, s.level.static_params, s.level.params, overwrite=True)
            s.known[path.name] = _digest(path)
        return path

    # ------------------------------------------------------------------ play
    def reset(self, s: Workspace) -> dict:
        s.play, s.play_static = s.level.state, s.level.static_params
        s.episode_return, s.done = 0.0, False
        s.episode = [jax.device_get(s.play)]
        return self._frame(s)

    def _frame(self, s: Workspace, out=None, action=None, value=None) -> dict:
        sp = s.level.static_params
        msg = player.frame(s.play, out, action, sizes=(sp.num_polygons, sp.num_circles))
        msg.update({"return": s.episode_return, "done": s.done})
        if value is not None:
            msg["value"] = float(value)
        return msg

    def step(self, s: Workspace, msg: dict) -> dict:
        """One frame of play: the held keys (or the agent) drive the level's env step."""
        if s.play is None:
            self.reset(s)
        if s.done:
            return self._frame(s)
        params = player.traced_params(s.level.params)
        value = None
        if msg.get("agent"):
            if self.agent is None:
                raise StudioError("no agent: start the studio with --run-dir RUN (kinetix-ppo)")
            if s.play_static != self.agent.static:
                fitted = self.agent.fit(Level(s.play, s.play_static, s.level.params))
                s.play, s.play_static = fitted.state, fitted.static_params
            key = jax.random.PRNGKey(int(s.play.timestep))
            det = bool(msg.get("deterministic", True))
            s.play, out, action, value = self.agent.step(key, s.play, params, deterministic=det)
        else:
            action = player.keys_to_action(msg.get("keys"), s.play_static)
            s.play, *out = player.frame_step(s.play_static)(s.play, action, params)
        reward, terminated, truncated, _ = jax.device_get(tuple(out))
        if len(s.episode) <= MAX_EPISODE_FRAMES:
            s.episode.append(jax.device_get(s.play))
        s.episode_return += float(reward)
        s.done = bool(terminated) or bool(truncated)
        return self._frame(s, tuple(out), np.asarray(action), value)


def episode_gif(s: Workspace, path: Path) -> Path:
    """The workspace's last episode (as played, at the play size) as a GIF via ``jaxlab.media``."""
    from jaxlab.envs.kinetix.render import make_render_pixels, to_image
    from jaxlab.media import save_gif

    if len(s.episode) < 2:
        raise StudioError("no episode to export: play a few frames first")
    shape = lambda x: x.sim.polygon.active.shape  # agent mode may pad the state mid-episode
    frames = [x for x in s.episode if shape(x) == shape(s.play)]
    render = jax.jit(make_render_pixels(s.play_static, downscale=2))
    params = player.traced_params(s.level.params)
    images = [to_image(render(x, params)) for x in frames]
    period = float(s.level.params.dt) * s.play_static.frame_skip
    return save_gif(path, images, fps=1.0 / period)


def random_level(size: Any, seed: Any) -> Level:
    """A level from jaxlab's generator at preset ``size``, checked by the reader."""
    if size not in ("s", "m", "l"):
        raise StudioError(f"random: size={size!r}; expected s, m or l")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise StudioError(f"random: seed={seed!r}; expected an integer")
    sp = StaticEnvParams.from_size(size)
    state = jax.tree.map(lambda x: x[0], sample_levels(jax.random.PRNGKey(seed), 1, sp))
    return level_from_json(level_to_json(state, sp, EnvParams()), f"random {size} level")


def _error(message: str, status: int = 400, scene: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "scene": scene}, status_code=status)


UNKNOWN_WORKSPACE = "unknown workspace; reload the page"


def _workspace(conn: Request | WebSocket) -> Any:
    """The workspace named by the path's ``sid``, or None (the page then reloads)."""
    try:
        return conn.app.state.studio.workspace(conn.path_params["sid"])
    except KeyError:
        return None


async def _index(request: Request) -> Response:
    return FileResponse(STATIC_DIR / "index.html")


async def _new_workspace(request: Request) -> Response:
    studio: Studio = request.app.state.studio
    sid, s = studio.new_workspace()
    return JSONResponse(
        {
            "workspace": sid,
            "scene": player.scene(s.level),
            "agent": studio.agent is not None,
            "files": studio.files(),
        }
    )


async def _files(request: Request) -> Response:
    studio: Studio = request.app.state.studio
    return JSONResponse({"files": studio.files(), "directory": str(studio.directory)})


async def _level_request(request: Request) -> Response:
    studio: Studio = request.app.state.studio
    s = _workspace(request)
    if s is None:
        return _error(UNKNOWN_WORKSPACE, 404)
    kind = request.path_params["kind"]
    raw = await request.body()
    if len(raw) > MAX_LEVEL_BYTES:
        return _error(
            f"request of {len(raw)} bytes; at most {MAX_LEVEL_BYTES}",
            413,
            player.scene(s.level),
        )
    try:
        body = json.loads(raw) if raw.strip() else {}
        if not isinstance(body, dict):
            raise StudioError("expected a JSON object")
    except ValueError as e:
        return _error(f"{kind}: not a JSON request ({e})", 400, player.scene(s.level))

    def run():
        with s.lock:
            try:
                return studio.request(s, kind, body), 200
            except (ValueError, OSError) as e:  # the level reader, the editor, a file
                reply = {"error": str(e), "scene": player.scene(s.level)}
                if isinstance(e, SaveConflictError):
                    reply["conflict"] = True  # the page asks before saving with overwrite
                return reply, 409 if isinstance(e, SaveConflictError) else 400

    reply, status = await run_in_threadpool(run)
    return JSONResponse(reply, status_code=status)


async def _level_json(request: Request) -> Response:
    s = _workspace(request)
    if s is None:
        return _error(UNKNOWN_WORKSPACE, 404)
    lv = s.level
    data = level_to_json(lv.state, lv.static_params, lv.params)
    return JSONResponse(data, headers={"Content-Disposition": 'attachment; filename="level.json"'})


async def _gif(request: Request) -> Response:
    import tempfile

    s = _workspace(request)
    if s is None:
        return _error(UNKNOWN_WORKSPACE, 404)

    def run():
        with s.lock, tempfile.TemporaryDirectory() as tmp:
            return episode_gif(s, Path(tmp) / "episode.gif").read_bytes()

    try:
        data = await run_in_threadpool(run)
    except StudioError as e:
        return _error(str(e), 400)
    return Response(
        data,
        media_type="image/gif",
        headers={"Content-Disposition": 'attachment; filename="episode.gif"'},
    )


async def _play(ws: WebSocket) -> None:
    studio: Studio = ws.app.state.studio
    await ws.accept()
    s = _workspace(ws)
    if s is None:
        await ws.send_json({"type": "error", "message": UNKNOWN_WORKSPACE})
        await ws.close()
        return

    def handle(msg: dict) -> list[dict]:
        with s.lock:
            if msg.get("type") == "reset":
                return [studio.reset(s)]
            if msg.get("type") != "step":
                raise StudioError(f"unknown message type {msg.get('type')!r}")
            n = msg.get("n", 1)
            if (
                isinstance(n, bool)
                or not isinstance(n, int)
                or not 1 <= n <= MAX_FRAMES_PER_MESSAGE
            ):
                raise StudioError(f"n={n!r}; expected 1..{MAX_FRAMES_PER_MESSAGE}")
            return [studio.step(s, msg) for _ in range(n)]

    try:
        while True:
            text = await ws.receive_text()
            try:
                msg = json.loads(text)
                replies = await run_in_threadpool(handle, msg if isinstance(msg, dict) else {})
            except (ValueError, OSError) as e:
                replies = [{"type": "error", "message": str(e)}]
            for r in replies:
                await ws.send_json(r)
    except WebSocketDisconnect:
        return


def make_app(studio: Studio) -> Starlette:
    """The Starlette app serving ``studio`` (held in ``app.state.studio`` for the handlers)."""
    routes = [
        Route("/", _index),
        Route("/api/workspace", _new_workspace, methods=["POST"]),
        Route("/api/files", _files),
        Route("/api/workspace/{sid}/level.json", _level_json),
        Route("/api/workspace/{sid}/episode.gif", _gif),
        Route("/api/workspace/{sid}/{kind}", _level_request, methods=["POST"]),
        WebSocketRoute("/ws/{sid}", _play),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.studio = studio
    return app
