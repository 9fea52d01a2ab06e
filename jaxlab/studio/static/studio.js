// jaxlab studio page: draws the server's scene on a canvas, sends edits, plays over a WebSocket.
// window.studio is the page's API (used by the UI below and by scripted drivers).
"use strict";

const ROLE_COLOURS = [[160, 160, 160], [0, 204, 0], [0, 102, 204], [255, 102, 102]];
const BINDING_COLOURS = ["#ffff00", "#ff00ff", "#00ffff", "#ff9933"];
const $ = (id) => document.getElementById(id);
const canvas = $("canvas");
const ctx = canvas.getContext("2d");

const studio = {
  workspace: null, scene: null, lastFrame: null, frames: [], actions: [],
  mode: "edit", tool: "select", selected: null, keys: new Set(), busy: false,
  agentAvailable: false, pending: [], timer: null, ws: null,
};
window.studio = studio;

// ---------------------------------------------------------------- messages and requests
function say(text, isError) {
  const m = $("message");
  m.textContent = text || "";
  m.className = isError ? "error" : "";
}

async function api(kind, body) {
  const r = await fetch(`/api/workspace/${studio.workspace}/${kind}`, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body || {}),
  });
  let data;
  try { data = await r.json(); } catch (e) { data = { error: `HTTP ${r.status}` }; }
  if (data.scene) setScene(data.scene);
  if (!r.ok) { say(data.error, true); return { ok: false, error: data.error, conflict: !!data.conflict }; }
  say(kind === "save" ? `saved ${data.saved}` : "");
  return { ok: true, ...data };
}

studio.edit = (op) => api("edit", op);
studio.undo = () => api("undo");
studio.redo = () => api("redo");
studio.random = (size, seed) => api("random", { size, seed: seed || Math.floor(Math.random() * 1e6) });
studio.open = (name) => api("open", { name });
studio.openText = (text, source) => api("open", { text, source });
studio.save = async (name) => {
  let r = await api("save", { name });
  if (!r.ok && r.conflict && window.confirm(`${r.error}\n\nReplace ${name}?`)) {
    r = await api("save", { name, overwrite: true });
  }
  refreshFiles();
  return r;
};

function setScene(scene) {
  studio.scene = scene;
  studio.lastFrame = null;
  if (studio.selected !== null && !scene.shapes.some((s) => s.id === studio.selected)) {
    studio.selected = null;
  }
  $("grav-x").value = scene.gravity[0];
  $("grav-y").value = scene.gravity[1];
  canvas.width = scene.screen[0];
  canvas.height = scene.screen[1];
  showSelection();
  listJoints();
  draw();
}

async function refreshFiles() {
  const r = await fetch("/api/files");
  const data = await r.json();
  const sel = $("file-list");
  sel.innerHTML = "";
  for (const f of data.files) {
    const o = document.createElement("option");
    o.value = o.textContent = f;
    sel.appendChild(o);
  }
}

// ---------------------------------------------------------------- geometry
function pose(id) {
  const f = studio.lastFrame || studio.scene;
  return { p: f.positions[id], r: f.rotations[id] };
}
const rot = (a, v) => [Math.cos(a) * v[0] - Math.sin(a) * v[1], Math.sin(a) * v[0] + Math.cos(a) * v[1]];
const toPx = (w) => [w[0] * studio.scene.pixels_per_unit, canvas.height - w[1] * studio.scene.pixels_per_unit];
const toWorld = (px, py) => [px / studio.scene.pixels_per_unit, (canvas.height - py) / studio.scene.pixels_per_unit];

function worldVertices(s) {
  const { p, r } = pose(s.id);
  return s.vertices.map((v) => { const q = rot(r, v); return [p[0] + q[0], p[1] + q[1]]; });
}

