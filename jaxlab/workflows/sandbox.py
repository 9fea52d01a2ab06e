"""The Test operator's sandbox: a candidate program and its unit tests in a separate, limited
Python process.

AFlow's Test operator runs generated code against the problem's tests. Here that code never
runs in the searching process. :meth:`Sandbox.run` starts ``python -I`` (isolated: no user site,
no ``PYTHON*`` variables) with an empty environment, in an empty temporary directory, as the leader
of its own process group, with

* a wall-clock limit (the process group is killed) and a CPU-time limit (``RLIMIT_CPU``);
* a memory limit (``RLIMIT_AS``), no file writes (``RLIMIT_FSIZE = 0``), no core dumps (the
  runner sets these on itself before it reads the candidate);
* a new network namespace (``unshare -n``) where the machine allows one, and in any case
* an audit hook (:pep:`578`), installed before the candidate's code is compiled, that refuses
  opening files, sockets, ``fork``/``exec``/``spawn``/``system``/``subprocess``, ``os``
  calls that touch the file system, ``ctypes`` and frame inspection. A refused event fails the
  run even if the candidate catches the exception.

The runner reads the candidate and tests from stdin before the hook is installed and prints a
per-run nonce only after every test passed, so a program that exits early cannot pass. A few
pure modules (``math``, ``re``, ``collections``…) are imported before the hook, so candidates
may import them.

:class:`Sandbox` checks at construction that it can start (it runs a trivial program); if it
cannot, it raises :class:`SandboxUnavailable` naming the Test operator: code is never run
in-process instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile

PRELOADED = (
    "math",
    "re",
    "collections",
    "itertools",
    "functools",
    "heapq",
    "bisect",
    "string",
    "typing",
    "fractions",
    "statistics",
    "operator",
)

_RUNNER = r"""
import json, sys
_job = json.loads(sys.stdin.read())
import resource
for _name, _value in _job["limits"].items():
    resource.setrlimit(getattr(resource, _name), (_value, _value))
import {preload}
_blocked = []
_PREFIXES = ("open", "socket.", "subprocess.", "os.", "shutil.", "ctypes.", "sys._getframe",
             "sys.setprofile", "sys.settrace", "urllib.", "http.", "ftplib.", "smtplib.",
             "webbrowser.", "builtins.input", "code.", "pty.", "resource.", "signal.")
def _hook(event, args):
    if event.startswith(_PREFIXES):
        _blocked.append(event)
        raise RuntimeError("sandbox: " + event + " is not allowed")
_nonce = _job["nonce"]
sys.addaudithook(_hook)
del _hook
_code = compile(_job["code"] + "\n" + _job["tests"], "<candidate>", "exec")
_ns = {{"__name__": "__candidate__"}}
try:
    exec(_code, _ns)
    _ok = True
except BaseException as _e:
    sys.stderr.write("error: " + type(_e).__name__ + ": " + str(_e)[:200] + "\n")
    _ok = False
if _blocked:
    sys.stderr.write("blocked: " + _blocked[0] + "\n")
elif _ok:
    sys.stdout.write(_nonce + "\n")
"""


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot start here, so the Test operator is refused."""


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """What one run did.

    Attributes:
        passed: every test passed and nothing was refused.
        status: ``passed``, ``failed`` (a test or the code raised), ``blocked`` (a refused
            event, named in ``detail``), ``timeout`` or ``crashed`` (killed by a limit).
        detail: the first line of the reason.
    """

    passed: bool
    status: str
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class Sandbox:
    """Runs a candidate with its tests under the limits of the module docstring.

    Attributes:
        timeout_s: wall-clock seconds per run (CPU seconds: the same, rounded up).
        memory_mb: address-space limit.
        python: interpreter to run.
        network_namespace: run in a new network namespace where ``unshare -n`` works.
    """

    timeout_s: float = 5.0
    memory_mb: int = 512
    python: str = sys.executable
    network_namespace: bool = True

    def __post_init__(self) -> None:
        if not self.timeout_s > 0 or self.memory_mb < 64:
            raise ValueError(
                f"Sandbox(timeout_s={self.timeout_s!r}, memory_mb={self.memory_mb!r}): expected "
                "timeout_s > 0 and memory_mb >= 64"
            )
        prefix = []
        if self.network_namespace and shutil.which("unshare"):
            try:
                ok = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10)
                prefix = ["unshare", "-n"] if ok.returncode == 0 else []
            except (OSError, subprocess.SubprocessError):
                prefix = []
        object.__setattr__(self, "_prefix", tuple(prefix))
        check = self.run("def f():\n    return 1\n", "assert f() == 1\n")
        if not check.passed:
            raise SandboxUnavailable(
                f"the Test operator is refused: the sandbox cannot start ({check.status}: "
                f"{check.detail or 'no output'}); code is never run in-process instead"
            )

    @property
    def layers(self) -> tuple[str, ...]:
        """The isolation layers in force (``netns`` only where ``unshare -n`` works)."""
        base = ("isolated-python", "empty-env", "rlimits", "audit-hook")
        return base + (("netns",) if self._prefix else ())

    def _limits(self) -> dict[str, int]:
        """The resource limits the runner sets on itself before it reads the candidate (set
        there, not in a ``preexec_fn``: forking a multithreaded JAX process runs no Python)."""
        return {
            "RLIMIT_CPU": int(self.timeout_s) + 1,
            "RLIMIT_AS": self.memory_mb * 2**20,
            "RLIMIT_FSIZE": 0,
            "RLIMIT_CORE": 0,
        }

    def run(self, code: str, tests: str) -> SandboxResult:
        """Runs ``code`` then ``tests`` (assert statements) in a fresh limited process."""
        nonce = secrets.token_hex(16)
        job = json.dumps({"code": code, "tests": tests, "nonce": nonce, "limits": self._limits()})
        runner = _RUNNER.format(preload=", ".join(PRELOADED))
        argv = [*self._prefix, self.python, "-I", "-S", "-c", runner]
        with tempfile.TemporaryDirectory(prefix="jaxlab-sandbox-") as cwd:
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=cwd,
                    env={},
                    start_new_session=True,
                )
            except (OSError, subprocess.SubprocessError) as e:
                return SandboxResult(False, "crashed", f"cannot start: {e}")
            try:
                out, err = proc.communicate(job.encode(), timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                _kill(proc)
                return SandboxResult(False, "timeout", f"over {self.timeout_s} s")
            finally:
                _kill(proc)
        text = err.decode(errors="replace").strip().splitlines()
        last = text[-1] if text else f"exit code {proc.returncode}"
        if proc.returncode == 0 and out.decode(errors="replace").strip() == nonce:
            return SandboxResult(True, "passed")
        if any(line.startswith("blocked: ") for line in text):
            return SandboxResult(False, "blocked", last.removeprefix("blocked: "))
        if proc.returncode < 0:
            return SandboxResult(False, "crashed", f"signal {-proc.returncode}")
        return SandboxResult(False, "failed", last)


def _kill(proc: subprocess.Popen) -> None:
    """Kills the run's whole process group (children included) and reaps it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
