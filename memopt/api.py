"""Public entry points: ``optimize``, ``report`` and the ``"memopt"`` torch.compile backend."""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from memopt import _torch_compat as compat
from memopt.config import MemoptConfig, resolve_config
from memopt.errors import ConfigError
from memopt.passes.plan_budget import agree_device_rates
from memopt.plan import Strategy
from memopt.regions import RegionProgram
from memopt.report import Report
from memopt.state import MemoptState

_STATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_BACKEND_STATE: dict[str, MemoptState] = {}


class MemoptBackend:
    """A torch.compile backend: Inductor with memopt's partitioner."""

    def __init__(
        self,
        config: MemoptConfig,
        state: MemoptState | None = None,
        inductor: dict[str, Any] | None = None,
    ):
        self.config = config
        self.state = state or MemoptState(config)
        self.inductor = dict(inductor or {})  # Inductor settings (torch.compile's mode, options)

    def __call__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        mode: str | None = None,
        options: dict[str, Any] | None = None,
    ):
        # torch.compile(..., backend=<this>, mode=..., options=...) hands them over here
        patches = {**self.inductor, **inductor_settings(mode, options)}
        note = cudagraphs_note(patches, example_inputs)
        if note is not None:
            self.state.cuda_graphs = True  # its peaks are no longer read (memopt.state)
        self.state._say("cudagraphs", note)
        if note is not None:
            self.state._say("cudagraphs offload", cudagraphs_offload_note(self.config))
        self.state.note_graph(gm, example_inputs)
        return RegionProgram(self.config, self.state, gm, example_inputs, patches)

    def __deepcopy__(self, memo: dict) -> MemoptBackend:
        # frameworks deep-copy torch.compile's arguments (Lightning): the state is shared
        return self


def _env_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **compile_kw: Any):
    """``torch.compile(model, backend="memopt")``: settings from the environment (``mode=``
    and ``options=`` are torch.compile's)."""
    config = resolve_config()
    state = _BACKEND_STATE.get(config.uuid())
    if state is None:
        state = _BACKEND_STATE[config.uuid()] = MemoptState(config)
    return MemoptBackend(config, state)(gm, example_inputs, **compile_kw)


_CUDAGRAPHS = (
    "CUDA graphs are on (torch.compile's mode= or options=): memopt plans and applies as without "
    "them, except that a budget recomputes and does not offload (offloaded tensors come back "
    "as copies in the graphs' pool); its predicted peaks count the graphs' copies of the "
    "backward's incoming gradients but not the segments their private memory pools keep, and "
    "a budget is planned from predictions only: a replayed graph allocates nothing, so the "
    "allocator's peaks cannot correct the plan; mode='max-autotune-no-cudagraphs' keeps the "
    "autotuning without them"
)

#: Measured on an H100 (torch 2.11; docs/benchmarks.md, fifty-eighth session): the zoo Llama
#: (8 layers, hidden 2048, bf16, 4 x 2048) under mode="reduce-overhead" with offload_layers=4
#: moved 2.18 GB to the host and reserved 7.95 GB, against torch.compile's 7.87 GB alone.
_CUDAGRAPHS_OFFLOAD = (
    "{asked} under CUDA graphs saves little or no GPU memory: each reloaded tensor is an input "
    "of a captured partition made outside it, which cudagraph trees copy into their pool, and "
    "the copies are allocated beside it (on an H100 the 8-layer Llama offloaded 2.18 GB with "
    "offload_layers=4 and reserved 7.95 GB, against 7.87 GB for torch.compile alone); "
    "recompute (level= or budget=) lowers the peak under CUDA graphs, or compile with "
    "mode='max-autotune-no-cudagraphs' to keep the offload"
)


