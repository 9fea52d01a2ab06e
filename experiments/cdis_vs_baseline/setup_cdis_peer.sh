#!/usr/bin/env bash
# The original CDIS code and its dependencies in their own venv, outside the repository:
# a checkout of github.com/MarkDana/CDIS in $PEER_DIR/CDIS and a venv in $PEER_DIR/venv with
# causal-learn 0.1.4.8 (the version jaxlab's tests compare with; it brings numpy and networkx).
# Idempotent. Usage: bash experiments/cdis_vs_baseline/setup_cdis_peer.sh [PEER_DIR]
set -euo pipefail
PEER_DIR=${1:-${TMPDIR:-/tmp}/cdis-peer}
mkdir -p "$PEER_DIR"
if [ ! -d "$PEER_DIR/CDIS" ]; then
  git clone --depth 1 https://github.com/MarkDana/CDIS "$PEER_DIR/CDIS"
fi
if [ ! -x "$PEER_DIR/venv/bin/python" ]; then
  python3 -m venv "$PEER_DIR/venv"
  "$PEER_DIR/venv/bin/pip" install -q "causal-learn==0.1.4.8"
fi
"$PEER_DIR/venv/bin/python" -c "import causallearn, networkx, numpy; print('peer ready:', numpy.__version__, networkx.__version__)"
echo "--peer-src $PEER_DIR/CDIS --peer-python $PEER_DIR/venv/bin/python"
