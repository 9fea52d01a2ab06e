"""DEPT: decoupled-embedding pre-training over heterogeneous sources with an outer optimizer
(Iacob et al., ICLR 2025, arXiv 2410.05021, Alg. 1).

``K`` data sources are clients. A round samples ``S <= K`` of them; each starts from the server's
transformer body ``θ`` (and, per variant, embeddings), runs ``N`` local optax steps on its own
data (``lax.scan``), and the server averages the pseudo-gradients and applies the outer optimizer
(DiLoCo: Nesterov SGD, lr 0.7, momentum 0.9)::

    Δ = θ − (1/S) Σ_k θ_k ,        θ ← OuterOpt(θ, Δ)                       (Alg. 1)

The sampled clients are one stacked pytree with a leading ``client`` axis under ``vmap`` (one
device) and sharded over the mesh's ``data`` axis by the ``client`` logical rule (many devices).

Embeddings (token embedding ``E [V, d]`` and the untied output head, stored here as its transpose
``H [V, d]``, treated alike):

* ``glob``: one global vocabulary; ``E, H`` are averaged like the body.
* ``trim``: client ``k`` holds only the rows ``R_k`` of the global vocabulary that occur in its
  data (its softmax runs over ``R_k``); each row's update is averaged over the sampled holders,
  ``Δ_v = Σ_{k∋v} (E_v − E_{k,v}) / |{k ∋ v}|``; rows no sampled client holds are left unchanged.
* ``spec``: each source has its own tokenizer and ``E_k, H_k``; they stay with the client (in
  ``DeptState.client_emb``), never enter the server state, and persist across rounds.

Communication (paper Tab. 1): per round, each sampled client receives and sends
``2·b·(|θ_body| + |E_shared|)`` bytes with ``|E_shared| = m·|V|·d`` (glob), ``m·|R_k|·d`` (trim),
``0`` (spec), ``m = 2`` for an untied head (1 tied) and ``b`` bytes per parameter. Synchronous data
parallel at equal tokens sends ``2·b·(|θ_body| + m·|V|·d)`` per worker on each of the ``N`` steps.

Clients are stateless between rounds (Flower's default): the inner optimizer starts afresh each
round; only SPEC's embeddings persist on the client.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jaxtyping import Array, Bool, Float, Int

from jaxlab.core import optim as optim_lib
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.core.sharding import logical_to_spec
from jaxlab.lm import sources as sources_lib
from jaxlab.lm.model import Decoder, DecoderConfig, next_token_loss

VARIANTS: tuple[str, ...] = ("glob", "trim", "spec")
_EMB = ("embed", "head")


@dataclasses.dataclass(frozen=True)
class DeptOptim:
    """DEPT's two optimisers (their ``lr`` traced: ``optim.inner.lr``, ``optim.inner.weight_decay``
    and ``optim.outer.lr`` in the state's ``hparams``).

    Attributes:
      inner: the clients' optimiser, restarted every round (its schedule runs over the round's
        ``local_steps``): clipped AdamW (β2 = 0.95) by default.
      outer: the server's optimiser on the pseudo-gradient ``Δ`` (its schedule runs over the
        rounds): Nesterov SGD, lr 0.7, momentum 0.9 (DiLoCo).
    """

    inner: OptimConfig = OptimConfig(name="adamw", lr=3e-3, b2=0.95, clip_norm=1.0)
    outer: OptimConfig = OptimConfig(name="sgd", lr=0.7, momentum=0.9, nesterov=True)


#: the traced keys of :class:`DeptOptim` nested at ``optim``
TRACED: tuple[str, ...] = optim_lib.traced_keys("optim.inner") + ("optim.outer.lr",)


@dataclasses.dataclass(frozen=True)
class DeptConfig:
    """Static DEPT settings (the optimisers are :class:`DeptOptim`).

    Attributes:
      variant: ``glob`` | ``trim`` | ``spec``.
      sources_per_round: ``S``, clients sampled (without replacement) per round.
      local_steps: ``N``, inner steps per client per round.
      bytes_per_param: ``b`` in the communication formula.
    """

    variant: str = "glob"
    sources_per_round: int = 3
    local_steps: int = 8
    bytes_per_param: int = 4

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ConfigError("variant", self.variant, "one of " + ", ".join(VARIANTS))
        for name in ("sources_per_round", "local_steps", "bytes_per_param"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "an integer >= 1")


@dataclasses.dataclass(frozen=True)
class Vocabs:
    """Host-side vocabulary layout of the ``K`` sources.

    Attributes:
      server_size: ``|V|`` of the global vocabulary (0 for spec: nothing on the server).
      local_size: ``V_loc``, the (padded) size of every client's embedding table.
      rows: ``[K, V_loc]`` int32, global row of each local id (``server_size`` = padding).
      valid: ``[K, V_loc]`` bool, local ids the source really holds.
    """

    server_size: int
    local_size: int
    rows: np.ndarray
    valid: np.ndarray

    @property
    def sizes(self) -> np.ndarray:
        """``|V_k|`` per source."""
        return self.valid.sum(axis=1)


@dataclasses.dataclass(frozen=True)
class Sources:
    """The tokenized sources: ``train[k]``, ``val[k]`` id streams in each source's local ids,
    the vocab layout and the tokenizers (one global one, or one per source for spec)."""

    train: tuple[np.ndarray, ...]
    val: tuple[np.ndarray, ...]
    chars_per_token: tuple[float, ...]
    vocabs: Vocabs
    tokenizers: tuple[Any, ...]


def tokenize_sources(
    texts: list[str],
    variant: str,
    vocab_size: int,
    val_fraction: float = 0.1,
    tokenizer: Any = None,
) -> Sources:
    """Trains the BPE vocabularies of ``variant`` on ``texts`` (one per source) and tokenizes.

    glob/trim: one global BPE of ``vocab_size`` over all sources (trim then keeps, per source,
    the rows occurring in its training stream); spec: one BPE of ``vocab_size`` per source.
    With ``tokenizer`` (a pretrained model's ``tokenizers.Tokenizer``, ``vocab_size`` its
    model's vocabulary) nothing is trained: every source is encoded with it, the global
    vocabulary is the model's, and spec gives each source its own copy of that vocabulary.
    Each stream's last ``val_fraction`` is held out."""
    if variant not in VARIANTS:
        raise ConfigError("variant", variant, "one of " + ", ".join(VARIANTS))
    if not texts:
        raise ConfigError("sources", texts, "at least one source")
    for i, t in enumerate(texts):
        if not t:
            raise ConfigError(f"sources[{i}]", t, "a non-empty corpus")
    if tokenizer is not None:
        toks = (tokenizer,) * (len(texts) if variant == "spec" else 1)
        streams = [sources_lib.encode(tokenizer, t) for t in texts]
    elif variant == "spec":
        toks = tuple(sources_lib.train_bpe([t], vocab_size) for t in texts)
        streams = [sources_lib.encode(tok, t) for tok, t in zip(toks, texts, strict=True)]
    else:
        toks = (sources_lib.train_bpe(texts, vocab_size),)
        streams = [sources_lib.encode(toks[0], t) for t in texts]
    cut = [int(len(s) * (1 - val_fraction)) for s in streams]
    train = [s[:c] for s, c in zip(streams, cut, strict=True)]
    val = [s[c:] for s, c in zip(streams, cut, strict=True)]
    cpt = tuple(len(t) / max(len(s), 1) for t, s in zip(texts, streams, strict=True))
    k = len(texts)
    size_of = (lambda t: vocab_size) if tokenizer is not None else (lambda t: t.get_vocab_size())
    if variant == "glob":
        v = size_of(toks[0])
        rows = np.tile(np.arange(v, dtype=np.int32), (k, 1))
        vocabs = Vocabs(v, v, rows, np.ones((k, v), bool))
    elif variant == "trim":
        v = size_of(toks[0])
        used = [np.unique(np.concatenate([t, s])) for t, s in zip(train, val, strict=True)]
        loc = max(len(u) for u in used)
        rows = np.full((k, loc), v, np.int32)
        valid = np.zeros((k, loc), bool)
        for i, u in enumerate(used):
            rows[i, : len(u)] = u
            valid[i, : len(u)] = True
        train = [np.searchsorted(u, t).astype(np.int32) for u, t in zip(used, train, strict=True)]
        val = [np.searchsorted(u, t).astype(np.int32) for u, t in zip(used, val, strict=True)]
        vocabs = Vocabs(v, loc, rows, valid)
    else:
        sizes = [size_of(t) for t in toks]
        loc = max(sizes)
        valid = np.arange(loc)[None, :] < np.asarray(sizes)[:, None]
        rows = np.where(valid, np.arange(loc)[None, :], 0).astype(np.int32)
        vocabs = Vocabs(0, loc, rows, valid)
    return Sources(tuple(train), tuple(val), cpt, vocabs, toks)


@flax.struct.dataclass
class DeptState:
    """Server body and (glob/trim) embeddings, outer optimizer state, spec's client embeddings
    ``[K, V_loc, d]``, the sampling key, the round, embedding rows sent so far, and the traced
    hyper-parameters (:data:`TRACED`)."""

    body: Any
    server_emb: Any
    outer_opt: Any
    client_emb: Any
    key: jax.Array
    round: jax.Array
    rows_sent: jax.Array
    hparams: dict[str, jax.Array] = flax.struct.field(default_factory=dict)


def split_params(params: Any) -> tuple[Any, dict[str, jax.Array]]:
    """Decoder ``params`` (the ``"params"`` collection, unboxed) -> ``(body, {"embed": E [V,d],
    "head": H [V,d]})`` with the head transposed so both are row tables."""
    body = {k: v for k, v in params.items() if k not in _EMB}
    emb = {"embed": params["embed"]["embedding"]}
    if "head" in params:
        emb["head"] = params["head"]["kernel"].T
    return body, emb


def merge_params(body: Any, emb: dict[str, jax.Array]) -> Any:
    """Inverse of :func:`split_params`."""
    out = dict(body)
    out["embed"] = {"embedding": emb["embed"]}
    if "head" in emb:
        out["head"] = {"kernel": emb["head"].T}
    return out


def masked_loss(
    model: Decoder, params: Any, tokens: Int[Array, "b t1"], valid: Bool[Array, " v"]
) -> Float[Array, ""]:
    """Next-token cross-entropy with the softmax restricted to the ids the client holds."""
    logits = model.apply({"params": params}, tokens[:, :-1])
    logits = jnp.where(valid[None, None, :], logits, -1e9)
    return next_token_loss(logits, tokens[:, 1:])


def inner_hparams(hparams: dict[str, Any]) -> dict[str, Any]:
    """The traced values of the inner optimiser (``optim.inner.*``) among ``hparams``."""
    return {k: v for k, v in hparams.items() if k.startswith("optim.inner.")}


def inner_optimizer(
    inner: OptimConfig, local_steps: int, hparams: dict[str, Any]
) -> optax.GradientTransformation:
    """The clients' optimiser ``inner`` with its traced values from ``hparams``."""
    return optim_lib.from_hparams(inner, local_steps, hparams, "optim.inner")


def outer_optimizer(
    optim: DeptOptim, rounds: int, hparams: dict[str, Any]
) -> optax.GradientTransformation:
    """The outer optimiser on the pseudo-gradient ``Δ`` (its schedule over ``rounds``), its rate
    from ``hparams``."""
    outer = {"optim.outer.lr": hparams["optim.outer.lr"]}
    return optim_lib.from_hparams(optim.outer, rounds, outer, "optim.outer")


def from_pretrained(
    state: DeptState, params: Any, variant: str, outer: optax.GradientTransformation
) -> DeptState:
    """A fresh ``state`` started from a pretrained decoder's ``params`` (the ``"params"``
    collection, unboxed): the body is the shared server body; its token embedding and head
    become the server's (glob, trim: each client gathers its rows from them) or every
    source's own starting copy (spec). Each array is cast and placed like the one it replaces,
    and the outer optimiser restarts on the new server parameters.

    Raises:
        ValueError: naming the tensor, if a shape differs from the state's.
    """
    body, emb = split_params(params)

    def like(new: Any, old: Any, name: str) -> Any:
        def one(path, n, o):
            shape = o.shape[1:] if name == "client_emb" else o.shape
            if n.shape != shape:
                where = name + jax.tree_util.keystr(path)
                raise ValueError(f"{where}: pretrained shape {n.shape}, the state's is {shape}")
            n = jnp.broadcast_to(n, o.shape) if name == "client_emb" else n
            return jax.device_put(jnp.asarray(n, o.dtype), o.sharding)

        if jax.tree.structure(new) != jax.tree.structure(old):
            raise ValueError(f"{name}: the pretrained tensors do not match the state's")
        return jax.tree_util.tree_map_with_path(one, new, old)

    new_body = like(body, state.body, "body")
    if variant == "spec":
        server_emb, client_emb = state.server_emb, like(emb, state.client_emb, "client_emb")
    else:
        server_emb, client_emb = like(emb, state.server_emb, "server_emb"), state.client_emb
    server = {"body": new_body, "emb": server_emb}
    where = jax.tree.map(lambda x: x.sharding, state.outer_opt)
    return state.replace(
        body=new_body,
        server_emb=server_emb,
        client_emb=client_emb,
        outer_opt=jax.device_put(outer.init(server), where),
    )


def client_sharding(mesh: Mesh | None, ndim: int, n: int) -> NamedSharding | None:
    """Sharding of a stacked ``[n, ...]`` client array: the ``client`` logical axis (the mesh's
    data axis) on dim 0, inner dims replicated; ``None`` on one device or if it does not divide."""
    if mesh is None:
        return None
    spec = logical_to_spec(("client",) + (None,) * (ndim - 1))
    axis = spec[0]
    if axis is None or mesh.shape[axis] == 1 or n % mesh.shape[axis]:
        return None
    return NamedSharding(mesh, spec)


def _constrain(tree: Any, mesh: Mesh | None) -> Any:
    def one(x):
        sh = client_sharding(mesh, x.ndim, x.shape[0])
        return x if sh is None else jax.lax.with_sharding_constraint(x, sh)

    return jax.tree.map(one, tree)


def round_bytes(
    variant: str,
    n_body: int,
    d_model: int,
    sampled_vocab: np.ndarray | list[int],
    global_vocab: int,
    *,
    bytes_per_param: int = 4,
    untied_head: bool = True,
) -> int:
    """Bytes of one round: ``Σ_{k sampled} 2·b·(|θ_body| + m·|E_k|·d)`` with ``|E_k| = |V|``
    (glob), ``|V_k|`` (trim), 0 (spec) and ``m = 2`` for an untied head."""
    if variant not in VARIANTS:
        raise ConfigError("variant", variant, "one of " + ", ".join(VARIANTS))
    m = 2 if untied_head else 1
    total = 0
    for vk in sampled_vocab:
        rows = {"glob": global_vocab, "trim": int(vk), "spec": 0}[variant]
        total += 2 * bytes_per_param * (n_body + m * rows * d_model)
    return total


def dp_bytes(
    n_body: int,
    d_model: int,
    global_vocab: int,
    *,
    steps: int,
    workers: int,
    bytes_per_param: int = 4,
    untied_head: bool = True,
) -> int:
    """Synchronous data parallel: each of ``workers`` sends and receives the full gradient,
    ``2·b·(|θ_body| + m·|V|·d)``, on every one of ``steps`` steps."""
    m = 2 if untied_head else 1
    return steps * workers * 2 * bytes_per_param * (n_body + m * global_vocab * d_model)


def param_count(tree: Any) -> int:
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(tree)))


