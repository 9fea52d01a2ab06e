"""Make this directory's helper modules (``diffusion_numpy_reference``) importable in any import mode."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
