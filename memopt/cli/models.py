"""Where ``memopt plan`` / ``memopt fit`` get a model: ``hf:TYPE`` or ``package.module:factory``.

Every model is built on the ``meta`` device: no parameter memory is allocated, so a 70B config
builds on a laptop. :mod:`memopt.cli.trace` replaces the meta tensors by fake ones.

* ``hf:TYPE`` -- a Hugging Face ``transformers`` model type (``hf:llama``, ``hf:gpt2``) built
  from its default config (``AutoConfig.for_model``) with ``key=value`` overrides and a causal-LM,
  masked-LM or seq2seq-LM head, random weights, nothing downloaded. Inputs are ``input_ids`` of
  shape ``(batch, seq)`` and ``labels = input_ids``; ``use_cache`` is off (training).
* ``package.module:factory`` -- a callable returning ``(model, inputs)``; ``inputs`` is a dict
  (keyword arguments), a tuple/list (positional) or one tensor. It is called under
  ``torch.device("meta")`` with the keyword arguments among ``batch``, ``seq`` that its
  signature accepts, so modules it creates without an explicit device allocate nothing.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from memopt.cli.errors import EXIT_MODEL, EXIT_USAGE, CliError, one_line

#: Config attributes that count layers besides ``num_hidden_layers``: a model with any of them
#: (encoder-decoders) is always traced at full depth.
_OTHER_DEPTHS = ("num_decoder_layers", "decoder_layers", "encoder_layers", "n_layers_decoder")


@dataclass
class Built:
    """A model on the meta device and the inputs of one training step."""

    model: nn.Module
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelSource:
    """How to build the model at some depth (``layers=None``: the configured depth)."""

    name: str
    build: Callable[..., Built]
    """``build(batch=, seq=, dtype=, layers=None) -> Built``"""
    num_layers: int | None
    """The model's number of repeated layers when the depth can be changed, else None."""
    description: str = ""
    max_positions: int | None = None
    """The config's ``max_position_embeddings`` (the default sequence length is capped by it)."""
    materialize: Callable[..., Built] | None = None
    """``materialize(batch=, seq=, dtype=, device=)``: the same model with real random weights
    and real inputs (tests and benchmarks compare predictions with it)."""
    sizes: tuple[str, ...] = ("batch", "seq")
    """The sizes ``build`` gives the model's inputs (a factory: those among its parameters)."""


def parse_value(text: str) -> Any:
    """A config override value: JSON (``12``, ``0.1``, ``true``, ``null``, ``[1,2]``) or a string."""
    low = text.strip()
    if low in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[low]
    try:
        return json.loads(low)
    except ValueError:
        return text


