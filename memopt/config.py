"""The one frozen config object, and the only module that reads the environment.

Arguments win over environment variables, which win over defaults. ``MemoptConfig.sources``
records where each setting came from so the report can say it.

Environment variables:
``MEMOPT_LEVEL``, ``MEMOPT_CONFIG`` (comma-separated plans or a JSON file path),
``MEMOPT_PROBE_LEVEL``, ``MEMOPT_STRICT``, ``MEMOPT_BUDGET``, ``MEMOPT_DEBUG`` (pipeline timing
logs), ``MEMOPT_CACHE_DIR`` (where reports are persisted for warm compile caches).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from memopt._version import __version__
from memopt.errors import ConfigError
from memopt.plan import PlanSpec, parse_plans, plan_file_settings

_UNSET: Any = object()


#: the source of a setting a budget turned on (``MemoptConfig.sources``)
BY_BUDGET = "default with a budget"


@dataclass(frozen=True, kw_only=True)
class MemoptConfig:
    """Resolved memopt settings. Build with :func:`resolve_config`."""

    level: int = 0
    """0: apply only the explicit plans; 1: also recompute every strategy-1 cluster;
    2: also apply the compromise (strategy-2) clusters."""

    plans: tuple[PlanSpec, ...] = ()
    """Explicit plans (``ClusterId:Strategy:Count``). They win over the level's choices."""

    probe_level: int = 1
    """Allow-list for recompute subgraphs: 0 basic (elementwise, casts, views, gather/slice,
    where, expand, dropout), 1 advanced (also matmuls, norms, softmax)."""

    strict: bool = False
    """Unknown cluster ids in plans raise instead of warning."""

    max_subgraph_nodes: int = 64
    """Cap on the number of ops in one recompute subgraph."""

    max_subgraph_matmuls: int = 1
    """Cap on matmuls in one recompute subgraph (probe level 1): recomputing a chain of
    matmuls costs a whole layer's FLOPs for one tensor's bytes."""

    layers: str | None = None
    """Module-path prefix of the repeated layers (e.g. ``model.layers``); None detects them."""

    offload_layers: int | str | None = None
    """Offload the saved activations of this many layers (activation offload); ``"auto"``:
    a budget's step plan may offload layers compiled as their own regions when that beats
    recomputing (docs/steps.md)."""

    sync: tuple[tuple[int, tuple[bool, int, bool, int]], ...] | None = None
    """Per-layer synchronization dict as sorted items:
    ``layer -> (offload_fwd, offload_num, reload_fwd, reload_num)``."""

    offload_min_bytes: int = 1 << 20
    """Saved tensors smaller than this stay on the GPU when offloading."""

    budget: float | int | None = None
    """Memory budget: a fraction (0, 1] of the baseline saved-activation bytes, or bytes."""

    param_offload: float | int | str | None = None
    """Share in [0, 1] of the parameter bytes whose FSDP2 shards live on the host (layer
    groups first, spread over the depth; see docs/params.md); ``"auto"``: chosen after the
    first steps from the measured step and host rates; bytes (an int above 1 or ``"8GiB"``):
    at most that much of each rank's parameter shards on the device, and more on the host
    when that costs no step time."""

    debug: bool = False
    """Log each pass's time and node-count change."""

    fusion_guard: bool | str = False
    """Inductor refuses horizontal fusions of distant kernels that keep buffers alive longer
    than the planner's model has them (:mod:`memopt._torch_compat.fusion`;
    ``MEMOPT_FUSION_GUARD=1``). ``"auto"``: a region whose compiled plan peaks above the model
    by more than :data:`memopt.regions.GUARD_EXCESS` (Inductor's buffer plan) is compiled again
    with the guard, and the compile that peaks lower is kept. The default with a ``budget``
    (a peak to meet): on an H200 it lowered or matched memopt's peak and kernel time at every
    point measured (Mistral and ConvNeXt at torch's 0.3 and 0.1; ConvNeXt at 0.1 fits only
    with it; docs/zoo.md, forty-second session), at one more compile where a region's plan
    peaked over its model. Else False: the guard alone lowers some compiled peaks and raises
    others (docs/zoo.md, "Inductor's distant fusions")."""

    fuse_loss: bool = False
    """A linear layer feeding ``cross_entropy`` (a language model's head and loss) runs as one
    fused op that computes the loss and the layer's gradients in the forward: the backward
    holds neither the logits nor their float32 softmax (:mod:`memopt.fused_loss`,
    ``passes/fuse_loss.py``; ``MEMOPT_FUSE_LOSS=1``). A loss it cannot fuse is named in a
    warning, with the reason. On by default with a ``budget`` (a peak to meet): at level 0 it
    cost no kernel time and lowered the peak on every model measured (docs/fused_loss.md), and
    a plan that keeps the head's logits away otherwise recomputes the head's matmul; there a
    loss it cannot fuse is said at the info level. Else off: pass ``fuse_loss=True``."""

    disable_passes: tuple[str, ...] = ()
    """Passes switched off by name (``passes/pipeline.py`` lists them), e.g. ``("offload",)``;
    ``MEMOPT_DISABLE_PASSES=offload,apply_recompute``."""

    sources: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    """Where each setting came from: 'argument', 'env:NAME' or 'default'."""

    @property
    def fuse_loss_asked(self) -> bool:
        """Whether the user set ``fuse_loss=True`` (not only a budget's default): then a loss
        it cannot fuse is a warning, and a model with none to fuse is said."""
        return self.fuse_loss and self.sources.get("fuse_loss") != BY_BUDGET

    @property
    def offload_k(self) -> int:
        """The user's fixed ``offload_layers`` (0 for none and for ``"auto"``)."""
        return self.offload_layers if isinstance(self.offload_layers, int) else 0

    @property
    def offload_auto(self) -> bool:
        return self.offload_layers == "auto"

    def plan_strings(self) -> list[str]:
        return [str(p) for p in self.plans]

    def key(self) -> str:
        """A stable string of every setting that changes the compiled graphs."""
        parts = []
        for f in fields(self):
            if f.name in ("sources", "debug"):
                continue
            v = getattr(self, f.name)
            if f.name == "plans":
                v = ",".join(str(p) for p in v)
            parts.append(f"{f.name}={v!r}")
        return ";".join(parts)

    def uuid(self) -> str:
        """Cache key part: memopt's version and source, plus the resolved settings."""
        h = hashlib.sha256(f"memopt-{__version__}|{_source_hash()}|{self.key()}".encode())
        h = h.hexdigest()
        return f"memopt-{__version__}-{h[:24]}"

    def with_(self, **changes: Any) -> MemoptConfig:
        return replace(self, **changes)