class Dept:
    """DEPT for one model size, one variant and one set of sources (static; arrays as constants),
    with the optimisers ``optim`` (the outer schedule over ``rounds`` rounds).

    ``init(key) -> DeptState``; ``round_step(state, tokens [K, N, B, T+1]) -> (state, metrics)``
    (the tokens of every source; the sampled ones are gathered inside); ``evaluate(state,
    tokens [K, M, T+1]) -> loss [K]``.
    """

    def __init__(
        self,
        cfg: DeptConfig,
        model_cfg: DecoderConfig,
        vocabs: Vocabs,
        mesh: Mesh | None = None,
        optim: DeptOptim = DeptOptim(),
        rounds: int = 1,
    ):
        k = vocabs.rows.shape[0]
        if cfg.sources_per_round > k:
            raise ConfigError(
                "dept.sources_per_round", cfg.sources_per_round, f"at most the {k} sources"
            )
        self.cfg, self.vocabs, self.mesh, self.k = cfg, vocabs, mesh, k
        self.optim, self.rounds = optim, rounds
        self.local_model = Decoder(dataclasses.replace(model_cfg, vocab_size=vocabs.local_size))
        self.server_model = Decoder(
            dataclasses.replace(model_cfg, vocab_size=max(vocabs.server_size, 1))
        )
        self.d_model = model_cfg.d_model
        self.untied = not model_cfg.tie_embeddings
        self.rows = jnp.asarray(vocabs.rows)
        self.valid = jnp.asarray(vocabs.valid)
        self.sizes = jnp.asarray(vocabs.sizes, jnp.int32)

    # -- state ------------------------------------------------------------------------------
    def _init_params(self, model: Decoder, key: jax.Array) -> Any:
        dummy = jnp.zeros((1, 1), jnp.int32)
        return nn.meta.unbox(model.init(key, dummy)["params"])

    def init(self, key: jax.Array) -> DeptState:
        cfg = self.cfg
        k_body, k_emb, k_state = jax.random.split(key, 3)
        if cfg.variant == "spec":
            body, _ = split_params(self._init_params(self.local_model, k_body))
            keys = jax.random.split(k_emb, self.k)
            client_emb = jax.vmap(
                lambda kk: split_params(self._init_params(self.local_model, kk))[1]
            )(keys)
            server_emb: dict = {}
        else:
            body, server_emb = split_params(self._init_params(self.server_model, k_body))
            client_emb = {}
        server = {"body": body, "emb": server_emb}
        hparams = {
            **optim_lib.hparams(self.optim.inner, "optim.inner"),
            "optim.outer.lr": jnp.float32(self.optim.outer.lr),
        }
        return DeptState(
            body=body,
            server_emb=server_emb,
            outer_opt=self.outer_optimizer(hparams).init(server),
            client_emb=client_emb,
            key=k_state,
            round=jnp.zeros((), jnp.int32),
            rows_sent=jnp.zeros((), jnp.int32),
            hparams=hparams,
        )

    def outer_optimizer(self, hparams: dict[str, Any]) -> optax.GradientTransformation:
        """The outer optimiser on the pseudo-gradient ``Δ``, its rate from ``hparams``."""
        return outer_optimizer(self.optim, self.rounds, hparams)

    # -- one client ---------------------------------------------------------------------------
    def local_train(self, hparams, body, emb, tokens, valid):
        """``N`` inner steps of one client (``tokens [N, B, T+1]``) -> (body, emb, losses [N]);
        ``hparams``: the state's traced values."""
        opt = inner_optimizer(self.optim.inner, self.cfg.local_steps, inner_hparams(hparams))
        params = merge_params(body, emb)
        loss = functools.partial(masked_loss, self.local_model)

        def step(carry, batch):
            p, st = carry
            value, grads = jax.value_and_grad(loss)(p, batch, valid)
            updates, st = opt.update(grads, st, p)
            return (optax.apply_updates(p, updates), st), value

        (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), tokens)
        body, emb = split_params(params)
        return body, emb, losses

    def sample(self, key: jax.Array) -> Int[Array, " s"]:
        """The round's clients: all of them in order, or ``S`` sorted draws without replacement."""
        s = self.cfg.sources_per_round
        if s == self.k:
            return jnp.arange(self.k)
        return jnp.sort(jax.random.choice(key, self.k, (s,), replace=False))

    # -- one round ----------------------------------------------------------------------------
    def round_step(
        self, state: DeptState, tokens: Int[Array, "k n b t1"]
    ) -> tuple[DeptState, dict[str, jax.Array]]:
        """Alg. 1, one round: sample, broadcast, N local steps per client, aggregate, OuterOpt."""
        cfg, s = self.cfg, self.cfg.sources_per_round
        key, k_sample = jax.random.split(state.key)
        idx = self.sample(k_sample)
        toks = _constrain(tokens[idx], self.mesh)
        valid, rows = self.valid[idx], self.rows[idx]
        stack = lambda t: _constrain(  # noqa: E731
            jax.tree.map(lambda x: jnp.broadcast_to(x, (s,) + x.shape), t), self.mesh
        )
        if cfg.variant == "glob":
            emb0 = stack(state.server_emb)
        elif cfg.variant == "trim":
            emb0 = _constrain(
                jax.tree.map(
                    lambda e: jnp.take(e, rows, axis=0, mode="fill", fill_value=0),
                    state.server_emb,
                ),
                self.mesh,
            )
        else:
            emb0 = _constrain(jax.tree.map(lambda e: e[idx], state.client_emb), self.mesh)
        bodies, embs, losses = jax.vmap(functools.partial(self.local_train, state.hparams))(
            stack(state.body), emb0, toks, valid
        )

        delta_body = jax.tree.map(lambda g, b: g - jnp.mean(b, axis=0), state.body, bodies)
        client_emb, count = state.client_emb, None
        if cfg.variant == "glob":
            delta_emb = jax.tree.map(lambda g, e: g - jnp.mean(e, axis=0), state.server_emb, embs)
        elif cfg.variant == "trim":
            v = self.vocabs.server_size
            flat_rows = rows.reshape(-1)
            count = (
                jnp.zeros((v,), jnp.float32)
                .at[flat_rows]
                .add(valid.reshape(-1).astype(jnp.float32), mode="drop")
            )

            def scatter(e0, e):
                diff = (e0 - e).reshape(-1, e.shape[-1])
                total = jnp.zeros((v, e.shape[-1]), e.dtype).at[flat_rows].add(diff, mode="drop")
                return total / jnp.maximum(count, 1.0)[:, None]

            delta_emb = jax.tree.map(scatter, emb0, embs)
        else:
            delta_emb = {}
            client_emb = jax.tree.map(lambda c, e: c.at[idx].set(e), state.client_emb, embs)

        server = {"body": state.body, "emb": state.server_emb}
        outer = self.outer_optimizer(state.hparams)
        updates, outer_opt = outer.update({"body": delta_body, "emb": delta_emb}, state.outer_opt)
        new = optax.apply_updates(server, updates)
        new_emb = new["emb"]
        if count is not None:  # TRIM: rows no sampled client holds stay as they are
            held = (count > 0)[:, None]
            new_emb = jax.tree.map(lambda n, o: jnp.where(held, n, o), new_emb, state.server_emb)

        rows_round = {"glob": s * self.vocabs.server_size, "trim": jnp.sum(self.sizes[idx])}
        rows_round = jnp.asarray(rows_round.get(cfg.variant, 0), jnp.int32)
        n_body = param_count(state.body)
        m = 2 if self.untied else 1
        bytes_round = (
            2.0
            * cfg.bytes_per_param
            * (s * n_body + m * self.d_model * rows_round.astype(jnp.float32))
        )
        metrics = {
            "loss": jnp.mean(losses[:, -1]),
            "loss_first": jnp.mean(losses[:, 0]),
            "bytes": bytes_round,
            "pseudo_grad_norm": optax.global_norm(delta_body),
        }
        state = state.replace(
            body=new["body"],
            server_emb=new_emb,
            outer_opt=outer_opt,
            client_emb=client_emb,
            key=key,
            round=state.round + 1,
            rows_sent=state.rows_sent + rows_round,
        )
        return state, metrics

    # -- evaluation -----------------------------------------------------------------------------
    def source_embeddings(self, state: DeptState) -> dict[str, jax.Array]:
        """``[K, V_loc, d]`` embeddings each source evaluates with."""
        if self.cfg.variant == "spec":
            return state.client_emb
        if self.cfg.variant == "glob":
            return jax.tree.map(
                lambda e: jnp.broadcast_to(e, (self.k,) + e.shape), state.server_emb
            )
        return jax.tree.map(
            lambda e: jnp.take(e, self.rows, axis=0, mode="fill", fill_value=0), state.server_emb
        )

    def evaluate(self, state: DeptState, tokens: Int[Array, "k m t1"]) -> Float[Array, " k"]:
        """Mean next-token loss (nats/token) per source with the server body."""
        embs = self.source_embeddings(state)
        fn = lambda e, t, v: masked_loss(self.local_model, merge_params(state.body, e), t, v)  # noqa: E731
        return jax.vmap(fn)(embs, tokens, self.valid)

    def counts(self) -> dict[str, int]:
        """Embedding parameter counts (token embedding + untied head): on the server, per client
        (max over sources) and summed over clients; and the body's."""
        m = 2 if self.untied else 1
        sizes = np.asarray(self.vocabs.sizes)
        per_client = {"glob": np.full_like(sizes, self.vocabs.server_size), "trim": sizes}.get(
            self.cfg.variant, sizes
        )
        body = self._init_params(self.local_model, jax.random.PRNGKey(0))
        return {
            "body_params": param_count(split_params(body)[0]),
            "server_embedding_params": m * self.vocabs.server_size * self.d_model,
            "client_embedding_params_max": int(m * per_client.max() * self.d_model),
            "client_embedding_params_sum": int(m * per_client.sum() * self.d_model),
        }


