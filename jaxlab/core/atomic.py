"""Files written whole or not at all: a temporary file beside the target, then ``os.replace``.

A disk that fills up, a Ctrl-C or a kill while writing leaves the previous file (or none) in
place, never a truncated one; the temporary file is removed when the write fails.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yields a temporary path beside ``path`` (same suffix, so writers that read the format
    from the name work); on success it replaces ``path``, on any error it is removed."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename == tmp:
            e.filename = str(path)  # the error names the file being written, not its stand-in
        raise


def write_text(path: str | Path, text: str, *, encoding: str = "utf-8") -> None:
    """``Path(path).write_text(text)``, atomically."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding=encoding)


def write_bytes(path: str | Path, data: bytes) -> None:
    """``Path(path).write_bytes(data)``, atomically."""
    with replacing(path) as tmp:
        tmp.write_bytes(data)