@functools.cache
def _source_hash() -> str:
    """Hash of memopt's own source files: a code change must not reuse cached graphs."""
    import memopt
    import memopt.passes

    h = hashlib.sha256()
    for pkg in (memopt, memopt.passes):
        root = os.path.dirname(pkg.__file__)
        for dirpath, dirnames, files in sorted(os.walk(root)):
            dirnames.sort()
            for f in sorted(files):
                if f.endswith(".py"):
                    with open(os.path.join(dirpath, f), "rb") as fh:
                        h.update(f.encode() + b"\0" + fh.read())
    return h.hexdigest()[:16]


def _env(name: str) -> str | None:
    v = os.environ.get(name)
    return v if v is not None and v.strip() != "" else None


def _int_setting(name: str, value: Any, allowed: Iterable[int]) -> int:
    if isinstance(value, bool):  # True is an int to Python, not a level to a user
        raise ConfigError(f"{name}={value!r} is not an integer; allowed: {sorted(allowed)}")
    try:
        iv = int(value)
        if str(value).strip() != str(iv) and not isinstance(value, int):
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(
            f"{name}={value!r} is not an integer; allowed: {sorted(allowed)}"
        ) from None
    if iv not in set(allowed):
        raise ConfigError(f"{name}={iv} is out of range; allowed: {sorted(allowed)}")
    return iv


