"""The studio's API without a browser (starlette's TestClient): edits and their validation by the
level reader, undo/redo, open/save, workspaces, path refusals, and play frames against a rollout of
the saved level in the env."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from jaxlab.envs.kinetix import load_level  # noqa: E402
from jaxlab.envs.kinetix.levels import level_to_json  # noqa: E402
from jaxlab.studio.server import Studio, empty_level, make_app  # noqa: E402
from tests.studio.conftest import WHEEL, WHEEL_EDITS, rollout_poses  # noqa: E402


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    directory = tmp_path_factory.mktemp("levels")
    st = Studio(empty_level("s"), directory)
    with TestClient(make_app(st)) as client:
        yield client, st, directory


def new_workspace(client) -> str:
    r = client.post("/api/workspace")
    assert r.status_code == 200
    return r.json()["workspace"]


def edit(client, sid, op):
    return client.post(f"/api/workspace/{sid}/edit", json=op)


def build_wheel(client) -> str:
    sid = new_workspace(client)
    for op in WHEEL_EDITS:
        r = edit(client, sid, op)
        assert r.status_code == 200, r.json()
    return sid


def test_edit_operations_undo_redo(studio):
    client, st, _ = studio
    sid = build_wheel(client)
    scene = client.post(f"/api/workspace/{sid}/undo").json()["scene"]
    assert scene["joints"] == []
    scene = client.post(f"/api/workspace/{sid}/redo").json()["scene"]
    assert [(j["a"], j["b"], j["motor_on"]) for j in scene["joints"]] == [(4, 5, True)]
    ops = [
        {"op": "set", "shape": 5, "density": 2.0, "friction": 0.5, "restitution": 0.2, "role": 2},
        {"op": "rotate", "shape": 4, "rotation": 0.3},
        {"op": "resize", "shape": 5, "radius": 0.2},
        {"op": "resize", "shape": 4, "scale": 1.5},
        {"op": "move", "shape": 5, "position": [2.0, 2.0]},
        {"op": "set_joint", "joint": 0, "motor_speed": 2.0, "motor_power": 3.0, "motor_binding": 1},
        {"op": "add_thruster", "shape": 5, "position": [2.0, 2.1], "rotation": 1.0, "power": 2.0},
        {"op": "gravity", "gravity": [0.0, -5.0]},
        {"op": "set", "shape": 4, "fixed": False},
    ]
    for op in ops:
        r = edit(client, sid, op)
        assert r.status_code == 200, (op, r.json())
    scene = r.json()["scene"]
    wheel = next(s for s in scene["shapes"] if s["id"] == 5)
    assert (wheel["role"], wheel["radius"], wheel["density"]) == (2, pytest.approx(0.2), 2.0)
    assert wheel["position"] == pytest.approx([2.0, 2.0])
    assert scene["joints"][0]["motor_binding"] == 1 and len(scene["thrusters"]) == 1
    assert scene["gravity"] == [0.0, -5.0]
    assert not next(s for s in scene["shapes"] if s["id"] == 4)["fixed"]
    # deleting the platform takes its joint with it; undo brings both back
    scene = edit(client, sid, {"op": "delete", "shape": 4}).json()["scene"]
    assert 4 not in [s["id"] for s in scene["shapes"]] and scene["joints"] == []
    scene = client.post(f"/api/workspace/{sid}/undo").json()["scene"]
    assert 4 in [s["id"] for s in scene["shapes"]] and len(scene["joints"]) == 1
    scene = edit(client, sid, {"op": "remove_joint", "joint": 0}).json()["scene"]
    scene = edit(client, sid, {"op": "remove_thruster", "thruster": 0}).json()["scene"]
    assert scene["joints"] == [] and scene["thrusters"] == []


@pytest.mark.parametrize(
    "op, message",
    [
        (
            {"op": "add_polygon", "vertices": [[1, 1], [2, 1], [2, 1.5], [1, 1.5]]},
            "counter-clockwise",
        ),
        (
            {"op": "add_polygon", "vertices": [[1, 2], [2, 2], [1.4, 1.6], [1, 1]]},
            "strictly convex",
        ),
        ({"op": "add_joint", "a": 5, "b": 5, "position": [1.5, 1.25]}, "a_index = b_index"),
        ({"op": "set", "shape": 5, "density": -1.0}, "density: value -1.0; expected >= 0"),
        ({"op": "add_circle", "position": [1, 1], "radius": 1e7}, "expected |value| <= 1e+06"),
        ({"op": "move", "shape": 99, "position": [1, 1]}, "not an active shape"),
        ({"op": "explode"}, "unknown edit"),
    ],
    ids=["clockwise", "non-convex", "self-joint", "negative-density", "huge", "no-shape", "op"],
)
def test_invalid_edit_refused_level_kept(studio, op, message):
    client, st, _ = studio
    sid = new_workspace(client)  # free slots for every kind of entity, one circle (shape 5)
    assert edit(client, sid, WHEEL_EDITS[1]).status_code == 200
    before = level_to_json(*st.workspace(sid).level)
    r = edit(client, sid, op)
    assert r.status_code == 400
    assert message in r.json()["error"]
    assert level_to_json(*st.workspace(sid).level) == before
    assert [s["id"] for s in r.json()["scene"]["shapes"]] == [0, 1, 2, 3, 5]


def test_save_open_lossless_and_bad_files(studio):
    client, st, directory = studio
    sid = build_wheel(client)
    r = client.post(f"/api/workspace/{sid}/save", json={"name": "wheel.json"})
    assert r.status_code == 200 and r.json()["saved"] == "wheel.json"
    text = (directory / "wheel.json").read_text()
    assert json.loads(text) == level_to_json(*load_level(directory / "wheel.json"))
    assert client.get(f"/api/workspace/{sid}/level.json").json() == json.loads(text)
    assert client.get("/api/files").json()["files"] == ["wheel.json"]
    other = new_workspace(client)
    assert (
        client.post(f"/api/workspace/{other}/open", json={"name": "wheel.json"}).status_code == 200
    )
    r = client.post(f"/api/workspace/{other}/open", json={"text": text, "source": "upload"})
    assert r.status_code == 200
    (directory / "wheel_copy.json").write_text("")
    r = client.post(f"/api/workspace/{other}/save", json={"name": "wheel_copy.json"})
    assert r.status_code == 409 and r.json()["conflict"]  # a file this tab did not open
    assert (directory / "wheel_copy.json").read_text() == ""
    body = {"name": "wheel_copy.json", "overwrite": True}
    assert client.post(f"/api/workspace/{other}/save", json=body).status_code == 200
    assert (directory / "wheel_copy.json").read_text() == text  # read -> write is byte-exact
    before = level_to_json(*st.workspace(other).level)
    bad = [
        ({"text": text[: len(text) // 2]}, "not valid JSON"),
        ({"text": "[" * 100 + "]" * 100}, "nested 100 levels deep"),
        ({"text": json.dumps({"env_state": {}})}, "missing key(s)"),
        ({"name": "../wheel.json"}, "no folders, no path outside"),
        ({"name": "/etc/passwd"}, "expected a plain NAME.json"),
        ({"name": "missing.json"}, "no such level file"),
    ]
    for body, message in bad:
        r = client.post(f"/api/workspace/{other}/open", json=body)
        assert r.status_code == 400 and message in r.json()["error"], (body, r.json())
    assert level_to_json(*st.workspace(other).level) == before
    r = client.post(f"/api/workspace/{other}/open", content=b" " * (64 * 2**20 + 1))
    assert r.status_code == 413
    assert client.post(f"/api/workspace/{other}/save", json={"name": "a/b.json"}).status_code == 400
    for path in ("/static/../server.py", "/static/%2e%2e/server.py", "/static/../../cli.py"):
        assert client.get(path).status_code == 404
    assert client.get("/static/studio.js").status_code == 200
    assert "<canvas" in client.get("/").text


def test_two_studios_on_one_folder_never_overwrite_each_other_silently(studio):
    client_a, _, directory = studio
    with TestClient(make_app(Studio(empty_level("s"), directory))) as client_b:
        a = build_wheel(client_a)
        b = new_workspace(client_b)
        save = {"name": "shared.json"}
        assert client_a.post(f"/api/workspace/{a}/save", json=save).status_code == 200
        assert client_b.post(f"/api/workspace/{b}/open", json=save).status_code == 200
        assert (
            edit(client_a, a, {"op": "move", "shape": WHEEL, "position": [2, 2]}).status_code == 200
        )
        assert client_a.post(f"/api/workspace/{a}/save", json=save).status_code == 200  # its own
        saved_by_a = (directory / "shared.json").read_bytes()
        r = client_b.post(f"/api/workspace/{b}/save", json=save)  # b's copy is out of date
        assert r.status_code == 409
        assert "shared.json: changed on disk since this tab opened or saved it" in r.json()["error"]
        assert (directory / "shared.json").read_bytes() == saved_by_a
        assert sorted(p.name for p in directory.iterdir() if p.name.startswith(".")) == []
        r = client_b.post(f"/api/workspace/{b}/save", json={**save, "overwrite": True})
        assert r.status_code == 200 and (directory / "shared.json").read_bytes() != saved_by_a


def test_workspaces_are_isolated(studio):
    client, st, _ = studio
    a, b = new_workspace(client), new_workspace(client)
    edit(client, a, {"op": "add_circle", "position": [2.0, 2.0], "radius": 0.2})
    assert len(st.workspace(a).level.state.sim.circle.active.nonzero()[0]) == 1
    assert not np.any(np.asarray(st.workspace(b).level.state.sim.circle.active))
    assert client.post(f"/api/workspace/{b}/undo").status_code == 400  # b has no history
    assert "no episode" in client.get(f"/api/workspace/{b}/episode.gif").json()["error"]
    assert client.post("/api/workspace/nope/undo").status_code == 404


def test_play_wheel_turns_and_matches_env_rollout(studio):
    client, st, directory = studio
    sid = build_wheel(client)
    client.post(f"/api/workspace/{sid}/save", json={"name": "play.json"})
    n = 12
    with client.websocket_connect(f"/ws/{sid}") as ws:
        ws.send_json({"type": "reset"})
        first = ws.receive_json()
        ws.send_json({"type": "step", "keys": ["ArrowRight"], "n": n})
        frames = [ws.receive_json() for _ in range(n)]
        ws.send_json({"type": "step", "agent": True})
        assert "no agent" in ws.receive_json()["message"]
        ws.send_text("not json")
        assert ws.receive_json()["type"] == "error"
    assert first["t"] == 0 and frames[-1]["t"] == n
    assert abs(frames[-1]["rotations"][WHEEL]) > 0.5
    assert frames[0]["action"][0] == 1.0
    level = load_level(directory / "play.json")
    pos, rot = rollout_poses(level, [f["action"] for f in frames])
    np.testing.assert_allclose(frames[-1]["positions"], pos, atol=1e-5)
    np.testing.assert_allclose(frames[-1]["rotations"], rot, atol=1e-5)


def test_command_refuses_bad_level_and_run_dir_without_policy(tmp_path, capsys):
    from jaxlab import cli
    from jaxlab.core.errors import UserError
    from jaxlab.studio.agent import AgentPolicy
    from jaxlab.studio.cli import build_parser

    assert build_parser().parse_args([]).host == "127.0.0.1"  # localhost unless asked
    with pytest.raises(UserError, match="no kinetix-ppo policy there"):
        AgentPolicy(tmp_path)
    assert cli.main(["studio", "--run-dir", str(tmp_path), "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"error: --run-dir {tmp_path}: no kinetix-ppo policy there" in err
    assert "missing config.yaml" in err and "hint: train one first" in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"env_state": ')
    assert cli.main(["studio", str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# The page in a real browser (headless Chromium through chromedriver). In this module so that it
# shares the compiled play step and the env rollout with the tests above (one xdist worker).

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1100,800",
)


@pytest.fixture(scope="module")
def browser_studio(tmp_path_factory):
    """The studio served by uvicorn on a free localhost port, and a headless Chromium."""
    import os
    import socket
    import threading
    import time

    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(
            f"{CHROMIUM} or {CHROMEDRIVER} is not installed (apt-get install chromium "
            "chromium-driver; .ci/run does this)"
        )
    uvicorn = pytest.importorskip("uvicorn")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    directory = tmp_path_factory.mktemp("browser_levels")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = make_app(Studio(empty_level("s"), directory))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield driver, f"http://127.0.0.1:{port}/", directory
    finally:
        driver.quit()
        server.should_exit = True
        thread.join(timeout=10)


def _wait(driver, script: str, timeout: float = 120.0):
    """Polls the page until the JavaScript expression ``script`` is truthy; returns its value."""
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        value = driver.execute_script(f"return {script};")
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {script}")


def test_browser_draw_play_save_matches_rollout(browser_studio, tmp_path):
    import os
    from pathlib import Path

    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver, url, directory = browser_studio
    shots = Path(os.environ.get("JAXLAB_STUDIO_SHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    driver.get(url)
    _wait(driver, "window.studio && window.studio.ready")
    canvas = driver.find_element(By.ID, "canvas")
    size = canvas.size

    def at(x: float, y: float) -> tuple[int, int]:
        """Offset from the canvas centre of the world point (x, y) (100 px per metre, y up)."""
        return int(x * 100 - size["width"] / 2), int(size["height"] / 2 - y * 100)

    def drag(tool: str, start, end) -> None:
        driver.find_element(By.CSS_SELECTOR, f"[data-tool='{tool}']").click()
        n = driver.execute_script("return window.studio.scene.shapes.length;")
        chain = ActionChains(driver).move_to_element_with_offset(canvas, *at(*start))
        chain.click_and_hold().move_to_element_with_offset(canvas, *at(*end)).release().perform()
        _wait(driver, f"window.studio.scene.shapes.length === {n + 1}", 30)

    # A fixed platform, a free green wheel, and a motor joint where they overlap: all by mouse.
    driver.find_element(By.ID, "new-fixed").click()
    drag("rect", (1.0, 1.5), (2.0, 1.0))
    driver.find_element(By.ID, "new-fixed").click()
    driver.find_element(By.CSS_SELECTOR, "#new-role option[value='1']").click()
    drag("circle", (1.5, 1.25), (1.8, 1.25))
    driver.find_element(By.CSS_SELECTOR, "[data-tool='joint']").click()
    ActionChains(driver).move_to_element_with_offset(canvas, *at(1.5, 1.25)).click().perform()
    _wait(driver, "window.studio.scene.joints.length === 1", 30)
    joint = driver.execute_script("return window.studio.scene.joints[0];")
    assert (joint["a"], joint["b"], joint["motor_on"]) == (4, WHEEL, True)
    driver.save_screenshot(str(shots / "studio_edit.png"))

    # Play: hold the right arrow for 20 frames, then read what the page showed.
    driver.find_element(By.ID, "btn-play").click()
    _wait(driver, "window.studio.frames.length > 0")
    ActionChains(driver).key_down(Keys.ARROW_RIGHT).perform()
    _wait(driver, "window.studio.actions.filter(a => a[0] === 1).length >= 20")
    ActionChains(driver).key_up(Keys.ARROW_RIGHT).perform()
    driver.save_screenshot(str(shots / "studio_play.png"))
    shown = driver.execute_script(
        "const s = window.studio; return {frame: s.lastFrame, actions: s.actions.slice(),"
        " first: s.frames[0]};"
    )
    frame, actions = shown["frame"], shown["actions"]
    assert frame["t"] == len(actions) >= 20
    turned = frame["rotations"][WHEEL] - shown["first"]["rotations"][WHEEL]
    assert abs(turned) > 0.5, f"the wheel turned {turned} rad"

    # Save through the page; the file loads in the env and replays to the page's positions.
    driver.find_element(By.ID, "btn-play").click()  # back to edit
    name = driver.find_element(By.ID, "save-name")
    name.clear()
    name.send_keys("browser.json")
    driver.find_element(By.ID, "btn-save").click()
    _wait(driver, "document.getElementById('message').textContent === 'saved browser.json'", 30)
    # Refused input is shown on the page and the level on screen stays as it was.
    scene = driver.execute_script("return window.studio.scene;")
    for call, message in (
        ("edit({op: 'set', shape: 5, density: -1})", "density: value -1.0; expected >= 0"),
        ("openText('{\"env_state\": ', 'bad.json')", "bad.json: not valid JSON"),
        ("open('../browser.json')", "no folders, no path outside"),
    ):
        reply = driver.execute_script(f"return window.studio.{call};")
        assert not reply["ok"] and message in reply["error"], reply
        shown = driver.find_element(By.ID, "message")
        assert message in shown.text and shown.get_attribute("class") == "error"
        assert driver.execute_script("return window.studio.scene;") == scene
    level = load_level(directory / "browser.json")
    pos, rot = rollout_poses(level, actions)
    np.testing.assert_allclose(frame["positions"], pos, atol=1e-5)
    np.testing.assert_allclose(frame["rotations"], rot, atol=1e-5)
