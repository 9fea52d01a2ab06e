"""``jaxlab workflows ...``: the AFlow search command with a trained decoder run injected as the
language-model executor's model.

A command, not part of the family: it joins ``lm`` (the decoder and its run) with ``workflows``
(whose modules only see a ``decoding.CausalLM``). The search itself is
:func:`jaxlab.workflows.cli.main`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from jaxlab.commands.generate import decoder_lm
from jaxlab.decoding.arithmetic import byte_token_strings
from jaxlab.lm.model import Decoder, DecoderConfig
from jaxlab.lm.tokenizer import BOS_ID, EOS_ID
from jaxlab.workflows import cli as workflows_cli
from jaxlab.workflows.lm_executor import TextLM


def byte_text_lm(model: Decoder, params) -> TextLM:
    """A byte-level decoder as the executor's text model: token strings are the bytes (specials
    outside the text alphabet), BOS before each prompt, end-of-document padding on the left."""
    return TextLM(
        decoder_lm(model),
        params,
        byte_token_strings(model.cfg.vocab_size),
        bos_id=BOS_ID,
        pad_id=EOS_ID,
    )


def load_text_lm(recipe_name: str, run_dir: str | Path) -> TextLM:
    """Opens a trained decoder run (e.g. ``lm-tiny``) on one device as a :class:`TextLM`."""
    from jaxlab.core import recipe as recipe_lib
    from jaxlab.core.errors import UserError
    from jaxlab.core.run import open_run

    r = recipe_lib.get(recipe_name)
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").exists():
        raise UserError(
            f"--lm-run-dir {run_dir}: no run there (missing config.yaml)",
            f"train first, e.g. python -m benchmarks.bench_workflows --parts lm --train-lm {run_dir}",
        )
    if not isinstance(getattr(r.config_cls(), "model", None), DecoderConfig):
        raise UserError(f"--lm-recipe {r.name}: not a decoder language model")
    run = open_run(run_dir, recipe=r)
    return byte_text_lm(Decoder(run.cfg.model), run.state.params)


def build_parser() -> argparse.ArgumentParser:
    """The ``jaxlab workflows`` parser (:func:`jaxlab.workflows.cli.build_parser`)."""
    return workflows_cli.build_parser()


def main(argv: Sequence[str]) -> int:
    """``jaxlab workflows search ...`` (see :mod:`jaxlab.workflows.cli`)."""
    return workflows_cli.main(argv, load_lm=load_text_lm)