function contains(s, w) {
  const { p, r } = pose(s.id);
  if (s.kind === "circle") return Math.hypot(w[0] - p[0], w[1] - p[1]) <= s.radius;
  const vs = worldVertices(s);
  for (let i = 0; i < vs.length; i++) {  // clockwise: the point is right of every edge
    const a = vs[i], b = vs[(i + 1) % vs.length];
    if ((b[0] - a[0]) * (w[1] - a[1]) - (b[1] - a[1]) * (w[0] - a[0]) > 0) return false;
  }
  return true;
}

function hits(w) {  // shapes under a world point, top-most first (circles drawn last)
  return studio.scene.shapes.filter((s) => !s.arena && contains(s, w)).reverse();
}

// ---------------------------------------------------------------- drawing
function colour(s) {
  if (s.fixed) {
    if (s.role === 0) return "rgb(80,80,80)";
    const c = ROLE_COLOURS[s.role].map((x) => x * 0.5);
    return `rgb(${c})`;
  }
  return `rgb(${ROLE_COLOURS[s.role]})`;
}

function draw() {
  const sc = studio.scene;
  if (!sc) return;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  const order = sc.shapes.filter((s) => s.kind === "polygon").concat(sc.shapes.filter((s) => s.kind === "circle"));
  for (const s of order) {
    if (s.arena && s.id !== 0) continue;  // walls and ceiling are not drawn (as the env renders)
    ctx.fillStyle = colour(s);
    ctx.strokeStyle = s.id === studio.selected ? "#f90" : "#333";
    ctx.lineWidth = s.id === studio.selected ? 3 : 1;
    ctx.beginPath();
    if (s.kind === "circle") {
      const { p, r } = pose(s.id);
      const c = toPx(p);
      ctx.arc(c[0], c[1], s.radius * sc.pixels_per_unit, 0, 2 * Math.PI);
      ctx.fill(); ctx.stroke();
      const tip = toPx([p[0] - Math.sin(r) * s.radius, p[1] + Math.cos(r) * s.radius]);
      ctx.beginPath(); ctx.moveTo(c[0], c[1]); ctx.lineTo(tip[0], tip[1]);
      ctx.strokeStyle = "#000"; ctx.lineWidth = 2; ctx.stroke();
    } else {
      worldVertices(s).map(toPx).forEach((q, i) => (i ? ctx.lineTo(q[0], q[1]) : ctx.moveTo(q[0], q[1])));
      ctx.closePath(); ctx.fill(); ctx.stroke();
    }
  }
  for (const j of sc.joints) {
    const { p, r } = pose(j.a);
    const q = rot(r, j.a_relative_pos);
    const c = toPx([p[0] + q[0], p[1] + q[1]]);
    ctx.beginPath(); ctx.arc(c[0], c[1], 4, 0, 2 * Math.PI);
    ctx.fillStyle = j.motor_on ? BINDING_COLOURS[j.motor_binding % 4] : "#fff";
    ctx.strokeStyle = "#000"; ctx.lineWidth = 1;
    ctx.fill(); ctx.stroke();
  }
  for (const t of sc.thrusters) {
    const { p, r } = pose(t.shape);
    const q = rot(r, t.relative_position);
    const c = toPx([p[0] + q[0], p[1] + q[1]]);
    const d = rot(r + t.rotation, [0.08, 0]);
    ctx.beginPath(); const k = sc.pixels_per_unit; ctx.moveTo(c[0] - d[0] * k, c[1] + d[1] * k); ctx.lineTo(c[0] + d[0] * k, c[1] - d[1] * k);
    ctx.strokeStyle = BINDING_COLOURS[t.binding % 4]; ctx.lineWidth = 6; ctx.stroke();
  }
  if (drag && drag.preview) drag.preview();
  hud();
}

function hud() {
  const f = studio.lastFrame;
  if (studio.mode !== "play" || !f) { $("hud").textContent = ""; return; }
  let text = `t=${f.t} reward=${(f.reward || 0).toFixed(3)} return=${f.return.toFixed(3)}`;
  if (f.value !== undefined) text += ` value=${f.value.toFixed(3)}`;
  if (f.solved) text += "  SOLVED";
  else if (f.terminated) text += "  terminated";
  else if (f.truncated) text += "  time up";
  $("hud").textContent = text;
}