def cudagraphs_offload_note(config: MemoptConfig) -> str | None:
    """The note for an offload setting the user gave with CUDA graphs on (None without one;
    ``offload_layers="auto"`` is the planner's, which does not offload under CUDA graphs)."""
    offloads = [str(p) for p in config.plans if p.strategy == Strategy.OFFLOAD]
    if config.offload_k:
        asked = f"offload_layers={config.offload_k}"
    elif config.sync:
        asked = "the sync dict"
    elif offloads:
        asked = "offload plan string(s) " + ", ".join(offloads)
    else:
        return None
    return _CUDAGRAPHS_OFFLOAD.format(asked=asked)


def cudagraphs_note(patches: dict[str, Any], example_inputs: Sequence[Any]) -> str | None:
    """The note for a region Inductor compiles with CUDA graphs (None on the CPU, where
    Inductor makes none)."""
    cuda = any(isinstance(x, torch.Tensor) and x.is_cuda for x in example_inputs)
    return _CUDAGRAPHS if cuda and patches.get("triton.cudagraphs") else None


#: torch.compile's own keys in ``options=`` (not Inductor settings).
_COMPILE_OPTION_KEYS = frozenset({"guard_filter_fn", "use_aoti"})


def inductor_settings(mode: str | None, options: dict[str, Any] | None) -> dict[str, Any]:
    """The Inductor settings torch.compile's ``mode=`` / ``options=`` ask for, checked (a
    :class:`ConfigError` naming an unknown mode or setting). Inductor compiles every region
    with them, as torch.compile's own backend would."""
    if mode is not None and options is not None:
        raise ConfigError("memopt.optimize: give torch.compile's mode= or options=, not both")
    out: dict[str, Any] = {}
    if mode not in (None, "default"):
        try:
            out.update(compat.inductor_mode_options(mode))
        except ValueError as e:
            raise ConfigError(f"memopt.optimize: mode={mode!r}: {e}") from None
    if options is not None and not isinstance(options, dict):
        raise ConfigError(f"memopt.optimize: options= takes a dict, got {type(options).__name__}")
    names = compat.inductor_setting_names()
    for key, value in (options or {}).items():
        if key in _COMPILE_OPTION_KEYS:
            continue
        name = str(key).replace("-", "_")
        if name not in names:
            import difflib

            close = difflib.get_close_matches(name, sorted(names), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"memopt.optimize: options: {key!r} is no Inductor setting{hint}")
        out[name] = value
    return out


compat.register_backend("memopt", _env_backend)


