"""Every ``jaxlab`` sub-command, and every sub-command of a family's own parser, answers ``--help``.

The command paths are read from the parsers (``jaxlab.cli.build_parser`` and each family's
``build_parser`` named in ``jaxlab.cli.EXTRA_COMMANDS``), so a new sub-command is covered without
editing this file. Each ``--help`` runs in-process through ``jaxlab.cli.main``.
"""

import argparse
import importlib

import pytest

from jaxlab import cli


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _family_parser(name: str) -> argparse.ArgumentParser:
    module = cli.EXTRA_COMMANDS[name][0].split(":")[0]
    return importlib.import_module(module).build_parser()


def _command_paths() -> list[tuple[str, ...]]:
    """Every command path below ``jaxlab``: ``("train",)``, ``("levels", "show")``, ..."""
    paths = []

    def walk(parser: argparse.ArgumentParser, prefix: tuple[str, ...]) -> None:
        for name, sub in _subcommands(parser).items():
            path = (*prefix, name)
            paths.append(path)
            walk(_family_parser(name) if not prefix and name in cli.EXTRA_COMMANDS else sub, path)

    walk(cli.build_parser(), ())
    return paths


PATHS = _command_paths()


def test_the_walk_finds_the_known_commands():
    names = {" ".join(p) for p in PATHS}
    known = {"list", "config", "train", "eval", "sweep", "bench", *cli.EXTRA_COMMANDS}
    known |= {"causal discover", "levels show", "levels render", "levels rollout"}
    known |= {"workflows search"}
    assert PATHS and known <= names


@pytest.mark.parametrize("path", [(), *PATHS], ids=lambda p: "-".join(p) or "top")
def test_help_exits_zero_with_usage(capsys, path):
    try:
        code = cli.main([*path, "--help"])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr().out
    assert code in (0, None)
    assert out.startswith(f"usage: {' '.join(('jaxlab', *path))}")
