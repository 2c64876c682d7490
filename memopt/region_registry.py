"""The compiled regions memopt planned for one optimized model: each graph's report and
planning problem, in compile order, registered as the partitioner plans them and restored from
the report cache on a compile-cache hit (the partitioner did not run). :class:`MemoptState`
(``memopt.state``) adds the training step they make."""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch
import torch.fx

from memopt import _torch_compat as compat
from memopt import coverage, ranks, report_cache
from memopt.config import MemoptConfig
from memopt.planner import progress as planner_progress
from memopt.report import RegionReport
from memopt.step_report import CALL_TENSOR, OUTPUT, PER_RUN, SHARED

log = logging.getLogger("memopt")


class RegionRegistry:
    """The regions compiled for one optimized model (or for the ``"memopt"`` backend)."""

    def __init__(self, config: MemoptConfig):
        self.config = config
        self.regions: list[RegionReport] = []
        self.graphs_seen = 0  # graphs Dynamo handed the backend (memopt.coverage)
        self._coverage_checked = False
        self.coverage_notes: list[str] = []  # what the report says when nothing compiled
        self.compiled_paths: set[str] = set()  # module paths in graphs Dynamo handed over
        self.compiled_storages: set[Any] = set()  # storages their compiles and runs read
        self.problems: dict[int, Any] = {}  # region index -> plan_budget.RegionProblem
        self._retimers: dict[int, Callable] = {}  # region index -> its BudgetResult.retime
        self._keys: dict[int, str] = {}  # region index -> its persist key (report_cache)
        # (index, id(report), id(option)) -> (report, option, compiled_as): asked every run
        self._compiled: dict[tuple[int, int, int], tuple[Any, Any, bool]] = {}
        self._lock = threading.Lock()
        self._pending: tuple[str, int | None] | None = None  # (persist key, index to replace)
        self._hits = 0  # compile-cache hits as the region began (compat.compile_cache_hits)
        self.last_key: str | None = None  # the persist key of the graph compiled last
        self._ran = False
        # storages of the optimized model's latest call's tensors, and the model
        # (note_step_inputs); None where no such call is seen (blocks compiled alone)
        self.step_inputs: set | None = None
        self._model: weakref.ref | None = None
        self._input_ids: dict[Any, int] = {}  # storage -> its number in the step (run_input_keys)
        # per run of the step under way and of the last one: its saved inputs' storages
        # (run_input_keys) and its symbols' sizes (dynamic regions)
        self.run_inputs: tuple[list[tuple], list[tuple]] = ([], [])
        self.run_sizes: tuple[list[tuple], list[tuple]] = ([], [])
        # per run of the step under way and of the last one: the model layers whose weights
        # its arguments are (memopt.step_layers.layers_read); their storages, once known
        self.run_layers: tuple[list[frozenset], list[frozenset]] = ([], [])
        self._layer_of: dict[Any, int] | None = None
        # the same by the weight objects themselves (a run's arguments are mostly these:
        # a dict lookup per argument, not a storage's identity built on the hot path)
        self._layer_by_id: dict[int, tuple[weakref.ref, int]] = {}

    def begin_region(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        *,
        context: str = "",
        index: int | None = None,
    ) -> None:
        """A graph is about to compile (``index``: its report replaces that region's)."""
        key = report_cache.graph_key(self.config.uuid(), context, gm.code, example_inputs)
        self._pending = (key, index)
        self._ran = False
        self._hits = compat.compile_cache_hits()

    def add_region(
        self, region: RegionReport, problem: Any = None, retime: Callable | None = None
    ) -> None:
        """The partitioner planned a region (``problem``: its plan_budget.RegionProblem;
        ``retime``: its kernels without room to be timed yet, see :meth:`retime`)."""
        index = self._pending[1] if self._pending else None
        with self._lock:
            if index is None:
                region.index = len(self.regions)
                self.regions.append(region)
            else:
                region.index = index
                self.regions[index] = region
            if problem is not None:
                self.problems[region.index] = problem
                self._retimers.pop(region.index, None)
            if retime is not None:
                self._retimers[region.index] = retime
            self._ran = True
        planner_progress.traced()
        if self._pending is not None:
            self._keys[region.index] = self._pending[0]
            report_cache.store(self._pending[0], region, problem)

    def save_region(self, index: int) -> tuple:
        """What region ``index``'s compile left (report, problem, kernel re-timer, cache key),
        for :meth:`restore_region` after a compile that replaces it is not kept."""
        with self._lock:
            return (
                index,
                self.regions[index],
                self.problems.get(index),
                self._retimers.get(index),
                self._keys.get(index),
            )

    def restore_region(self, saved: tuple) -> None:
        index, region, problem, retime, key = saved
        with self._lock:
            self.regions[index] = region
            for table, value in ((self.problems, problem), (self._retimers, retime)):
                table.pop(index, None)
                if value is not None:
                    table[index] = value
            if key is not None:
                self._keys[index] = key

    def compiled_as(self, index: int, option: Any) -> bool:
        """Whether region ``index``'s compiled plan (its report's frozen plan) is the step
        option ``option`` (a ``memopt.step.Option``): its run needs no variant. Asked at every
        run, so remembered per report and option (held here, so their ids stay theirs)."""
        rep = self.regions[index]
        key = (index, id(rep), id(option))
        hit = self._compiled.get(key)
        if hit is None:
            frozen = rep.extra.get("frozen") or {}
            sync = {int(k): tuple(v) for k, v in (frozen.get("sync") or {}).items()}
            same_sync = sync == {int(k): tuple(v) for k, v in option.sync.items()}
            same = set(frozen.get("config", ())) == set(option.plans) and same_sync
            if len(self._compiled) > 4096:
                self._compiled.clear()
            hit = self._compiled[key] = (rep, option, same)
        return hit[2]

    def retime(self, indices: Collection[int]) -> list[int]:
        """Between steps: time the kernels that had no room as these regions compiled, and
        price their problems with them (the step plan's menus). At world size 1 only: ranks
        must plan from the same times. The regions whose problems changed."""
        if ranks.world_size() > 1:
            return []
        done, t0 = [], time.perf_counter()
        for i in sorted(indices):
            f, rp = self._retimers.get(i), self.problems.get(i)
            new = f(rp) if f is not None and rp is not None else None
            if new is not None:
                self.problems[i] = new
                done.append(i)
                if i in self._keys:  # a warm cache plans the step from these prices too
                    report_cache.store_problem(self._keys[i], new)
        if done:
            log.info("memopt kernel times: region(s) %s re-priced with kernels timed after "
                     "the step (no room while it ran), in %.1f s", done,
                     time.perf_counter() - t0)  # fmt: skip
        return done

    def end_region(self, example_inputs: Sequence[Any]) -> int | None:
        """After compile_fx returned: the region's index, or None for a graph without a
        backward. On a cache hit (the partitioner did not run) the stored report comes back."""
        pending, self._pending = self._pending, None
        self.last_key = pending[0] if pending is not None else None
        if self._ran:
            return self.regions[-1].index if pending[1] is None else pending[1]
        if pending is None or not _trains(example_inputs):
            return None
        if compat.compile_cache_hits() == self._hits:
            return None  # no cache hit: no output needs a gradient (an argmin, a top-k index)
        region, problem = report_cache.load(pending[0])
        if region is None:
            log.warning(
                "memopt: a compile-cache hit skipped the partitioner and no stored report was "
                "found for this graph; the plan was applied but the report lacks this region"
            )
            return None
        region.from_cache = True
        for w in region.warnings:  # a wrong setting must not go quiet on a warm cache
            log.warning("memopt: %s", w)
        self._pending = pending
        self.add_region(region, problem)
        self._pending = None
        return region.index

    def check_coverage(self, module: torch.nn.Module, args: Any, output: Any) -> Any:
        """Forward hook of the optimized model: after its first forward that trains, a note
        when torch.compile compiled nothing of it that trains (:mod:`memopt.coverage`)."""
        if self._coverage_checked or not coverage.trains(output):
            return None
        self._coverage_checked = True
        model = self._model() if self._model is not None else module
        model = getattr(model, "_orig_mod", model)  # the user's model, not dynamo's wrapper
        note = coverage.nothing_compiled(model, self.graphs_seen, len(self.regions), self.config)
        if note is not None:
            self._coverage_note(note)
        else:
            layers = getattr(self, "model_layers", ())
            paths, storages = self.compiled_paths, self.compiled_storages
            watch = coverage.uncompiled_layers(model, layers, paths, storages, _real_storage)
            if watch:
                self._watch_eager_layers(model, layers, watch, output)
        self.compiled_paths, self.compiled_storages = set(), set()
        if self.config.fuse_loss_asked and not any("fused_loss" in r.extra for r in self.regions):
            if not any(w.startswith("fuse_loss ") for w in getattr(self, "_said", ())):
                self._coverage_note(
                    "fuse_loss=True fused nothing: no compiled graph of the model's forward "
                    "computes a cross_entropy (a loss computed outside the compiled model, e.g. "
                    "from its returned logits, is not seen: let the model compute it, as "
                    "transformers models do when given labels=)"
                )
        return None

    def _coverage_note(self, note: str) -> None:
        log.warning("memopt: %s", note)
        self.coverage_notes.append(note)

    def _watch_eager_layers(
        self, model: torch.nn.Module, layers: Sequence[str], watch: dict[int, list], output: Any
    ) -> None:
        """Layers in no compiled graph: those whose weights get gradients in the backward from
        this forward's ``output`` ran eagerly (the others did not run), which is said as that
        backward ends; the hooks then go."""
        ran: set[int] = set()
        handles: list[Any] = []
        begun = [False]

        def said() -> None:
            for h in handles:
                h.remove()
            if ran:
                self._coverage_note(coverage.eager_layers_note(model, layers, ran, self.config))

        def begins(_grad: Any) -> None:
            if not begun[0]:
                begun[0] = True
                torch.autograd.Variable._execution_engine.queue_callback(said)

        for t in torch.utils._pytree.tree_leaves(output):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                handles.append(t.register_hook(begins))
        for i, weights in watch.items():
            for p in weights:
                handles.append(p.register_post_accumulate_grad_hook(lambda _, i=i: ran.add(i)))

    def note_graph(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> None:
        """A graph Dynamo handed the backend: what of the model it holds (module paths, its
        real inputs' storages), for the check after the first training forward."""
        self.graphs_seen += 1
        if self._coverage_checked:
            return
        self.compiled_paths |= coverage.module_paths(gm)
        self.compiled_storages |= {k for k in map(_real_storage, example_inputs) if k is not None}

    def note_step_inputs(self, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        """Forward pre-hook of the optimized model (run eagerly, before its compiled code): the
        call's tensors, which are no activation when a region reads them, as the saved-bytes
        measure leaves them out (memopt.measure). Only the call's few tensors per step; the
        weights' storages are read when a region compiles (:meth:`activation_inputs`)."""
        leaves = torch.utils._pytree.tree_leaves((args, kwargs))
        self.step_inputs = {k for k in map(_real_storage, leaves) if k is not None}
        self._model = weakref.ref(module)

    def frame_prefix(self, gm: Any, example_inputs: Sequence[Any]) -> str:
        """The model's path of the module whose frame dynamo compiled into ``gm`` ('' for the
        model's own forward, or before the model's call is seen): its layers are named from
        there (:func:`memopt.passes.detect_layers.frame_prefix`)."""
        from memopt.passes.detect_layers import frame_prefix, normalize_module_path

        model = self._model() if self._model is not None else None
        if model is None:
            return ""
        named = itertools.chain(
            model.named_parameters(remove_duplicate=False),
            model.named_buffers(remove_duplicate=False),
        )
        names = {id(t): normalize_module_path(n) for n, t in named}
        return frame_prefix(compat.placeholder_sources(gm), example_inputs, names)

    def activation_inputs(self, example_inputs: Sequence[Any]) -> tuple[int, ...]:
        """Per input of a region being compiled, whether it is an activation of the step (held
        for this region's backward when saved, like its own): :data:`PER_RUN`, a tensor
        autograd made; or, once the step's call is seen, :data:`SHARED`, any other tensor the
        step made (an attention mask or position ids an earlier region or eager code built,
        which every run of a layer's region may read) that is no parameter, buffer or input
        of the call; else 0."""
        model = self._model() if self._model is not None else None
        known = None
        if self.step_inputs is not None and model is not None:
            weights = itertools.chain(model.parameters(), model.buffers())
            known = self.step_inputs | {k for k in map(_real_storage, weights) if k is not None}
        return tuple(_activation_kind(x, known) for x in example_inputs)

    def run_input_keys(self, report: int, args: Sequence[Any]) -> tuple[tuple[int, int], ...]:
        """(argument, storage number in the step) of each saved activation input (the report's
        ``extra["saved_inputs"]``) a run of region report ``report`` is called with: runs that
        save one storage share its number (the step forgets the storages:
        :meth:`new_step_inputs`); :data:`CALL_TENSOR` for a tensor of the optimized model's
        call (a graph compiled for the decoder's ids, reused by dynamo for the encoder's)."""
        out = []
        for e in self._rows(report):
            a = e["arg"]
            if e["kind"] != OUTPUT and a < len(args):
                key = self._number(args[a], e["dtype"], call=True)
                if key is not None:
                    out.append((a, key))
        return tuple(out)

    def run_output_keys(self, report: int, outputs: Any) -> tuple[tuple[int, int], ...]:
        """The same for the outputs a run returned that its region saves (output ``j`` as
        argument ``-1 - j``), where they are the forward graph's outputs one to one."""
        outs = outputs if isinstance(outputs, list | tuple) else (outputs,)
        rows = self._rows(report)
        if not rows or len(outs) != self.regions[report].extra.get("fwd_outputs"):
            return ()
        out = []
        for e in rows:
            if e["kind"] == OUTPUT:
                key = self._number(outs[e["arg"]], e["dtype"], call=False)
                if key is not None:
                    out.append((-1 - e["arg"], key))
        return tuple(out)

    def _rows(self, report: int) -> list[dict[str, Any]]:
        return (
            self.regions[report].extra.get("saved_inputs") or []
            if report < len(self.regions)
            else []
        )

    def _number(self, t: Any, dtype: str, *, call: bool) -> int | None:
        """``t``'s storage number in the step (None: no real tensor of ``dtype``)."""
        key = _real_storage(t)
        if key is None or str(t.dtype).removeprefix("torch.") != dtype:
            return None
        if call and self.step_inputs is not None and key in self.step_inputs:
            return CALL_TENSOR
        return self._input_ids.setdefault(key, len(self._input_ids))

    def note_run_inputs(self, report: int, args: Sequence[Any], sizes: dict | None) -> None:
        """A run of region report ``report`` begins (memopt.state.record_run). Until the check
        after the first training forward, its arguments' storages tell which of the model's
        layers ran in a compiled region (dynamo reuses one layer's graph for the others)."""
        if not self._coverage_checked and self._model is not None:  # memopt.optimize's check
            self.compiled_storages |= {k for k in map(_real_storage, args) if k is not None}
        self.run_inputs[0].append(self.run_input_keys(report, args))
        self.run_sizes[0].append(tuple(sorted(sizes.items())) if sizes else ())
        self.run_layers[0].append(self._layers_read(args))

    def _layers_read(self, args: Sequence[Any]) -> frozenset[int]:
        """The model layers whose weights or buffers (or views of them) are among ``args``."""
        layer_of = self._layer_storages()
        if not layer_of:  # no storage to look up on this hot path
            return frozenset()
        found = set()
        for a in args:
            hit = self._layer_by_id.get(id(a))
            if hit is not None and hit[0]() is a:  # the weight itself
                found.add(hit[1])
            elif (k := _real_storage(a)) is not None and k in layer_of:  # another view of it
                found.add(layer_of[k])
        return frozenset(found)

    def _layer_storages(self) -> dict[Any, int]:
        """Storage -> index of the model layer (``model_layers``) whose weight or buffer it
        is, once the model's call is seen; empty before, and where the weights are no plain
        tensors (FSDP2's DTensors: its runs read all-gathered copies)."""
        if self._layer_of is None and self._model is not None:
            from memopt.passes.detect_layers import normalize_module_path

            model = self._model()
            model = getattr(model, "_orig_mod", model)
            self._layer_of = {}
            layers = getattr(self, "model_layers", ()) if model is not None else ()
            modules = (
                {normalize_module_path(n): m for n, m in model.named_modules()} if layers else {}
            )
            for i, name in enumerate(layers):
                # the normalized path (memopt.coverage reads them so); ".0": a Sequential model's
                sub = modules.get(name) or modules.get(name.lstrip("."))
                for t in itertools.chain(sub.parameters(), sub.buffers()) if sub else ():
                    if (k := _real_storage(t)) is not None:
                        self._layer_of[k] = i
                        self._layer_by_id[id(t)] = (weakref.ref(t), i)
        return self._layer_of or {}

    def last_layer_reads(self, sequence: Sequence[int]) -> tuple[frozenset, ...] | None:
        """Per run of the last step (``sequence``), the model layers whose weights it read."""
        reads = self.run_layers[1]
        return tuple(reads) if len(reads) == len(sequence) else None

    def record_outputs(self, report: int, outputs: Any) -> None:
        """What the run just begun returned."""
        keys = self.run_output_keys(report, outputs)
        if keys and self.run_inputs[0]:
            self.run_inputs[0][-1] += keys

    def new_step_inputs(self) -> None:
        """The step under way has finished: it becomes the last one."""
        self._input_ids = {}
        self.run_inputs = ([], self.run_inputs[0])
        self.run_sizes = ([], self.run_sizes[0])
        self.run_layers = ([], self.run_layers[0])


def _trains(example_inputs: Sequence[Any]) -> bool:
    """Whether a graph has a backward (some input needs a gradient, grad mode on)."""
    return torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs
    )


def _real_storage(t: Any) -> Any:
    """A real tensor's storage identity, None for anything else (a fake tensor, a DTensor:
    subclasses)."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        return None
    try:
        return compat.storage_key(t)
    except Exception:  # a tensor without a storage
        return None


def _activation_kind(x: Any, known: set | None) -> int:
    """:meth:`RegionRegistry.activation_inputs` for one input (``known``: the storages of the
    call's tensors and the model's weights, None when not seen)."""
    if not isinstance(x, torch.Tensor):
        return 0
    key = _real_storage(x)
    if known is not None and key is not None and key in known:
        return 0  # a weight, a buffer or a call's tensor, or a view of one made by autograd
    if x.grad_fn is not None:
        return PER_RUN
    if known is None or isinstance(x, torch.nn.Parameter) or x.requires_grad:
        return 0
    return SHARED if key is not None else 0
