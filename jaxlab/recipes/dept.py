"""``dept``: DEPT pre-training (``jaxlab.lm.dept``) over synthetic heterogeneous languages.

One train step is one DEPT round: the batch holds ``[K, N, B, T+1]`` windows of every source
(the ``S`` sampled ones are gathered inside the step), sources sharded over the mesh's ``data``
axis by the ``client`` logical rule. ``variant=glob|trim|spec`` picks the embedding scheme.
``jaxlab eval dept --run-dir D`` prints per-source perplexity, embedding parameter counts and
the bytes communicated (and what synchronous data parallel would have sent for the same tokens).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import grain
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from jaxlab import media
from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.sharding import MeshConfig
from jaxlab.lm import dept as dept_lib
from jaxlab.lm import sources as sources_lib
from jaxlab.lm.model import DecoderConfig


@dataclasses.dataclass(frozen=True)
class DeptDataConfig:
    """The sources: ``kind="synthetic"``: ``n_sources`` languages of ``chars_per_source``
    characters over one latent grammar; ``kind="corpus"``: the shipped corpus split by domain
    (the ``n_sources`` largest stdlib modules). BPE vocabularies of ``vocab_size``;
    ``batch_size`` windows of ``seq_len`` tokens per source per local step."""

    kind: str = "synthetic"
    n_sources: int = 3
    chars_per_source: int = 40_000
    vocab_size: int = 96
    disjoint: bool = True
    grammar: sources_lib.GrammarConfig = sources_lib.GrammarConfig()
    batch_size: int = 8
    seq_len: int = 32
    eval_windows: int = 16

    def __post_init__(self):
        if self.kind not in ("synthetic", "corpus"):
            raise ConfigError("data.kind", self.kind, "'synthetic' or 'corpus'")
        for name in ("n_sources", "chars_per_source", "batch_size", "seq_len", "eval_windows"):
            if getattr(self, name) < 1:
                raise ConfigError(f"data.{name}", getattr(self, name), "an integer >= 1")


@dataclasses.dataclass(frozen=True)
class DeptRecipeConfig:
    seed: int = 0
    variant: str = "glob"
    model: DecoderConfig = DecoderConfig(
        d_model=64, n_layers=2, n_heads=4, head_dim=16, d_ff=128, max_len=64
    )
    data: DeptDataConfig = DeptDataConfig()
    dept: dept_lib.DeptConfig = dept_lib.DeptConfig()
    mesh: MeshConfig = MeshConfig()
    loop: LoopConfig = LoopConfig(total_steps=200, steps_per_call=10, log_every=20, eval_every=100)

    def __post_init__(self):
        if self.variant not in dept_lib.VARIANTS:
            raise ConfigError("variant", self.variant, "one of " + ", ".join(dept_lib.VARIANTS))
        if self.dept.variant not in ("glob", self.variant):
            raise ConfigError("dept.variant", self.dept.variant, "unset: the key is `variant`")
        # one source of truth: `variant` (model.vocab_size is likewise set from the sources)
        object.__setattr__(self, "dept", dataclasses.replace(self.dept, variant=self.variant))
        if self.data.seq_len > self.model.max_len:
            raise ConfigError(
                "data.seq_len", self.data.seq_len, f"at most model.max_len={self.model.max_len}"
            )
        if self.dept.sources_per_round > self.data.n_sources:
            raise ConfigError(
                "dept.sources_per_round",
                self.dept.sources_per_round,
                f"at most data.n_sources={self.data.n_sources}",
            )


def make_sources(cfg: DeptRecipeConfig) -> dept_lib.Sources:
    """The tokenized sources of ``cfg`` (deterministic in the grammar seed)."""
    d = cfg.data
    if d.kind == "corpus":
        return dept_lib.tokenize_sources(
            sources_lib.corpus_domains(d.n_sources), cfg.variant, d.vocab_size
        )
    grammar = sources_lib.make_grammar(d.grammar)
    texts = [
        sources_lib.render(grammar, d.grammar, k, d.chars_per_source, disjoint=d.disjoint)
        for k in range(d.n_sources)
    ]
    return dept_lib.tokenize_sources(texts, cfg.variant, d.vocab_size)


def build(cfg: DeptRecipeConfig, mesh: jax.sharding.Mesh) -> Parts:
    d = cfg.data
    src = make_sources(cfg)
    dcfg = cfg.dept
    dept = dept_lib.Dept(dcfg, cfg.model, src.vocabs, mesh=mesh)
    k, n, b, t = d.n_sources, dcfg.local_steps, d.batch_size, d.seq_len
    host, hosts = jax.process_index(), jax.process_count()
    if k % hosts:
        raise ConfigError("data.n_sources", k, f"a multiple of the {hosts} hosts")
    local = list(range(host * (k // hosts), (host + 1) * (k // hosts)))

    batch_sh = dept_lib.client_sharding(mesh, 4, k) or NamedSharding(mesh, PartitionSpec())
    abstract_batch = {
        "tokens": jax.ShapeDtypeStruct((k, n, b, t + 1), jnp.int32, sharding=batch_sh)
    }

    def round_batch(i: int) -> dict[str, np.ndarray]:
        toks = dept_lib.round_windows(src.train, cfg.seed, int(i), n, b, t)
        return {"tokens": toks[local]}

    def data():
        ds = grain.MapDataset.range(2**31 - 1).map(round_batch)
        return iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)))

    def state_sharding(abstract):
        rep = NamedSharding(mesh, PartitionSpec())
        out = jax.tree.map(lambda _: rep, abstract)

        def client(x):
            return dept_lib.client_sharding(mesh, len(x.shape), x.shape[0]) or rep

        return out.replace(client_emb=jax.tree.map(client, abstract.client_emb))

    val = dept_lib.eval_windows(src.val, d.eval_windows, t)
    eval_fn = jax.jit(dept.evaluate)
    counts = dept.counts()

    def evaluate(state) -> dict[str, float]:
        losses = np.asarray(jax.device_get(eval_fn(state, jnp.asarray(val))))
        rounds = int(state.round)
        n_body = counts["body_params"]
        m = 1 if cfg.model.tie_embeddings else 2
        sent = (
            2
            * dcfg.bytes_per_param
            * (
                rounds * dcfg.sources_per_round * n_body
                + m * cfg.model.d_model * int(state.rows_sent)
            )
        )
        v_dp = src.vocabs.server_size or d.vocab_size
        dp = dept_lib.dp_bytes(
            n_body, cfg.model.d_model, v_dp, steps=rounds * n, workers=dcfg.sources_per_round
        )
        out: dict[str, float] = {}
        for i, loss in enumerate(losses):
            out[f"ppl/source{i}"] = float(np.exp(loss))
            out[f"bits_per_char/source{i}"] = float(loss / np.log(2) / src.chars_per_token[i])
        out["ppl/mean"] = float(np.exp(losses).mean())
        out.update({key: float(v) for key, v in counts.items()})
        out["bytes_communicated"] = float(sent)
        out["bytes_dp_equal_tokens"] = float(dp)
        tokens = rounds * dcfg.sources_per_round * n * b * t
        out["bytes_per_token"] = float(sent / max(tokens, 1))
        return out

    def finalize(state, run_dir: Path) -> None:
        """``dept_summary.json`` (the evaluation) and ``ppl_per_source.png`` (with matplotlib)."""
        summary = evaluate(state)
        (Path(run_dir) / "dept_summary.json").write_text(json.dumps(summary, indent=1))
        try:
            media.plot_bars(
                Path(run_dir) / "ppl_per_source.png",
                [summary[f"ppl/source{i}"] for i in range(k)],
                labels=[f"source {i}" for i in range(k)],
                ylabel="held-out perplexity",
                title=f"DEPT-{cfg.variant.upper()} after {int(state.round)} rounds",
            )
        except media.MissingExtraError:
            pass

    return Parts(
        init=dept.init,
        train_step=lambda state, batch: dept.round_step(state, batch["tokens"]),
        abstract_batch=abstract_batch,
        state_sharding=state_sharding,
        data=data,
        evaluate=evaluate,
        finalize=finalize,
        units_per_step=(dcfg.sources_per_round * n * b * t, "tok"),
    )


RECIPE = register(
    Recipe(
        name="dept",
        config_cls=DeptRecipeConfig,
        build=build,
        description="DEPT: decoupled-embedding pre-training over heterogeneous sources "
        "(GLOB/TRIM/SPEC, Nesterov outer optimizer)",
        traced=("dept.inner_lr", "dept.outer_lr"),
    )
)