def _bool_setting(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={value!r} is not a boolean (use 0/1)")


def _guard_setting(name: str, value: Any) -> bool | str:
    if str(value).strip().lower() == "auto":
        return "auto"
    try:
        return _bool_setting(name, value)
    except ConfigError:
        raise ConfigError(f"{name}={value!r} is not 0, 1 or 'auto'") from None


def parse_budget(name: str, value: Any) -> float | int:
    """A budget: a fraction in (0, 1], a byte count, or a size string like '10GiB'."""
    if isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is not a budget")
    if isinstance(value, int | float):
        num = value
    else:
        s = str(value).strip()
        units = {
            "kib": 2**10,
            "mib": 2**20,
            "gib": 2**30,
            "tib": 2**40,
            "kb": 10**3,
            "mb": 10**6,
            "gb": 10**9,
            "tb": 10**12,
            "b": 1,
        }
        low = s.lower()
        for u, mult in units.items():
            if low.endswith(u):
                try:
                    nbytes = int(float(low[: -len(u)]) * mult)
                except ValueError:
                    raise ConfigError(
                        f"{name}={value!r}: cannot read the number before {u!r}"
                    ) from None
                if nbytes < 1:
                    raise ConfigError(f"{name}={value!r} must be at least one byte")
                return nbytes
        try:
            num = float(s) if "." in s or "e" in low else int(s)
        except ValueError:
            raise ConfigError(
                f"{name}={value!r} is not a budget: use a fraction like 0.4, bytes, or '10GiB'"
            ) from None
    if num <= 0:
        raise ConfigError(f"{name}={value!r} must be positive")
    if isinstance(num, float) and num > 1:
        raise ConfigError(
            f"{name}={value!r}: a fractional budget must be in (0, 1]; bytes are integers"
        )
    return num


def parse_param_offload(name: str, value: Any) -> float | int | str:
    """``param_offload``: a share in [0, 1] (float), ``"auto"``, or bytes (int above 1, or a
    size string like ``"8GiB"``)."""
    hint = "use a share in [0, 1], 'auto', or the parameter bytes to keep on the device ('8GiB')"
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{name}={value!r} is not a parameter offload setting: {hint}")
    if isinstance(value, str):
        try:
            value = parse_budget(name, value)
        except ConfigError as e:
            raise ConfigError(f"{e}; {hint}") from None
    if isinstance(value, int) and value > 1:
        return value
    if not 0 <= value <= 1:
        raise ConfigError(f"{name}={value!r} must be a number in [0, 1]; {hint}")
    return float(value)


def _passes(name: str, value: Any) -> tuple[str, ...]:
    """Pass names from a comma-separated string or a sequence of strings, checked."""
    from memopt.passes.pipeline import check_disabled

    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple | set | frozenset) or not all(
        isinstance(x, str) for x in items
    ):
        raise ConfigError(f"{name}={value!r}: expected pass names (a list, or comma-separated)")
    names = tuple(sorted({x.strip() for x in items if x.strip()}))
    check_disabled(names)
    return names


def _normalize_sync(value: Any) -> tuple | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigError(
            "sync must be a dict {layer: (offload_fwd, offload_num, reload_fwd, reload_num)}"
        )
    items = []
    for k, v in value.items():
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise ConfigError(f"sync: key {k!r} is not a layer index (a non-negative int)")
        if not (isinstance(v, tuple | list) and len(v) == 4):
            raise ConfigError(
                f"sync[{k}]={v!r}: expected (offload_fwd: bool, offload_num: int, "
                "reload_fwd: bool, reload_num: int)"
            )
        of, on, rf, rn = v
        if not isinstance(of, bool) or not isinstance(rf, bool):
            raise ConfigError(f"sync[{k}]={v!r}: offload_fwd and reload_fwd must be bools")
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in (on, rn)):
            raise ConfigError(f"sync[{k}]={v!r}: offload_num and reload_num must be ints >= 0")
        items.append((k, (of, on, rf, rn)))
    return tuple(sorted(items))