# -- synchronous data parallel (the baseline) ----------------------------------------------------
@flax.struct.dataclass
class DpState:
    params: Any
    opt_state: Any
    hparams: dict[str, jax.Array] = flax.struct.field(default_factory=dict)


def make_dp(
    inner: OptimConfig, model_cfg: DecoderConfig, vocab_size: int, steps: int = 1
) -> tuple[Decoder, Callable, Callable]:
    """Standard data parallel over the same sources with the global vocabulary: ``init(key)``,
    ``step(state, tokens [K, B, T+1])`` (one step of the optimiser ``inner``, its schedule over
    ``steps``, on the mean gradient of all sources' batches)."""
    model = Decoder(dataclasses.replace(model_cfg, vocab_size=vocab_size))
    valid = jnp.ones((vocab_size,), bool)

    def init(key):
        dummy = jnp.zeros((1, 1), jnp.int32)
        params = nn.meta.unbox(model.init(key, dummy)["params"])
        hparams = optim_lib.hparams(inner, "optim.inner")
        opt = inner_optimizer(inner, steps, hparams)
        return DpState(params, opt.init(params), hparams)

    def step(state, tokens):
        opt = inner_optimizer(inner, steps, state.hparams)
        flat = tokens.reshape((-1,) + tokens.shape[2:])
        loss, grads = jax.value_and_grad(masked_loss, argnums=1)(model, state.params, flat, valid)
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        return state.replace(
            params=optax.apply_updates(state.params, updates), opt_state=opt_state
        ), {"loss": loss}

    return model, init, step


