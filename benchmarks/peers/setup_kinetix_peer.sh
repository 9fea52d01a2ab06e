#!/usr/bin/env bash
# Create (or reuse) an isolated virtual environment holding the original Kinetix / Jax2D
# packages, used only as the *reference* side of fidelity and speed comparisons.
#
#   bash benchmarks/peers/setup_kinetix_peer.sh          # idempotent
#   benchmarks/peers/.venv-kinetix/bin/python ...        # then run peer scripts with it
#
# The venv lives at benchmarks/peers/.venv-kinetix (git-ignored). It never touches the
# project's own venv. CPU JAX only; packages come from PyPI with plain pip.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${HERE}/.venv-kinetix"
PYTHON="${PYTHON:-python3.11}"
KINETIX_VERSION="3.0.2"

if ! command -v "${PYTHON}" >/dev/null 2>&1; then
  PYTHON=python3
fi

if [ ! -x "${VENV}/bin/python" ]; then
  echo "[setup_kinetix_peer] creating ${VENV} with $(${PYTHON} --version)"
  "${PYTHON}" -m venv "${VENV}"
fi

installed="$("${VENV}/bin/python" -m pip show kinetix-env 2>/dev/null | sed -n 's/^Version: //p' || true)"
if [ "${installed}" = "${KINETIX_VERSION}" ] && "${VENV}/bin/python" -c "import kinetix, jax2d, jax" 2>/dev/null; then
  echo "[setup_kinetix_peer] kinetix-env ${KINETIX_VERSION} already installed in ${VENV}"
else
  echo "[setup_kinetix_peer] installing kinetix-env==${KINETIX_VERSION} (brings jax2d and its own jax pin)"
  "${VENV}/bin/python" -m pip install --quiet --upgrade pip
  "${VENV}/bin/python" -m pip install --quiet "kinetix-env==${KINETIX_VERSION}"
fi

"${VENV}/bin/python" - <<'PY'
import importlib.metadata as md
for name in ("kinetix-env", "jax2d", "jax", "jaxlib", "numpy", "flax"):
    try:
        print(f"[setup_kinetix_peer] {name}=={md.version(name)}")
    except md.PackageNotFoundError:
        print(f"[setup_kinetix_peer] {name} not installed")
PY
