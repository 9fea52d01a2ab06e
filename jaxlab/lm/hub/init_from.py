"""``init_from=hf:DIR``: an LM recipe fine-tunes a Hugging Face model directory.

The recipe's ``model`` section takes its architecture from ``DIR/config.json`` when the config is
resolved (``max_len``, ``dtype``, ``param_dtype`` and ``quant`` stay the recipe's), so the run's
saved ``config.yaml`` describes the loaded model and ``jaxlab eval``, ``generate`` and
``export-hf`` reopen the run without the directory. On a fresh start the loop's fine-tune hook
(:func:`finetune`) replaces the freshly initialised parameters with the checkpoint's, placed with
the fresh parameters' shardings, and re-initialises the optimiser on them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax

from jaxlab.core.config import ConfigError
from jaxlab.lm.hub.checkpoint import load_params
from jaxlab.lm.hub.config import HubError, decoder_config_from_hf
from jaxlab.lm.model import DecoderConfig

PREFIX = "hf:"
"""``init_from`` values naming a Hugging Face directory start with this."""


def hf_directory(init_from: str) -> Path | None:
    """The directory of ``init_from="hf:DIR"``; None for ``""``.

    Raises:
        ConfigError: for any other value (naming ``init_from``).
    """
    if not init_from.strip():
        return None
    if not init_from.startswith(PREFIX) or not init_from[len(PREFIX) :].strip():
        raise ConfigError("init_from", init_from, "'' or hf:DIR (a Hugging Face model directory)")
    return Path(init_from[len(PREFIX) :]).expanduser()


def model_from_hf(directory: Path, model: DecoderConfig) -> DecoderConfig:
    """``model`` with the architecture of ``directory/config.json``; ``model.max_len``,
    ``dtype``, ``param_dtype`` and ``quant`` are kept, and for an MoE how it is computed and
    trained (``model.moe``'s dispatch, capacity, grouped matmul, expert parallelism, z-loss
    weight). ``model`` unchanged when the directory has no ``config.json`` (a reopened run whose
    source moved; a fresh start is refused by :func:`finetune`).

    Raises:
        ConfigError: naming ``init_from``, for an unreadable config or an MoE where the recipe's
            model is dense (or the reverse).
    """
    file = directory / "config.json"
    if not file.is_file():
        return model
    try:
        config = json.loads(file.read_text())
        hf = decoder_config_from_hf(
            config, path=file, max_len=model.max_len, dtype=model.dtype,
            param_dtype=model.param_dtype,
        )  # fmt: skip
    except (json.JSONDecodeError, HubError) as e:
        raise ConfigError("init_from", f"{PREFIX}{directory}", f"a readable model ({e})") from None
    if (hf.moe is None) != (model.moe is None):
        kind = "a dense model" if model.moe is None else "an MoE model"
        raise ConfigError("init_from", f"{PREFIX}{directory}", f"{kind}, as the recipe's")
    moe = hf.moe
    if moe is not None:
        keep = ("dispatch", "capacity_factor", "grouped_matmul", "tile_size", "expert_parallel")
        keep += ("z_loss_weight", "init_std")
        moe = dataclasses.replace(moe, **{k: getattr(model.moe, k) for k in keep})
    return dataclasses.replace(hf, quant=model.quant, moe=moe)


def check(cfg: Any) -> None:
    """Validates ``cfg.init_from`` of an LM recipe config and fills ``cfg.model`` from it.

    Called from the config's ``__post_init__`` (the config is frozen; its ``model`` is replaced in
    place once). A Hugging Face model reads the model's own token ids, so ``data.source`` (a
    token file made with ``jaxlab data prepare ... --tokenizer DIR``, or a text corpus with
    ``data.tokenizer=DIR``) is required, and the byte tokenizer is refused.
    """
    directory = hf_directory(cfg.init_from)
    if directory is None:
        return
    if hasattr(cfg.data, "source") and cfg.data.source is None:
        raise ConfigError(
            "data.source",
            None,
            f"a token file of the model's tokenizer with init_from={cfg.init_from} (make one "
            f"with `jaxlab data prepare IN OUT.npy --tokenizer {directory}`, or give a text "
            f"corpus with data.tokenizer={directory})",
        )
    if getattr(cfg.data, "tokenizer", None) == "byte":
        raise ConfigError(
            "data.tokenizer",
            "byte",
            f"the model's own tokenizer with init_from={cfg.init_from} "
            f"(data.tokenizer={directory})",
        )
    object.__setattr__(cfg, "model", model_from_hf(directory, cfg.model))


def with_params(state: Any, loaded: dict[str, Any], opt_init: Any) -> Any:
    """``state`` (fresh) with parameters ``loaded`` (unboxed ``{"params": ...}``), each placed
    and cast like the fresh parameter it replaces, and ``opt_state = opt_init(params)`` placed
    like the fresh optimiser state."""
    is_box = lambda x: isinstance(x, nn.meta.AxisMetadata)
    fresh, tree = jax.tree_util.tree_flatten_with_path(state.params, is_leaf=is_box)
    new = dict(jax.tree_util.tree_flatten_with_path(loaded)[0])
    if set(new) != {path for path, _ in fresh}:
        raise HubError("the loaded tensors do not match the model's parameters")
    leaves = []
    for path, old in fresh:
        box = old if is_box(old) else None
        target = old.unbox() if box is not None else old
        value = new[path]
        if target.shape != value.shape:
            name = jax.tree_util.keystr(path)
            raise HubError(f"{name}: loaded shape {value.shape}, the model's is {target.shape}")
        placed = jax.device_put(value.astype(target.dtype), target.sharding)
        leaves.append(box.replace_boxed(placed) if box is not None else placed)
    params = jax.tree.unflatten(tree, leaves)
    where = jax.tree.map(lambda x: x.sharding, state.opt_state)
    return state.replace(params=params, opt_state=jax.device_put(opt_init(params), where))


def load_checked(cfg: Any) -> dict[str, Any] | None:
    """The parameters (``{"params": ...}``) of ``cfg.init_from=hf:DIR`` for ``cfg.model``, or
    ``None`` when ``init_from`` is empty.

    Raises:
        ConfigError: naming ``init_from`` when the directory cannot be read or does not match.
    """
    directory = hf_directory(cfg.init_from)
    if directory is None:
        return None
    if not (directory / "config.json").is_file():
        raise ConfigError("init_from", cfg.init_from, "a directory holding config.json")
    if model_from_hf(directory, cfg.model) != cfg.model:
        raise ConfigError(
            "init_from", cfg.init_from, "the model of the run's config (config.json changed)"
        )
    try:
        return load_params(directory, cfg.model)
    except HubError as e:
        raise ConfigError("init_from", cfg.init_from, f"a loadable model ({e})") from None


def finetune(cfg: Any, state: Any, opt_init: Any) -> Any:
    """The loop's fine-tune hook for ``init_from=hf:DIR``: ``state`` with the checkpoint's
    parameters and a fresh optimiser (``opt_init``: ``params -> opt_state``); unchanged when
    ``init_from`` is empty.

    Raises:
        ConfigError: naming ``init_from`` when the directory cannot be read or does not match.
    """
    loaded = load_checked(cfg)
    if loaded is None:
        return state
    try:
        return with_params(state, loaded, opt_init)
    except HubError as e:
        raise ConfigError("init_from", cfg.init_from, f"a loadable model ({e})") from None