def dp_from_dept_init(dept: Dept, state: DeptState) -> Any:
    """The GLOB server parameters as a full decoder parameter tree (same start for DP)."""
    return merge_params(state.body, state.server_emb)


# -- data -----------------------------------------------------------------------------------------
def round_windows(
    streams: tuple[np.ndarray, ...], seed: int, index: int, n: int, b: int, t: int
) -> np.ndarray:
    """``[K, n, b, t+1]`` random windows of every source for round ``index`` (deterministic)."""
    rng = np.random.default_rng((seed, index))
    out = np.empty((len(streams), n, b, t + 1), np.int32)
    for k, s in enumerate(streams):
        if len(s) < t + 2:
            raise ConfigError(f"sources[{k}]", len(s), f"a stream longer than seq_len+1={t + 1}")
        starts = rng.integers(0, len(s) - t - 1, (n, b))
        out[k] = s[starts[..., None] + np.arange(t + 1)]
    return out


def eval_windows(streams: tuple[np.ndarray, ...], m: int, t: int) -> np.ndarray:
    """``[K, m, t+1]`` evenly spaced held-out windows of every source."""
    out = np.empty((len(streams), m, t + 1), np.int32)
    for k, s in enumerate(streams):
        if len(s) < t + 2:
            raise ConfigError(f"val[{k}]", len(s), f"a stream longer than seq_len+1={t + 1}")
        starts = np.linspace(0, len(s) - t - 1, m).astype(int)
        out[k] = s[starts[:, None] + np.arange(t + 1)]
    return out