// ---------------------------------------------------------------- play
function connect() {
  return new Promise((resolve) => {
    if (studio.ws && studio.ws.readyState === WebSocket.OPEN) return resolve(studio.ws);
    const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws/${studio.workspace}`);
    ws.onmessage = (ev) => {
      const msg = JSON.parse(ev.data);
      if (msg.type === "error") { say(msg.message, true); studio.pending.length = 0; studio.busy = false; return; }
      studio.lastFrame = msg;
      studio.frames.push({ t: msg.t, positions: msg.positions, rotations: msg.rotations });
      if (msg.action) studio.actions.push(msg.action);
      const waiter = studio.pending.shift();
      if (waiter) waiter(msg);
      draw();
    };
    ws.onopen = () => resolve(ws);
    ws.onclose = () => { studio.ws = null; };
    studio.ws = ws;
  });
}

function send(msg, replies) {  // resolves with the last of `replies` frames
  return connect().then((ws) => new Promise((resolve) => {
    for (let i = 0; i < replies - 1; i++) studio.pending.push(() => {});
    studio.pending.push(resolve);
    ws.send(JSON.stringify(msg));
  }));
}

studio.reset = async () => {
  studio.frames = []; studio.actions = [];
  return send({ type: "reset" }, 1);
};
studio.step = (keys, n) => send({
  type: "step", keys: keys || [...studio.keys], n: n || 1,
  agent: $("agent").checked, deterministic: $("agent-det").checked,
}, n || 1);

async function tick() {
  if (studio.mode !== "play" || studio.busy) return;
  if (studio.lastFrame && studio.lastFrame.done) return;
  studio.busy = true;
  try { await studio.step(); } finally { studio.busy = false; }
}

studio.play = async () => {
  studio.mode = "play";
  $("mode-label").textContent = "play";
  $("btn-play").textContent = "Edit";
  await studio.reset();
  const fps = 30;
  clearInterval(studio.timer);
  studio.timer = setInterval(tick, 1000 / fps);
  canvas.focus();
};
studio.stop = () => {
  studio.mode = "edit";
  clearInterval(studio.timer);
  $("mode-label").textContent = "edit";
  $("btn-play").textContent = "Play";
  studio.lastFrame = null;
  draw();
};

// ---------------------------------------------------------------- edit interactions
let drag = null;
let triangle = [];

function newShapeProps() {
  return { fixed: $("new-fixed").checked, role: +$("new-role").value };
}

canvas.addEventListener("mousedown", (ev) => {
  if (studio.mode !== "edit") return;
  const w = toWorld(ev.offsetX, ev.offsetY);
  const tool = studio.tool;
  if (tool === "select") {
    const h = hits(w);
    studio.selected = h.length ? h[0].id : null;
    showSelection();
    if (h.length) drag = { start: w, id: h[0].id, origin: pose(h[0].id).p };
  } else if (tool === "circle" || tool === "rect") {
    drag = { start: w, now: w, tool };
    drag.preview = () => {
      const a = toPx(drag.start), b = toPx(drag.now);
      ctx.strokeStyle = "#f90"; ctx.lineWidth = 1; ctx.beginPath();
      if (drag.tool === "circle") ctx.arc(a[0], a[1], Math.hypot(b[0] - a[0], b[1] - a[1]), 0, 2 * Math.PI);
      else ctx.rect(a[0], a[1], b[0] - a[0], b[1] - a[1]);
      ctx.stroke();
    };
  } else if (tool === "triangle") {
    triangle.push(w);
    if (triangle.length === 3) {
      const vs = triangle; triangle = [];
      studio.edit({ op: "add_polygon", vertices: vs, ...newShapeProps() });
    } else say(`triangle: ${triangle.length} of 3 points (clockwise)`);
  } else if (tool === "joint" || tool === "fixed") {
    const h = hits(w);
    if (h.length < 2) { say("place a joint where two shapes overlap", true); return; }
    studio.edit({ op: "add_joint", kind: tool === "fixed" ? "fixed" : "revolute", a: h[1].id, b: h[0].id,
                  position: w, motor_on: tool === "joint" && $("new-motor").checked });
  } else if (tool === "thruster") {
    const h = hits(w);
    if (!h.length) { say("place a thruster on a shape", true); return; }
    studio.edit({ op: "add_thruster", shape: h[0].id, position: w, rotation: 0, power: 1, binding: 0 });
  } else if (tool === "delete") {
    const h = hits(w);
    if (h.length) studio.edit({ op: "delete", shape: h[0].id });
  }
});

canvas.addEventListener("mousemove", (ev) => {
  if (!drag) return;
  drag.now = toWorld(ev.offsetX, ev.offsetY);
  draw();
});

canvas.addEventListener("mouseup", (ev) => {
  if (!drag) return;
  const d = drag; drag = null;
  const w = toWorld(ev.offsetX, ev.offsetY);
  if (d.id !== undefined) {
    const dx = w[0] - d.start[0], dy = w[1] - d.start[1];
    if (Math.hypot(dx, dy) > 1e-3) studio.edit({ op: "move", shape: d.id, position: [d.origin[0] + dx, d.origin[1] + dy] });
  } else if (d.tool === "circle") {
    const r = Math.hypot(w[0] - d.start[0], w[1] - d.start[1]);
    if (r > 0.01) studio.edit({ op: "add_circle", position: d.start, radius: r, ...newShapeProps() });
  } else if (d.tool === "rect") {
    const x0 = Math.min(d.start[0], w[0]), x1 = Math.max(d.start[0], w[0]);
    const y0 = Math.min(d.start[1], w[1]), y1 = Math.max(d.start[1], w[1]);
    if (x1 - x0 > 0.01 && y1 - y0 > 0.01) {
      studio.edit({ op: "add_polygon", vertices: [[x0, y1], [x1, y1], [x1, y0], [x0, y0]], ...newShapeProps() });
    }
  }
  draw();
});

function showSelection() {
  const s = studio.scene && studio.scene.shapes.find((x) => x.id === studio.selected);
  $("sel-none").hidden = !!s;
  $("sel-shape").hidden = !s;
  if (!s) return;
  $("sel-title").textContent = `${s.kind} ${s.id}`;
  $("p-fixed").checked = s.fixed;
  $("p-role").value = s.role;
  $("p-density").value = s.density;
  $("p-friction").value = s.friction;
  $("p-restitution").value = s.restitution;
  $("p-rotation").value = s.rotation;
  $("p-radius-box").hidden = s.kind !== "circle";
  $("p-scale-box").hidden = s.kind !== "polygon";
  if (s.kind === "circle") $("p-radius").value = s.radius;
  $("p-scale").value = 1;
}

$("btn-apply").onclick = async () => {
  const id = studio.selected;
  const s = studio.scene.shapes.find((x) => x.id === id);
  const r = await studio.edit({ op: "set", shape: id, fixed: $("p-fixed").checked, role: +$("p-role").value,
    density: +$("p-density").value, friction: +$("p-friction").value, restitution: +$("p-restitution").value });
  if (!r.ok) return;
  if (+$("p-rotation").value !== s.rotation) await studio.edit({ op: "rotate", shape: id, rotation: +$("p-rotation").value });
  if (s.kind === "circle" && +$("p-radius").value !== s.radius) await studio.edit({ op: "resize", shape: id, radius: +$("p-radius").value });
  if (s.kind === "polygon" && +$("p-scale").value !== 1) await studio.edit({ op: "resize", shape: id, scale: +$("p-scale").value });
};
$("btn-delete").onclick = () => studio.selected !== null && studio.edit({ op: "delete", shape: studio.selected });

function listJoints() {
  const jl = $("joint-list"); jl.innerHTML = "";
  for (const j of studio.scene.joints) {
    const d = document.createElement("div");
    d.innerHTML = `#${j.id} ${j.kind} ${j.a}-${j.b}` + (j.kind === "revolute" ?
      `<br><label><input type="checkbox" ${j.motor_on ? "checked" : ""}> motor</label>
       speed <input size="3" value="${j.motor_speed}"> power <input size="3" value="${j.motor_power}">
       binding <input size="1" value="${j.motor_binding}">` : "") + ` <button>apply</button> <button>remove</button>`;
    const [applyBtn, removeBtn] = d.querySelectorAll("button");
    applyBtn.onclick = () => {
      const ins = d.querySelectorAll("input");
      if (!ins.length) return;
      studio.edit({ op: "set_joint", joint: j.id, motor_on: ins[0].checked, motor_speed: +ins[1].value,
                    motor_power: +ins[2].value, motor_binding: +ins[3].value });
    };
    removeBtn.onclick = () => studio.edit({ op: "remove_joint", joint: j.id });
    jl.appendChild(d);
  }
  const tl = $("thruster-list"); tl.innerHTML = "";
  for (const t of studio.scene.thrusters) {
    const d = document.createElement("div");
    d.innerHTML = `#${t.id} on ${t.shape} power ${t.power} binding ${t.binding} <button>remove</button>`;
    d.querySelector("button").onclick = () => studio.edit({ op: "remove_thruster", thruster: t.id });
    tl.appendChild(d);
  }
}

