"""The Test operator's sandbox: hostile candidates are stopped and the next run still works."""

import pytest

from jaxlab.workflows.sandbox import Sandbox, SandboxUnavailable

TESTS = "assert f() == 1\n"
HOSTILE = {
    "reads-a-file": ('def f():\n    return len(open("/etc/hostname").read()) and 1\n', "blocked"),
    "opens-a-socket": ("import _socket\ndef f():\n    _socket.socket()\n    return 1\n", "blocked"),
    "forks": ("import os\ndef f():\n    return 1 if os.fork() else 1\n", "blocked"),
    "loops-forever": ("def f():\n    while True:\n        pass\n", "timeout"),
    "catches-the-refusal": (
        'def f():\n    try:\n        open("/etc/hostname")\n    except Exception:\n'
        "        pass\n    return 1\n",
        "blocked",
    ),
    "exits-before-the-tests": ("import os\nos._exit(0)\n", "failed"),
    "exhausts-memory": ("def f():\n    return len(bytearray(2**31)) and 1\n", "failed"),
    "writes-a-file": ('def f():\n    open("PWNED", "w").write("x")\n    return 1\n', "blocked"),
}


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox(timeout_s=1.0)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_candidates_are_stopped_and_the_next_run_passes(
    sandbox, name, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    code, status = HOSTILE[name]
    result = sandbox.run(code, TESTS)
    assert not result.passed and result.status == status, result
    assert not (tmp_path / "PWNED").exists()
    assert sandbox.run("import math\ndef f():\n    return math.floor(1.5)\n", TESTS).passed
    assert sandbox.run("def f():\n    return 2\n", TESTS).status == "failed"


def test_a_sandbox_that_cannot_start_refuses_the_test_operator():
    with pytest.raises(SandboxUnavailable, match="the Test operator is refused"):
        Sandbox(python="/nonexistent/python", network_namespace=False)


def test_the_audit_hook_alone_refuses_sockets_where_there_is_no_network_namespace():
    box = Sandbox(timeout_s=1.0, network_namespace=False)
    assert "netns" not in box.layers
    assert box.run(*HOSTILE["opens-a-socket"][:1], TESTS).status == "blocked"
