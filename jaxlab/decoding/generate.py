"""Target-only autoregressive decoding: one model call per generated token (the baseline).

The batch is decoded in lock-step with ``lax.while_loop`` over a fixed ``[B, max_len]`` buffer;
rows may have different prompt lengths and stop independently (stop token or ``max_len``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Int, PRNGKeyArray

from jaxlab.decoding import sampling
from jaxlab.decoding.interface import CausalLM, Params


@struct.dataclass
class DecodeOutput:
    """Result of :func:`generate`.

    Attributes:
        tokens: ``[B, max_len]`` prompt followed by the generation; ``pad_id`` at ``>= lengths``.
        lengths: ``[B]`` total valid length (prompt + generated, stop token included).
        num_calls: ``[B]`` model calls spent on each row after the prompt prefill.
    """

    tokens: Int[Array, "batch max_len"]
    lengths: Int[Array, " batch"]
    num_calls: Int[Array, " batch"]


def check_prompt(
    prompt: Int[Array, "batch prompt_len"], prompt_lengths: Int[Array, " batch"], max_len: int
) -> None:
    """Validates prompt shapes against ``max_len`` (static checks, valid inside ``jit``)."""
    if prompt.ndim != 2:
        raise ValueError(f"prompt.shape={prompt.shape}: expected [batch, prompt_len]")
    if prompt_lengths.shape != prompt.shape[:1]:
        raise ValueError(
            f"prompt_lengths.shape={prompt_lengths.shape}: expected ({prompt.shape[0]},)"
        )
    if not isinstance(max_len, int) or max_len <= prompt.shape[1]:
        raise ValueError(f"max_len={max_len!r}: expected an int > prompt_len={prompt.shape[1]}")


def place_prompt(
    prompt: Int[Array, "batch prompt_len"], capacity: int, pad_id: int
) -> Int[Array, "batch capacity"]:
    """``[B, capacity]`` buffer holding the prompt at positions ``0 … P-1`` and ``pad_id`` after."""
    batch, prompt_len = prompt.shape
    buffer = jnp.full((batch, capacity), pad_id, jnp.int32)
    return buffer.at[:, :prompt_len].set(prompt.astype(jnp.int32))


def generate(
    key: PRNGKeyArray,
    lm: CausalLM,
    params: Params,
    prompt: Int[Array, "batch prompt_len"],
    prompt_lengths: Int[Array, " batch"],
    *,
    max_len: int,
    sampling_params: sampling.SamplingParams | None = None,
    stop_tokens: Int[Array, " num_stop"] | None = None,
    pad_id: int = 0,
) -> DecodeOutput:
    """Ancestral sampling ``x_{t+1} ~ pi(· | x_{<=t})`` with ``pi`` from :mod:`sampling`.

    The prompt (right-padded, row ``b`` valid up to ``prompt_lengths[b] >= 1``) is prefilled in
    one call; each loop iteration then feeds every row's last token at its own position.
    ``lm``, ``max_len`` and ``pad_id`` are static under ``jit``.

    Args:
        key: PRNG key.
        lm: injected model.
        params: model parameters.
        prompt: ``[B, P]`` prompt ids.
        prompt_lengths: ``[B]`` valid prompt lengths (``1 <= prompt_lengths[b] <= P``).
        max_len: total length bound (prompt + generation), static.
        sampling_params: temperature / top-k / top-p (default plain sampling at ``T = 1``).
        stop_tokens: ``[S]`` ids that end a row (kept in the output), or ``None``.
        pad_id: filler id after each row's end.

    Returns:
        :class:`DecodeOutput`.
    """
    prompt, prompt_lengths = jnp.asarray(prompt), jnp.asarray(prompt_lengths)
    check_prompt(prompt, prompt_lengths, max_len)
    if sampling_params is None:
        sampling_params = sampling.SamplingParams()
    batch = prompt.shape[0]
    capacity = max_len + 1
    buffer = place_prompt(prompt, capacity, pad_id)
    state = lm.init_state(params, batch, capacity)
    _, state = lm.apply(params, state, buffer[:, : prompt.shape[1]], jnp.zeros(batch, jnp.int32))
    lengths = jnp.clip(prompt_lengths.astype(jnp.int32), 1, prompt.shape[1])
    rows = jnp.arange(batch)

    def cond(carry):
        return jnp.any(~carry[3])

    def body(carry):
        key, buffer, lengths, done, state, calls = carry
        key, sub = jax.random.split(key)
        last = buffer[rows, lengths - 1][:, None]
        logits, state = lm.apply(params, state, last, lengths - 1)
        token = sampling.sample(sub, logits[:, 0], sampling_params)
        active = ~done
        buffer = buffer.at[rows, lengths].set(jnp.where(active, token, buffer[rows, lengths]))
        new_lengths = lengths + active.astype(jnp.int32)
        stopped = sampling.is_stop(token, stop_tokens) | (new_lengths >= max_len)
        done = done | (active & stopped)
        return key, buffer, new_lengths, done, state, calls + active.astype(jnp.int32)

    done = lengths >= max_len
    carry = (key, buffer, lengths, done, state, jnp.zeros(batch, jnp.int32))
    _, buffer, lengths, _, _, calls = jax.lax.while_loop(cond, body, carry)
    positions = jnp.arange(max_len)[None, :]
    tokens = jnp.where(positions < lengths[:, None], buffer[:, :max_len], pad_id)
    return DecodeOutput(tokens=tokens, lengths=lengths, num_calls=calls)