# -- plasticity --------------------------------------------------------------------------------
def adapt(
    key: jax.Array,
    body: Any,
    model_cfg: DecoderConfig,
    inner: OptimConfig,
    vocab_size: int,
    tokens: Int[Array, "steps b t1"],
    lr: float | jax.Array,
) -> Float[Array, " steps"]:
    """Plasticity: continue a trained ``body`` on a new source with fresh random embeddings of
    ``vocab_size`` rows, one step of the optimiser ``inner`` at rate ``lr`` per batch of ``tokens``
    (``lax.scan``); returns the training loss before each step."""
    model = Decoder(dataclasses.replace(model_cfg, vocab_size=vocab_size))
    dummy = jnp.zeros((1, 1), jnp.int32)
    _, emb = split_params(nn.meta.unbox(model.init(key, dummy)["params"]))
    params = merge_params(body, emb)
    valid = jnp.ones((vocab_size,), bool)
    opt = optim_lib.make(inner, tokens.shape[0], lr=lr)

    def step(carry, batch):
        p, st = carry
        loss, grads = jax.value_and_grad(masked_loss, argnums=1)(model, p, batch, valid)
        updates, st = opt.update(grads, st, p)
        return (optax.apply_updates(p, updates), st), loss

    _, losses = jax.lax.scan(step, (params, opt.init(params)), tokens)
    return losses
