#!/usr/bin/env bash
# Create (or reuse) an isolated virtual environment holding torch (CPU) and transformers, the
# reference side of the Hugging Face comparisons (benchmarks/bench_hf.py, the fixtures of
# tests/lm/fixtures/make_hf_fixture.py). Pins: pyproject.toml's hf-reference extra.
#
#   bash benchmarks/peers/setup_hf_peer.sh          # idempotent
#   benchmarks/peers/.venv-hf/bin/python ...        # then run peer scripts with it
#
# The venv lives at benchmarks/peers/.venv-hf (git-ignored); it never touches the project's venv.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${HERE}/.venv-hf"
PYTHON="${PYTHON:-python3}"

if [ ! -x "${VENV}/bin/python" ]; then
  echo "[setup_hf_peer] creating ${VENV} with $(${PYTHON} --version)"
  "${PYTHON}" -m venv "${VENV}"
fi
if "${VENV}/bin/python" -c "import torch, transformers, safetensors" 2>/dev/null; then
  echo "[setup_hf_peer] torch and transformers already installed in ${VENV}"
else
  "${VENV}/bin/python" -m pip install --quiet \
    'torch>=2.4,<3' 'transformers>=4.45,<6' 'safetensors>=0.4.3,<0.9'
fi
"${VENV}/bin/python" -c "import torch, transformers; print('[setup_hf_peer] torch', torch.__version__, 'transformers', transformers.__version__)"
