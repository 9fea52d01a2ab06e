"""The error a command's user caused: printed by the CLI as one ``error:`` line plus a ``hint:``."""

from __future__ import annotations


class UserError(Exception):
    """An error caused by the command's input, printed as one line plus a hint."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint
