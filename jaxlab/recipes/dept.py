"""``dept``: DEPT pre-training (``jaxlab.lm.dept``) over synthetic heterogeneous languages.

One train step is one DEPT round: the batch holds ``[K, N, B, T+1]`` windows of every source
(the ``S`` sampled ones are gathered inside the step), sources sharded over the mesh's ``data``
axis by the ``client`` logical rule. ``dept.variant=glob|trim|spec`` picks the embedding scheme;
``optim.inner`` and ``optim.outer`` are the clients' and the server's optimisers.
``init_from=hf:DIR`` starts from a Hugging Face decoder directory: its architecture and body, its
embeddings as the server's (glob, trim) or every source's starting copy (spec), and its tokenizer
for every source (``data.vocab_size`` becomes the model's).
``jaxlab eval dept --run-dir D`` prints per-source perplexity, embedding parameter counts and
the bytes communicated (and what synchronous data parallel would have sent for the same tokens).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from jaxlab.core.config import ConfigError
from jaxlab.core.loop import LoopConfig
from jaxlab.core.recipe import Parts, Recipe, register
from jaxlab.core.sharding import MeshConfig
from jaxlab.lm import dept as dept_lib
from jaxlab.lm import dept_eval
from jaxlab.lm.dept_data import DeptDataConfig, make_sources, round_iterator
from jaxlab.lm.hub import init_from as hf_init
from jaxlab.lm.model import DecoderConfig


@dataclasses.dataclass(frozen=True)
class DeptRecipeConfig:
    seed: int = 0
    model: DecoderConfig = DecoderConfig(
        d_model=64, n_layers=2, n_heads=4, head_dim=16, d_ff=128, max_len=64
    )
    data: DeptDataConfig = DeptDataConfig()
    dept: dept_lib.DeptConfig = dept_lib.DeptConfig()
    optim: dept_lib.DeptOptim = dept_lib.DeptOptim()
    mesh: MeshConfig = MeshConfig()
    loop: LoopConfig = LoopConfig(total_steps=200, steps_per_call=10, log_every=20, eval_every=100)
    init_from: str = ""

    def __post_init__(self):
        hf_init.check(self)  # the model (and so its vocabulary) from hf:DIR
        if hf_init.hf_directory(self.init_from) is not None:
            data = dataclasses.replace(self.data, vocab_size=self.model.vocab_size)
            object.__setattr__(self, "data", data)
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


def _hf_tokenizer(cfg: DeptRecipeConfig):
    """The ``tokenizers`` object of ``init_from=hf:DIR`` (``None`` without one)."""
    from jaxlab.lm.hub import HubError, load_tokenizer

    directory = hf_init.hf_directory(cfg.init_from)
    if directory is None:
        return None
    try:
        return load_tokenizer(directory, model_vocab_size=cfg.model.vocab_size).tokenizer
    except HubError as e:
        raise ConfigError(
            "init_from", cfg.init_from, f"its tokenizer for the sources ({e})"
        ) from None


def finetune(cfg: DeptRecipeConfig, state: dept_lib.DeptState) -> dept_lib.DeptState:
    """The loop's fine-tune hook: with ``init_from=hf:DIR`` the fresh state takes the directory's
    body and embeddings (:func:`jaxlab.lm.dept.from_pretrained`)."""
    loaded = hf_init.load_checked(cfg)
    if loaded is None:
        return state
    outer = dept_lib.outer_optimizer(cfg.optim, cfg.loop.total_steps, state.hparams)
    try:
        return dept_lib.from_pretrained(state, loaded["params"], cfg.dept.variant, outer)
    except ValueError as e:
        raise ConfigError("init_from", cfg.init_from, f"a model matching the run ({e})") from None


def build(cfg: DeptRecipeConfig, mesh: jax.sharding.Mesh) -> Parts:
    d, dcfg = cfg.data, cfg.dept
    src = make_sources(d, dcfg.variant, tokenizer=_hf_tokenizer(cfg))
    dept = dept_lib.Dept(
        dcfg, cfg.model, src.vocabs, mesh=mesh, optim=cfg.optim, rounds=cfg.loop.total_steps
    )
    k, n, b, t = d.n_sources, dcfg.local_steps, d.batch_size, d.seq_len
    host, hosts = jax.process_index(), jax.process_count()
    if k % hosts:
        raise ConfigError("data.n_sources", k, f"a multiple of the {hosts} hosts")
    local = list(range(host * (k // hosts), (host + 1) * (k // hosts)))

    batch_sh = dept_lib.client_sharding(mesh, 4, k) or NamedSharding(mesh, PartitionSpec())
    abstract_batch = {
        "tokens": jax.ShapeDtypeStruct((k, n, b, t + 1), jnp.int32, sharding=batch_sh)
    }

    def state_sharding(abstract):
        rep = NamedSharding(mesh, PartitionSpec())
        out = jax.tree.map(lambda _: rep, abstract)

        def client(x):
            return dept_lib.client_sharding(mesh, len(x.shape), x.shape[0]) or rep

        return out.replace(client_emb=jax.tree.map(client, abstract.client_emb))

    val = jnp.asarray(dept_lib.eval_windows(src.val, d.eval_windows, t))
    eval_fn = jax.jit(dept.evaluate)

    def evaluate(state) -> dict[str, float]:
        losses = np.asarray(jax.device_get(eval_fn(state, val)))
        return dept_eval.summary(
            dept, src, losses, rounds=int(state.round), rows_sent=int(state.rows_sent),
            batch_size=b, seq_len=t, vocab_size=d.vocab_size,
        )  # fmt: skip

    def finalize(state, run_dir: Path) -> None:
        title = f"DEPT-{dcfg.variant.upper()} after {int(state.round)} rounds"
        dept_eval.write_summary(evaluate(state), run_dir, title=title)

    return Parts(
        init=dept.init,
        train_step=lambda state, batch: dept.round_step(state, batch["tokens"]),
        abstract_batch=abstract_batch,
        state_sharding=state_sharding,
        data=lambda: round_iterator(src, d, cfg.seed, n, local),
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
        traced=dept_lib.TRACED,
        finetune=finetune,
    )
)
