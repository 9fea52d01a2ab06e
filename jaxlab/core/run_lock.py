"""One training run per run directory: an exclusive lock file ``<run_dir>/.lock``.

The lock is an ``fcntl.flock`` on the file (the kernel drops it when the process dies, however it
dies) and the file records its holder, ``{"pid", "host", "started"}``, for the error message and
for hosts whose file system does not share ``flock``:

* another process holds the lock -> :class:`RunLockedError` naming its pid and host;
* the file names a process on *this* host but nobody holds the flock: that process is dead (the
  kernel dropped its lock; its pid may even have been reused) -> a stale lock, taken over (the old
  holder is kept in ``RunLock.stale_holder``);
* the file names a process on *another* host -> refused (its liveness cannot be checked from
  here); the message says to delete the file if that run is dead.

The lock is released (file removed, flock dropped) when the run ends, normally or by an exception;
folders the lock had to create are removed again if the run left them empty.
On multi-host runs only process 0 takes it.
"""

from __future__ import annotations

import fcntl
import functools
import inspect
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jaxlab.core.resume import RunDirError, check_run_dir

LOCK_NAME = ".lock"


class RunLockedError(RunDirError):
    """Another run holds the run directory's lock."""


class RunLock:
    """The exclusive lock of one run directory (see the module docstring)."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK_NAME
        self._fd: int | None = None
        self._created: Path | None = None
        self.stale_holder: dict[str, Any] | None = None

    def acquire(self) -> RunLock:
        """Takes the lock or raises :class:`RunLockedError`."""
        host = socket.gethostname()
        run_dir = self.path.parent
        self._created = next(
            (p for p in reversed((run_dir, *run_dir.parents)) if not p.exists()), None
        )
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            return self._acquire(host)
        except BaseException:
            self._remove_created()
            raise

    def _acquire(self, host: str) -> RunLock:
        for _ in range(10):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = self._read(fd)
                os.close(fd)
                started = holder.get("started")
                since = (
                    time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(started))
                    if isinstance(started, (int, float))
                    else ""
                )
                raise RunLockedError(
                    f"run directory {self.path.parent} is in use by another run "
                    f"(pid {holder.get('pid', '?')} on host {holder.get('host', '?')}{since}, "
                    f"lock file {self.path})",
                    "wait for that run to finish, stop it, or pass --run-dir NEW_DIR",
                ) from None
            # The file may have been removed by the previous holder between our open and flock.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            holder = self._read(fd)
            other_host = holder.get("host")
            if other_host not in (None, host) and holder.get("pid") is not None:
                os.close(fd)
                raise RunLockedError(
                    f"run directory {self.path.parent} is locked by pid {holder.get('pid')} on "
                    f"host {other_host} (lock file {self.path}); its liveness cannot be checked "
                    "from this host",
                    f"if that run is no longer running, delete {self.path}",
                )
            # Same host (a dead or pid-reused holder: it no longer holds the flock) or empty.
            self.stale_holder = holder if holder else None
            os.ftruncate(fd, 0)
            os.pwrite(
                fd,
                json.dumps({"pid": os.getpid(), "host": host, "started": time.time()}).encode(),
                0,
            )
            self._fd = fd
            return self
        raise RunLockedError(f"could not lock {self.path}: it keeps being replaced")

    @staticmethod
    def _read(fd: int) -> dict[str, Any]:
        try:
            data = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        except (ValueError, UnicodeDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        self._remove_created()

    def _remove_created(self) -> None:
        """Removes the folders :meth:`acquire` created if the run left no file in them (a run
        refused before writing anything leaves no trace)."""
        root = self._created
        if root is None or not root.is_dir():
            return
        if any(p.is_file() or p.is_symlink() for p in root.rglob("*")):
            return
        for p in sorted(root.rglob("*"), key=lambda q: len(q.parts), reverse=True):
            p.rmdir()
        root.rmdir()
        self._created = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def exclusive_run_dir(fn: Callable) -> Callable:
    """Decorator for ``fn(..., run_dir, ...)``: checks the run directory is usable
    (:func:`jaxlab.core.resume.check_run_dir`) and holds its :class:`RunLock` for the call (on
    process 0; other processes of a multi-host run share process 0's lock)."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import jax

        run_dir = sig.bind(*args, **kwargs).arguments["run_dir"]
        if jax.process_index() != 0:
            return fn(*args, **kwargs)
        check_run_dir(run_dir)
        with RunLock(run_dir):
            return fn(*args, **kwargs)

    return wrapper
