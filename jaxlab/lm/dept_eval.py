"""DEPT's evaluation: per-source held-out perplexity and bits per character, embedding parameter
counts, and the bytes communicated against what synchronous data parallel would have sent for the
same tokens (:func:`jaxlab.lm.dept.dp_bytes`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxlab import media
from jaxlab.core import json_files
from jaxlab.lm import dept as dept_lib


def summary(
    dept: dept_lib.Dept,
    src: dept_lib.Sources,
    losses: np.ndarray,
    *,
    rounds: int,
    rows_sent: int,
    batch_size: int,
    seq_len: int,
    vocab_size: int,
) -> dict[str, float]:
    """The evaluation after ``rounds`` rounds from the held-out ``losses [K]`` (nats/token), the
    embedding rows sent so far and the static sizes (``vocab_size``: the global vocabulary's size
    requested, used for data parallel when the variant has none)."""
    cfg, model_cfg = dept.cfg, dept.server_model.cfg
    counts = dept.counts()
    n_body, n = counts["body_params"], cfg.local_steps
    m = 1 if model_cfg.tie_embeddings else 2
    per_round = rounds * cfg.sources_per_round * n_body + m * model_cfg.d_model * rows_sent
    sent = 2 * cfg.bytes_per_param * per_round
    v_dp = src.vocabs.server_size or vocab_size
    dp = dept_lib.dp_bytes(
        n_body, model_cfg.d_model, v_dp, steps=rounds * n, workers=cfg.sources_per_round
    )
    out: dict[str, float] = {}
    for i, loss in enumerate(losses):
        out[f"ppl/source{i}"] = float(np.exp(loss))
        out[f"bits_per_char/source{i}"] = float(loss / np.log(2) / src.chars_per_token[i])
    out["ppl/mean"] = float(np.exp(losses).mean())
    out.update({key: float(v) for key, v in counts.items()})
    out["bytes_communicated"] = float(sent)
    out["bytes_dp_equal_tokens"] = float(dp)
    tokens = rounds * cfg.sources_per_round * n * batch_size * seq_len
    out["bytes_per_token"] = float(sent / max(tokens, 1))
    return out


def write_summary(metrics: dict[str, float], run_dir: Path, *, title: str) -> None:
    """``dept_summary.json`` (``metrics``) and ``ppl_per_source.png`` (with matplotlib)."""
    json_files.write(Path(run_dir) / "dept_summary.json", metrics)
    k = sum(1 for key in metrics if key.startswith("ppl/source"))
    try:
        media.plot_bars(
            Path(run_dir) / "ppl_per_source.png",
            [metrics[f"ppl/source{i}"] for i in range(k)],
            labels=[f"source {i}" for i in range(k)],
            ylabel="held-out perplexity",
            title=title,
        )
    except media.MissingExtraError:
        pass
