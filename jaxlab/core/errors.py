"""How a command ends when something goes wrong: the error its user caused (printed by the CLI
as one ``error:`` line plus a ``hint:``), and what a command keeps when it is interrupted or the
disk fills up (:func:`keeping`, read by the CLI's one-line message)."""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: ``errno`` values that mean the disk (or the user's quota) is full.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class UserError(Exception):
    """An error caused by the command's input, printed as one line plus a hint."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command was (the CLI's handler) so it ends as Ctrl-C does."""

    signum = 15


def disk_full(e: BaseException) -> OSError | None:
    """The out-of-space ``OSError`` behind ``e`` (``e`` itself or one of its causes, since
    libraries such as orbax re-raise it wrapped), or None."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
            return e
        e = e.__cause__ or e.__context__
    return None


@contextmanager
def keeping(what: str | Callable[[], str]) -> Iterator[None]:
    """Marks an interrupt or a full disk raised inside the block with what the command keeps
    (``what``: a sentence, or a function giving it at that moment), e.g. "state.json holds
    rounds 1-7"; the innermost block's sentence wins. The CLI prints it in its one-line
    message; other errors pass through unmarked."""
    try:
        yield
    except BaseException as e:
        if getattr(e, "kept", None) is None and (
            isinstance(e, KeyboardInterrupt) or disk_full(e) is not None
        ):
            e.kept = what() if callable(what) else what
        raise
