#!/usr/bin/env bash
# The headline measurements at accelerator sizes, in under 8 minutes on one GPU, as JSON lines.
#
#   bash benchmarks/accelerator.sh [--out DIR] [--smoke] [--no-peer] [--only STEP,STEP]
#
# Steps (each a `python -m benchmarks.<module>` from the checkout, with its own time limit; the
# limits add up to 460 s, so a slow step is cut off rather than the whole run overrunning):
#   physics   engine steps/s, S/M/L levels, 4k/16k/64k parallel scenes     (bench_physics)
#   env       Kinetix env steps/s (flat obs), S/M/L, 4k/16k/64k envs        (bench_kinetix)
#   ppo       PPO env-steps/s, MLP and transformer, M level, 2048 envs      (bench_ppo --train)
#   moe       OLMoE layer vs the dense SwiGLU of equal active parameters   (bench_moe)
#   sampler   diffusion sampler throughput (samples/s per NFE)             (bench_diffusion)
#   lm        lm-tiny train step, tiny and default presets, K = 1 and 10    (bench_core)
# Side by side: bench_physics / bench_kinetix also run the original Jax2D / Kinetix
# (benchmarks/peers/.venv-kinetix, or JAXLAB_PEER_PYTHON) when that venv exists and its JAX sees
# the same kind of device; otherwise the reason is written to DIR/summary.jsonl.
# --smoke: tiny sizes on the CPU (a check that every step runs: compile-bound, a few minutes on 2
# free cores; the limits are generous because a loaded machine compiles several times slower).
# --only: run just these steps (names as above).
# Output: DIR/<step>.jsonl (the benchmark's lines), DIR/<step>.err, DIR/summary.jsonl (one line
# per step: rc, wall seconds, lines written). DIR defaults to runs/accelerator-<UTC time>.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-python3}"
OUT="runs/accelerator-$(date -u +%Y%m%dT%H%M%SZ)"
SMOKE=0
PEER=1
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    --no-peer) PEER=0; shift ;;
    --only) ONLY=",$2,"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "accelerator.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"

# the checkout root (benchmarks/ next to jaxlab/) is importable: its benchmarks and its jaxlab
export PYTHONPATH="$(cd "$HERE/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
if [ "$SMOKE" = 1 ]; then
  export JAX_PLATFORMS=cpu
fi
if ! "$PY" -c "import benchmarks.harness" 2>"$OUT/import.err"; then
  echo "accelerator.sh: cannot import benchmarks.harness with $PY (see $OUT/import.err)" >&2
  exit 1
fi

note() {  # one JSON line in summary.jsonl
  "$PY" -c 'import json, sys; print(json.dumps(dict(a.split("=", 1) for a in sys.argv[1:])))' \
    "$@" >>"$OUT/summary.jsonl"
}

PEER_ARG=--no-peer
if [ "$PEER" = 1 ] && [ "$SMOKE" = 0 ]; then
  PEER_PY="${JAXLAB_PEER_PYTHON:-$HERE/peers/.venv-kinetix/bin/python}"
  if [ ! -x "$PEER_PY" ] && [ -f "$HERE/peers/setup_kinetix_peer.sh" ]; then
    PIP_RETRIES=0 PIP_TIMEOUT=10 timeout 120 bash "$HERE/peers/setup_kinetix_peer.sh" \
      >"$OUT/peer_setup.log" 2>&1 || true
  fi
  ours="$("$PY" -c 'import jax; print(jax.default_backend())')"
  theirs="$("$PEER_PY" -c 'import jax; print(jax.default_backend())' 2>/dev/null || echo none)"
  if [ "$theirs" = "$ours" ]; then
    PEER_ARG=""
    note step=peer status=on backend="$ours"
  else
    note step=peer status=off reason="peer venv backend '$theirs' vs ours '$ours' (a CPU peer at accelerator sizes is no comparison)"
  fi
fi

step() {  # step NAME LIMIT_S MODULE ARGS...
  local name="$1" limit="$2" module="$3"; shift 3
  if [ -n "$ONLY" ] && [[ "$ONLY" != *",$name,"* ]]; then return; fi
  local t0=$SECONDS
  echo "[accelerator] $name: $module $* (limit ${limit}s)" >&2
  timeout "$limit" "$PY" -m "benchmarks.$module" "$@" >"$OUT/$name.jsonl" 2>"$OUT/$name.err"
  local rc=$?
  note step="$name" module="$module" rc="$rc" wall_s="$((SECONDS - t0))" \
    lines="$(grep -c '^{' "$OUT/$name.jsonl" || true)" args="$*"
  [ "$rc" = 0 ] || echo "[accelerator] $name exited $rc (see $OUT/$name.err)" >&2
}

if [ "$SMOKE" = 1 ]; then
  step physics 120 bench_physics --sizes s --n 2 --seconds 0.1 --no-peer
  step env 120 bench_kinetix --sizes s --n 2 --obs flat --seconds 0.1 --no-peer
  step ppo 300 bench_ppo --train --sizes s --nets mlp --envs 8 --updates 1
  step moe 120 bench_moe --seq 32 --tokens 64 --d-model 16 --expert-ff 8 --experts 4 --topk 2 --modes fwd --reps 1
  step sampler 300 bench_diffusion --only samplers --quick
  step lm 120 bench_core --quick
else
  step physics 80 bench_physics --sizes s,m,l --n 4096,16384,65536 --seconds 1.5 $PEER_ARG
  step env 80 bench_kinetix --sizes s,m,l --n 4096,16384,65536 --obs flat --seconds 1.5 $PEER_ARG
  step ppo 150 bench_ppo --train --sizes m --nets mlp,transformer --envs 2048 --updates 2
  step moe 60 bench_moe --seq 2048 --tokens 32768 --d-model 1024 --expert-ff 512 --experts 64 --topk 8 --modes fwd,train
  step sampler 45 bench_diffusion --only samplers
  step lm 45 bench_core --steps 40
fi
cat "$OUT/summary.jsonl"
echo "[accelerator] JSON lines in $OUT" >&2
# exit status: the number of steps that failed (0 = all ran)
exit "$(grep -c '"rc": "[1-9]' "$OUT/summary.jsonl" || true)"