def resolve_config(
    *,
    level: Any = _UNSET,
    config: Any = _UNSET,
    probe_level: Any = _UNSET,
    strict: Any = _UNSET,
    budget: Any = _UNSET,
    **others: Any,
) -> MemoptConfig:
    """Combine arguments (None or unset means "not given"), environment and defaults."""
    sources: dict[str, str] = {}
    values: dict[str, Any] = {}

    def pick(name: str, arg: Any, env_name: str | None, conv):
        if arg is not _UNSET and arg is not None:
            values[name] = conv(name, arg)
            sources[name] = "argument"
        elif env_name and _env(env_name) is not None:
            values[name] = conv(env_name, _env(env_name))
            sources[name] = f"env:{env_name}"
        else:
            sources[name] = "default"

    pick("level", level, "MEMOPT_LEVEL", lambda n, v: _int_setting(n, v, (0, 1, 2)))
    pick("plans", config, "MEMOPT_CONFIG", lambda n, v: parse_plans(v))
    pick("probe_level", probe_level, "MEMOPT_PROBE_LEVEL", lambda n, v: _int_setting(n, v, (0, 1)))
    pick("strict", strict, "MEMOPT_STRICT", _bool_setting)
    pick("budget", budget, "MEMOPT_BUDGET", parse_budget)
    pick("debug", None, "MEMOPT_DEBUG", _bool_setting)
    pick("fusion_guard", others.pop("fusion_guard", None), "MEMOPT_FUSION_GUARD", _guard_setting)
    pick("disable_passes", others.pop("disable_passes", None), "MEMOPT_DISABLE_PASSES", _passes)
    pick("fuse_loss", others.pop("fuse_loss", None), "MEMOPT_FUSE_LOSS", _bool_setting)
    if sources["fusion_guard"] == "default" and values.get("budget") is not None:
        values["fusion_guard"] = "auto"  # a budget is a peak: see the setting's docstring
        sources["fusion_guard"] = BY_BUDGET
    if sources["fuse_loss"] == "default" and values.get("budget") is not None:
        values["fuse_loss"] = True  # a budget is a peak: see the setting's docstring
        sources["fuse_loss"] = BY_BUDGET

    # a frozen budget plan file ({"config": [...], "sync": {...}, "offload_layers": k}) brings
    # its sync dict and the step plan's offload along, unless given as arguments
    plan_source = config if config is not _UNSET and config is not None else _env("MEMOPT_CONFIG")
    from_file: dict[str, Any] = {}
    for name, v in plan_file_settings(plan_source).items():
        if others.get(name) is not None:
            continue
        try:
            if name == "sync":
                if isinstance(v, Mapping):  # JSON keys are strings
                    v = {
                        int(k) if isinstance(k, str) and k.isdigit() else k: x for k, x in v.items()
                    }
                v = _normalize_sync(v)
            else:
                v = _offload_layers(v)
        except ConfigError as e:
            raise ConfigError(f"plan file {plan_source!r}: {e}") from None
        from_file[name] = v

    known = {f.name for f in fields(MemoptConfig)} - {"sources"}
    for name, v in others.items():
        if name not in known:
            raise ConfigError(f"unknown memopt setting {name!r}; known: {sorted(known)}")
        if v is None:
            sources[name] = "default"
            continue
        if name == "sync":
            v = _normalize_sync(v)
        elif name == "offload_layers":
            v = _offload_layers(v)
        elif name in ("max_subgraph_nodes", "max_subgraph_matmuls", "offload_min_bytes"):
            if not isinstance(v, int) or v < 0:
                raise ConfigError(f"{name}={v!r} must be an int >= 0")
        elif name == "param_offload":
            v = parse_param_offload(name, v)
        elif name == "layers" and not isinstance(v, str):
            raise ConfigError(f"layers={v!r} must be a module-path prefix string")
        values[name] = v
        sources[name] = "argument"
    for name, v in from_file.items():
        values[name] = v
        sources[name] = f"plan file ({sources['plans']})"
    for name in known:
        sources.setdefault(name, "default")
    if values.get("offload_layers") == "auto" and values.get("budget") is None:
        raise ConfigError(
            "offload_layers='auto' lets a budget's step plan choose how many layers to "
            "offload; pass budget= too (or a number of layers)"
        )
    if values.get("offload_layers") == "auto" and values.get("sync"):
        raise ConfigError(
            "offload_layers='auto' and a sync dict both set: the sync dict fixes which layers "
            "offload, so the step plan could not choose; pass one of them"
        )
    return MemoptConfig(**values, sources=sources)


def _offload_layers(v: Any) -> int | str:
    if isinstance(v, str) and v.strip().lower() == "auto":
        return "auto"
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ConfigError(f"offload_layers={v!r} must be an int >= 0 or 'auto'")
    return v


def write_atomic(path: str, data: bytes | str) -> None:
    """Write ``path`` whole or not at all (a temporary file renamed over it): processes that
    share memopt's caches never read half a file. Makes the directory."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


def cache_dir() -> str:
    """Directory where memopt persists per-graph reports (for warm compile caches)."""
    d = _env("MEMOPT_CACHE_DIR")
    if d is None:
        base = _env("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "memopt")
    return d