// ---------------------------------------------------------------- buttons and keys
document.querySelectorAll("[data-tool]").forEach((b) => (b.onclick = () => {
  studio.tool = b.dataset.tool; triangle = [];
  document.querySelectorAll("[data-tool]").forEach((x) => x.classList.toggle("active", x === b));
}));
document.querySelectorAll("[data-random]").forEach((b) => (b.onclick = () => studio.random(b.dataset.random)));
$("btn-play").onclick = () => (studio.mode === "edit" ? studio.play() : studio.stop());
$("btn-reset").onclick = () => studio.mode === "play" && studio.reset();
$("btn-undo").onclick = () => studio.undo();
$("btn-redo").onclick = () => studio.redo();
$("btn-open").onclick = () => $("file-list").value && studio.open($("file-list").value);
$("btn-save").onclick = () => studio.save($("save-name").value);
$("btn-gravity").onclick = () => studio.edit({ op: "gravity", gravity: [+$("grav-x").value, +$("grav-y").value] });
$("btn-download").onclick = (ev) => { ev.currentTarget.href = `/api/workspace/${studio.workspace}/level.json`; };
$("btn-gif").onclick = (ev) => { ev.currentTarget.href = `/api/workspace/${studio.workspace}/episode.gif`; };
$("file-upload").onchange = async (ev) => {
  const f = ev.target.files[0];
  if (f) await studio.openText(await f.text(), f.name);
  ev.target.value = "";
};

const PLAY_KEYS = new Set(["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "1", "2", "3", "4"]);
document.addEventListener("keydown", (ev) => {
  if (ev.target.tagName === "INPUT" || ev.target.tagName === "SELECT") return;
  if (PLAY_KEYS.has(ev.key)) { studio.keys.add(ev.key); ev.preventDefault(); return; }
  if ((ev.ctrlKey || ev.metaKey) && ev.key === "z") { studio.undo(); ev.preventDefault(); }
  else if ((ev.ctrlKey || ev.metaKey) && ev.key === "y") { studio.redo(); ev.preventDefault(); }
  else if (ev.key === "p") $("btn-play").click();
  else if (ev.key === "r" && studio.mode === "play") studio.reset();
});
document.addEventListener("keyup", (ev) => studio.keys.delete(ev.key));
window.addEventListener("blur", () => studio.keys.clear());

// ---------------------------------------------------------------- start
(async () => {
  const r = await fetch("/api/workspace", { method: "POST" });
  const data = await r.json();
  studio.workspace = data.workspace;
  studio.agentAvailable = data.agent;
  $("agent-box").hidden = $("agent-det-box").hidden = !data.agent;
  setScene(data.scene);
  await refreshFiles();
  studio.ready = true;
})();