def split_overrides(items: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """Split ``--config`` items into model-config overrides (``key=value``) and plan strings."""
    overrides: dict[str, Any] = {}
    plans: list[str] = []
    for item in items:
        for part in _split_commas(item):
            key, eq, value = part.partition("=")
            if eq and key.strip().isidentifier():
                overrides[key.strip()] = parse_value(value)
            else:
                plans.append(part)
    return overrides, plans


def _split_commas(item: str) -> list[str]:
    """``a=1,BiasGelu+:1:-1`` -> two items; commas inside brackets (JSON values) stay."""
    out, depth, cur = [], 0, []
    for ch in item:
        depth += ch in "[{("
        depth -= ch in "]})"
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return [x for x in out if x]


def resolve(spec: str, overrides: Mapping[str, Any]) -> ModelSource:
    """The :class:`ModelSource` for ``hf:TYPE`` or ``package.module:factory``."""
    if spec.startswith("hf:"):
        return hf_source(spec[3:], overrides)
    if ":" in spec:
        if overrides:
            raise CliError(
                f"model config overrides ({', '.join(overrides)}) apply to hf: models only",
                EXIT_USAGE,
            )
        return factory_source(spec)
    raise CliError(
        f"model {spec!r}: use hf:TYPE (e.g. hf:llama) or package.module:factory", EXIT_USAGE
    )


# --------------------------------------------------------------------------- Hugging Face


def _transformers():
    try:
        import transformers
    except ImportError as e:
        raise CliError(
            f"hf: models need the transformers package ({one_line(e)}); pip install transformers",
            EXIT_MODEL,
        ) from None
    return transformers


def hf_config(model_type: str, overrides: Mapping[str, Any]):
    """The default config of ``model_type`` with ``overrides`` applied (unknown keys are errors)."""
    tf = _transformers()
    mapping = tf.CONFIG_MAPPING
    if model_type not in mapping:
        close = difflib.get_close_matches(model_type, list(mapping.keys()), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise CliError(f"unknown Hugging Face model type {model_type!r}{hint}", EXIT_MODEL)
    default = tf.AutoConfig.for_model(model_type)
    known = set(default.to_dict()) | set(getattr(default, "attribute_map", {}))
    for key in overrides:
        if key not in known and not hasattr(default, key):
            close = difflib.get_close_matches(key, sorted(known), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise CliError(f"hf:{model_type} config has no field {key!r}{hint}", EXIT_USAGE)
    # Overrides go through the constructor, so derived fields (head_dim, ...) follow them.
    try:
        config = tf.AutoConfig.for_model(model_type, **overrides)
    except Exception as e:
        raise CliError(f"hf:{model_type} config: {one_line(e)}", EXIT_USAGE) from None
    if "use_cache" not in overrides and hasattr(config, "use_cache"):
        config.use_cache = False
    return config


def _head_class(tf, config):
    """The Auto class for the model's LM head and the loss type it uses."""
    from transformers.models.auto import modeling_auto as ma

    kind = config.model_type
    for names, cls, loss in (
        (ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, tf.AutoModelForCausalLM, "ForCausalLM"),
        (ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES, tf.AutoModelForMaskedLM, "ForMaskedLM"),
        (ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, tf.AutoModelForSeq2SeqLM, None),
    ):
        if kind in names:
            return cls, loss
    raise CliError(
        f"hf:{kind} has no causal-LM, masked-LM or seq2seq-LM head in transformers; "
        "use a package.module:factory that returns the model and its inputs",
        EXIT_MODEL,
    )


def _layer_count(config) -> int | None:
    n = getattr(config, "num_hidden_layers", None)
    if not isinstance(n, int) or n < 1:
        return None
    if any(isinstance(getattr(config, k, None), int) for k in _OTHER_DEPTHS):
        return None
    types = getattr(config, "layer_types", None)
    if isinstance(types, list | tuple) and len(set(map(str, types))) > 1:
        return None  # mixed layer kinds (sliding/full): the depth pattern is not uniform
    return n


def _with_depth(config, layers: int | None):
    if layers is None or layers == getattr(config, "num_hidden_layers", None):
        return config
    config = copy.deepcopy(config)
    config.num_hidden_layers = layers
    types = getattr(config, "layer_types", None)
    if isinstance(types, list | tuple):
        config.layer_types = list(types)[:layers]
    return config


def hf_source(model_type: str, overrides: Mapping[str, Any]) -> ModelSource:
    tf = _transformers()
    config = hf_config(model_type, overrides)
    head, loss = _head_class(tf, config)
    vocab = getattr(config, "vocab_size", None)

    def _finish(model: nn.Module) -> nn.Module:
        # transformers logs a warning inside forward when it cannot name the loss from the
        # class name (GPT2LMHeadModel): a graph break. Name it (the same default loss).
        if loss is not None and getattr(model, "loss_type", "") is None:
            model.loss_type = loss
        return model.train()

    def build(*, batch: int, seq: int, dtype: torch.dtype | None, layers: int | None = None):
        cfg = _with_depth(config, layers)
        try:
            with torch.device("meta"):
                model = head.from_config(cfg)
            if dtype is not None:
                model = model.to(dtype)
        except CliError:
            raise
        except Exception as e:
            raise CliError(
                f"hf:{model_type}: building the model failed: {one_line(e)}", EXIT_MODEL
            ) from None
        model = _finish(model)
        ids = torch.empty((batch, seq), dtype=torch.long, device="meta")
        return Built(model, args=(ids,), kwargs={"labels": ids})

    def materialize(*, batch: int, seq: int, dtype: torch.dtype | None, device="cpu") -> Built:
        model = head.from_config(copy.deepcopy(config)).to(device)
        if dtype is not None:
            model = model.to(dtype)
        model = _finish(model)
        ids = torch.randint(0, int(vocab or 2), (batch, seq), device=device)
        return Built(model, args=(ids,), kwargs={"labels": ids})

    return ModelSource(
        name=f"hf:{model_type}",
        build=build,
        materialize=materialize,
        num_layers=_layer_count(config),
        description=f"{type(config).__name__} ({head.__name__}, vocab {vocab})",
        max_positions=getattr(config, "max_position_embeddings", None),
    )


# --------------------------------------------------------------------------- factories


def _load_factory(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise CliError(f"model {spec!r}: expected package.module:factory", EXIT_USAGE)
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        raise CliError(
            f"cannot import {module_name!r} for {spec!r}: {one_line(e)}", EXIT_MODEL
        ) from None
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            names = [n for n in dir(module) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise CliError(f"module {module_name!r} has no attribute {attr!r}{hint}", EXIT_MODEL)
    if not callable(fn):
        raise CliError(f"{spec!r} is not callable", EXIT_MODEL)
    return fn


def _as_built(spec: str, result: Any) -> Built:
    if not (isinstance(result, tuple | list) and len(result) == 2):
        raise CliError(
            f"factory {spec!r} returned {type(result).__name__}; expected (model, inputs)",
            EXIT_MODEL,
        )
    model, inputs = result
    if not isinstance(model, nn.Module):
        raise CliError(
            f"factory {spec!r} returned a {type(model).__name__} as its model; expected an "
            "nn.Module",
            EXIT_MODEL,
        )
    if isinstance(inputs, Mapping):
        return Built(model, kwargs=dict(inputs))
    if isinstance(inputs, torch.Tensor):
        return Built(model, args=(inputs,))
    if isinstance(inputs, tuple | list):
        return Built(model, args=tuple(inputs))
    raise CliError(
        f"factory {spec!r} returned inputs of type {type(inputs).__name__}; expected a dict, "
        "a tuple or a tensor",
        EXIT_MODEL,
    )


def factory_source(spec: str) -> ModelSource:
    fn = _load_factory(spec)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}

    def build(*, batch: int, seq: int, dtype: torch.dtype | None, layers: int | None = None):
        kwargs = {k: v for k, v in (("batch", batch), ("seq", seq)) if k in params}
        try:
            with torch.device("meta"):
                built = _as_built(spec, fn(**kwargs))
        except CliError:
            raise
        except Exception as e:
            raise CliError(f"factory {spec!r} raised {one_line(e)}", EXIT_MODEL) from None
        if dtype is not None:
            built.model = built.model.to(dtype)
        built.model.train()
        return built

    def materialize(*, batch: int, seq: int, dtype: torch.dtype | None, device="cpu") -> Built:
        kwargs = {k: v for k, v in (("batch", batch), ("seq", seq)) if k in params}
        with torch.device(device):
            built = _as_built(spec, fn(**kwargs))
        if dtype is not None:
            built.model = built.model.to(dtype)
        built.model.train()
        return built

    return ModelSource(
        name=spec,
        build=build,
        num_layers=None,
        description="factory",
        materialize=materialize,
        sizes=tuple(k for k in ("batch", "seq") if k in params),
    )