def optimize(
    model: torch.nn.Module,
    *,
    level: int | None = None,
    config: str | Sequence[str] | None = None,
    probe_level: int | None = None,
    dynamic: bool | None = None,
    strict: bool | None = None,
    budget: float | int | str | None = None,
    device: torch.device | str | None = None,
    **kwargs: Any,
) -> torch.nn.Module:
    """Compile ``model`` with torch.compile (Inductor) and memopt's memory plan.

    Arguments win over ``MEMOPT_*`` environment variables. ``config`` takes plan strings
    (``"BiasGelu+:1:-1"``, a comma-separated string, a list, or a JSON file path). Other keyword
    arguments that are memopt settings (see :class:`memopt.config.MemoptConfig`) are applied;
    the rest go to ``torch.compile`` (``fullgraph=`` ...). torch.compile's ``mode=`` and
    ``options=`` are Inductor settings: every region compiles with them (checked here; CUDA
    graphs are applied but not yet measured with memopt's plans, and said).

    ``param_offload=f`` keeps that share of the parameter bytes on the host through FSDP2
    (docs/params.md): each layer is ``fully_shard``-ed with a host or device offload policy (a
    model already sharded keeps its groups; a world-size-1 process group is created when none
    exists, its backend from ``device``; ``mp_policy=`` goes to ``fully_shard``; ``host_dtype=``
    to :func:`memopt.params.shard_with_offload`: ``"auto"`` for bf16 host shards with fp32
    masters at world size 1 under a bf16 ``mp_policy``; the default keeps the model's dtype).
    Train with
    ``memopt.HostAdamW(model.parameters(), offload=memopt.param_offload_handle(model))``.
    ``param_offload="auto"`` or bytes (``"8GiB"``: at most that much of each rank's parameter
    shards on the device) let HostAdamW choose the share after the first steps from the
    measured step and the host's measured rates (``host_rates=memopt.params.HostRates(...)``
    gives them instead of measuring).
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"memopt.optimize expects a torch.nn.Module, got {type(model).__name__}")
    settings = {k: kwargs.pop(k) for k in list(kwargs) if k in _SETTING_NAMES}
    given = {k for k in ("host_dtype", "mp_policy", "host_rates") if kwargs.get(k) is not None}
    mp_policy = kwargs.pop("mp_policy", None)  # FSDP2's, for param_offload
    host_rates = kwargs.pop("host_rates", None)  # memopt.params.HostRates, for "auto"
    host_dtype = kwargs.pop("host_dtype", None)  # shard_with_offload's, for param_offload
    _check_compile_kwargs(kwargs)
    cfg = resolve_config(
        level=level,
        config=config,
        probe_level=probe_level,
        strict=strict,
        budget=budget,
        **settings,
    )
    model_layers = _check_layers(model, cfg)
    for name, value in (
        ("host_dtype", host_dtype),
        ("mp_policy", mp_policy),
        ("host_rates", host_rates),
    ):
        if name in given and not cfg.param_offload:
            raise ConfigError(f"{name}={value!r} applies to param_offload, which is not set")
    state = MemoptState(cfg)
    state.model_layers = model_layers
    if cfg.param_offload:
        from memopt.params import offload_parameters

        state.param_handle = offload_parameters(
            model,
            cfg.param_offload,
            layers_prefix=cfg.layers,
            device=device,
            mp_policy=mp_policy,
            rates=host_rates,
            host_dtype=host_dtype,
        )
    agree_device_rates()  # at world size > 1: every rank plans with the same rates
    inductor = inductor_settings(kwargs.pop("mode", None), kwargs.get("options"))
    own = {
        k: v for k, v in (kwargs.pop("options", None) or {}).items() if k in _COMPILE_OPTION_KEYS
    }
    if own:
        kwargs["options"] = own  # torch.compile's own (guard_filter_fn)
    backend = MemoptBackend(cfg, state, inductor)
    compiled = torch.compile(model, backend=backend, dynamic=dynamic, **kwargs)
    _errors_first(compiled, debug=cfg.debug)
    _keep_signature(compiled, model)
    # eager, before the compiled code: what of the step is no activation (its batch, weights)
    compiled.register_forward_pre_hook(state.note_step_inputs, with_kwargs=True)
    compiled.register_forward_hook(state.check_coverage)  # a note when nothing compiled
    _STATES[compiled] = state
    _STATES[model] = state
    return compiled


_SETTING_NAMES = frozenset(
    {
        "max_subgraph_nodes",
        "max_subgraph_matmuls",
        "param_offload",
        "layers",
        "offload_layers",
        "sync",
        "offload_min_bytes",
        "disable_passes",
        "fusion_guard",
        "fuse_loss",
    }
)


def _errors_first(compiled: torch.nn.Module, debug: bool) -> None:
    """A memopt error that only the compile can find (an unknown cluster id under
    ``strict``, a sync entry the graph's layers cannot take) comes out of the compiled
    model's call as itself (a :class:`memopt.ConfigError`), not inside dynamo's
    ``BackendCompilerFailed`` (with ``debug``, dynamo's frames stay chained to it)."""
    fwd = getattr(compiled, "forward", None)
    if not callable(fwd):
        return

    def forward(*args: Any, **kwargs: Any) -> Any:
        try:
            return fwd(*args, **kwargs)
        except Exception as e:
            inner = compat.unwrap_backend_error(e)
            if inner is e or not isinstance(inner, ConfigError):
                raise
            if debug:
                raise inner from e
            raise inner from None

    try:
        compiled.forward = forward
    except (AttributeError, TypeError):
        pass  # a torch whose compiled module takes no attributes: dynamo's wrapper stays


def _keep_signature(compiled: torch.nn.Module, model: torch.nn.Module) -> None:
    """``inspect.signature(compiled.forward)`` is the model's own (the HF Trainer drops every
    dataset column that the forward's signature does not name)."""
    fwd = getattr(compiled, "forward", None)
    if callable(fwd) and not inspect.ismethod(fwd):
        try:
            fwd.__wrapped__ = model.forward
        except (AttributeError, TypeError):
            pass  # a torch whose compiled forward takes no attributes: signature stays generic


def _layer_containers(model: torch.nn.Module) -> dict[str, int]:
    """Containers of repeated layers (a ModuleList / Sequential / ModuleDict of two or more
    children of one class, as torchtitan's ``layers``): normalized path -> size. Where some
    containers hold layers with submodules of their own, containers of bare modules are heads
    (DETR's box predictor, three ``nn.Linear``: sweep 7) and are left out."""
    from memopt.passes.detect_layers import normalize_module_path

    out, composite = {}, set()
    for name, mod in model.named_modules():
        kinds = torch.nn.ModuleList | torch.nn.Sequential | torch.nn.ModuleDict
        if isinstance(mod, kinds) and len(mod) >= 2:
            children = list(mod.values() if isinstance(mod, torch.nn.ModuleDict) else mod)
            if len({type(c) for c in children}) == 1:
                out[path := normalize_module_path(name)] = len(mod)
                if next(children[0].children(), None) is not None:
                    composite.add(path)
    return {k: v for k, v in out.items() if k in composite} if composite else out


def _layer_stacks(model: torch.nn.Module, layers: str | None = None):
    """The containers whose children are the model's layers (normalized paths), their layer
    count, and every container found, listed for messages."""
    from memopt.passes.detect_layers import normalize_module_path

    found = _layer_containers(model)
    listed = ", ".join(f"{k} ({v})" for k, v in sorted(found.items())) or "none"
    outer = {k: v for k, v in found.items() if not any(k.startswith(o + ".") for o in found)}
    if layers is not None:
        path = normalize_module_path(layers)
        if path not in found:
            raise ConfigError(
                f"layers={layers!r} is no ModuleList/Sequential of repeated layers of this "
                f"model; its layer containers (with their sizes): {listed}"
            )
        return [path], found[path], listed, outer
    if not found:
        return [], 0, listed, outer
    # the outermost containers; the layers are those named as the one holding the most
    # parameters (ties: the most children), not simply the longest list: SAM's four mask
    # heads outnumber its two encoder layers (sweep 8)
    modules = dict(model.named_modules())

    def weight(path: str) -> tuple[int, int]:
        return _stack_weight(modules, path), outer[path]

    name = max(outer, key=weight).rsplit(".", 1)[-1]
    stacks = [k for k in outer if k.rsplit(".", 1)[-1] == name]
    return stacks, sum(outer[k] for k in stacks), listed, outer


def _stack_weight(modules: dict[str, torch.nn.Module], path: str) -> int:
    """Parameters held by the layers of the container at ``path``."""
    return sum(p.numel() for _, m in _children(modules, path) for p in m.parameters())


def model_layers(model: torch.nn.Module, layers: str | None = None) -> list[torch.nn.Module]:
    """The model's layers in forward order, as ``offload_layers`` and the sync dict number
    them (``layers``: the container's path, as the setting of that name)."""
    stacks = _layer_stacks(model, layers)[0]
    modules = dict(model.named_modules())
    return [m for path in stacks for _, m in _children(modules, path)]


def _check_layers(model: torch.nn.Module, cfg: MemoptConfig) -> tuple[str, ...]:
    """What can be checked against the model's layers before anything compiles: the
    ``layers=`` path, ``offload_layers`` and the sync dict's layer indices. Returns the model's
    layers (normalized paths, the numbering ``offload_layers`` and the sync dict use; whether
    they compiled is checked after the first forward, :mod:`memopt.coverage`), () when it has
    no container of repeated layers."""
    stacks, n, listed, outer = _layer_stacks(model, cfg.layers)
    if not stacks:
        return ()  # no container: the step tells whether layers compile as regions
    if cfg.offload_k and cfg.offload_k >= n:
        raise ConfigError(
            f"offload_layers={cfg.offload_layers} must be below the number of layers ({n}: "
            "the last layer's activations are needed as soon as its forward ends); layer "
            f"containers: {listed}"
        )
    bad = sorted(k for k, _ in cfg.sync or () if not 0 <= k < n)
    if bad:
        raise ConfigError(
            f"sync: layer(s) {', '.join(map(str, bad))} outside 0..{n - 1} (the model has "
            f"{n} layers; containers: {listed})"
        )
    if cfg.sync and (cfg.layers is not None or len(stacks) == len(outer)):
        from memopt.offload.sync import build_schedule

        build_schedule(dict(cfg.sync), n)  # SyncError names the layer that cannot be scheduled
    modules = dict(model.named_modules())
    if (cfg.offload_layers or cfg.sync) and cfg.layers is None:
        _warn_left_out(modules, stacks, outer)
    return tuple(f"{path}.{child}" for path in stacks for child, _ in _children(modules, path))


def _warn_left_out(modules: dict[str, torch.nn.Module], stacks: list[str], outer: dict) -> None:
    """Another stack of repeated layers, named otherwise and holding at least a quarter of the
    chosen stacks' parameters (CLAP's audio tower beside its text tower, sweep 8), is not
    numbered by ``offload_layers`` or the sync dict: say so (small heads stay quiet)."""
    import warnings

    chosen = sum(_stack_weight(modules, p) for p in stacks)
    left = [p for p in outer if p not in stacks and 4 * _stack_weight(modules, p) >= chosen]
    if left:
        warnings.warn(
            f"memopt: offload_layers and the sync dict number the layers of "
            f"{', '.join(stacks)}; the other stack(s) of repeated layers "
            f"{', '.join(f'{p} ({outer[p]})' for p in sorted(left))} are not offloaded "
            f"(pass layers= to number another stack instead)",
            stacklevel=4,
        )


def _children(modules: dict[str, torch.nn.Module], path: str) -> list[tuple[str, Any]]:
    """The named children of the layer container at normalized ``path``."""
    from memopt.passes.detect_layers import normalize_module_path

    for name, mod in modules.items():
        if normalize_module_path(name) == path:
            return list(mod.named_children())
    return []


def _check_compile_kwargs(kwargs: dict[str, Any]) -> None:
    """Keyword arguments that are neither memopt settings nor torch.compile's: a typo."""
    import difflib

    allowed = set(inspect.signature(torch.compile).parameters) - {"model", "backend", "dynamic"}
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        names = sorted(_SETTING_NAMES | {"level", "config", "probe_level", "strict", "budget"})
        close = difflib.get_close_matches(unknown[0], names + sorted(allowed), n=1)
        raise ConfigError(
            f"memopt.optimize: unknown keyword argument(s) {', '.join(unknown)}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; memopt settings: {', '.join(names)}; torch.compile's: {', '.join(sorted(allowed))}"
        )


def param_offload_handle(model: torch.nn.Module):
    """The parameter-offload handle :func:`optimize` installed (None without param_offload)."""
    state = _STATES.get(model)
    return None if state is None else state.param_handle


def report(model: torch.nn.Module | None = None, *, optimizer: Any = None) -> Report:
    """The plan report of a model returned by :func:`optimize` (or, with no model or a model
    compiled with ``backend="memopt"``, of the environment-configured backend). Pass the
    ``memopt.HostAdamW`` optimizer to add its state placement."""
    state = _STATES.get(model) if model is not None else None
    if state is None:
        if model is not None and not _BACKEND_STATE:
            raise ValueError(
                "memopt.report: this model was not compiled by memopt.optimize or "
                "torch.compile(..., backend='memopt') (or it has not run yet)"
            )
        cfg = resolve_config()
        state = _BACKEND_STATE.get(cfg.uuid()) or MemoptState(cfg)
    return state.report(optimizer=optimizer)
