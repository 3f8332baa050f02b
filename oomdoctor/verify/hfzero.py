"""ZeRO-3 / FSDP FULL_SHARD for `model: hf`: a transformers model's weights held as this rank's 1/N shards and
gathered around each module's forward and backward by verify/zero3.py's gathering.

`partition` runs on the meta device before the model is materialised, so only the shards ever take device memory
(as DeepSpeed's zero.Init and FSDP's meta-device initialisation do). `Zero3` then hooks the modules: before a module
runs, its weights are swapped in whole, as views of their gathered unit (FSDP unit, DeepSpeed module) or as an
all-gather output of their own (`matmul`: gathered per use); after it, the shards are swapped back. Autograd keeps no
gathered weight alive for backward: a saved-tensor hook keeps where the weight lives instead and gathers it again
when backward needs it. Each trainable weight's full gradient is reduce-scattered to its shard as it is computed
(FSDP holds it until its unit's post-backward). Imports torch; only trial subprocesses import this module.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from oomdoctor.verify.zero3 import ROOT, Boundary, DeepSpeedGathering, FsdpGathering, Gathering, Slot


@dataclass(eq=False)
class Weight:
    """One parameter as this rank holds it: its full shape, its FSDP unit, the (module, name) places that use it (a
    tied weight has several), and once materialised its shard and where it is gathered."""

    shape: tuple[int, ...]
    group: str
    uses: list[tuple[nn.Module, str]] = field(default_factory=list)
    shard: nn.Parameter | None = None
    slot: Slot | None = None

    @property
    def trainable(self) -> bool:
        return self.shard is not None and self.shard.requires_grad


@dataclass
class Partition:
    """A partitioned model: its weights, and its FSDP units (module name -> module) in module order."""

    weights: list[Weight]
    units: dict[str, nn.Module]

    def materialised(self) -> Partition:
        """Pick up each weight's shard after `to_empty` (which makes new parameters) and tie the shard of a tied
        weight into every place that uses it again."""
        for w in self.weights:
            module, name = w.uses[0]
            w.shard = module._parameters[name]
            for other, other_name in w.uses[1:]:
                other._parameters[other_name] = w.shard
        return self


def _units(model: nn.Module) -> tuple[dict[nn.Module, str], dict[str, nn.Module]]:
    """Each module's FSDP unit: the innermost enclosing module of a class the model lists in `_no_split_modules` (the
    decoder layers: accelerate's default TRANSFORMER_BASED_WRAP policy), else the root unit."""
    classes = {c for m in model.modules() for c in (getattr(m, "_no_split_modules", None) or ())}
    owner: dict[nn.Module, str] = {}
    units: dict[str, nn.Module] = {}
    for name, module in model.named_modules():
        parent = name.rpartition(".")[0] if "." in name else ""
        group = owner.get(model.get_submodule(parent), ROOT) if name else ROOT
        if name and type(module).__name__ in classes:
            group = name
            units[name] = module
        owner[module] = group
    return owner, units


def partition(model: nn.Module, world_size: int) -> Partition:
    """Replace every parameter of `model` (still on the meta device) by its 1-D shard of ceil(numel / world_size)
    elements, as FSDP's flat parameter and DeepSpeed's partitioned ds_tensor hold it; a tied weight stays one."""
    owner, units = _units(model)
    weights: dict[torch.Tensor, Weight] = {}  # keyed by the original parameter, kept alive until the end
    for module in model.modules():
        for name, q in list(module._parameters.items()):
            if q is None:
                continue
            w = weights.get(q)
            if w is None:
                w = weights[q] = Weight(tuple(q.shape), owner[module])
                shard = torch.empty(-(-q.numel() // world_size), dtype=q.dtype, device=q.device)
                w.shard = nn.Parameter(shard, requires_grad=q.requires_grad)
            w.uses.append((module, name))
            module._parameters[name] = w.shard
    return Partition(list(weights.values()), units)


@dataclass(frozen=True)
class _Saved:
    """A gathered weight (or a view of it) autograd saved for backward: where it lives, not its memory."""

    slot: Slot | None  # None: gathered per use (`matmul`), all-gathered again when backward needs it
    numel: int
    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


class _AllGather(torch.autograd.Function):
    """A shard's full weight for one use: gathered by the caller in forward; in backward its full gradient is
    reduce-scattered to the shard."""

    @staticmethod
    def forward(ctx: Any, shard: torch.Tensor, full: torch.Tensor, zero: Zero3, weight: Weight) -> torch.Tensor:
        ctx.zero, ctx.weight = zero, weight
        return full

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        return ctx.zero.reduce_scatter(ctx.weight, grad), None, None, None


class _OnBackward(torch.autograd.Function):
    """Identity on a module's input whose backward first runs `hook`: DeepSpeed's post-backward of that module (its
    input's gradient is computed, so its own weights are no longer needed)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, hook: Callable[[], None]) -> torch.Tensor:
        ctx.hook = hook
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        ctx.hook()
        return grad, None


def _first_tensor(args: tuple, kwargs: dict, wrap: Callable[[torch.Tensor], torch.Tensor]) -> tuple[tuple, dict]:
    """The call's arguments with its first tensor that needs a gradient (the hidden states) wrapped."""
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.requires_grad:
            return (*args[:i], wrap(a), *args[i + 1:]), kwargs
    for k, a in kwargs.items():
        if isinstance(a, torch.Tensor) and a.requires_grad:
            return args, {**kwargs, k: wrap(a)}
    return args, kwargs


def _on_output_grad(output: Any, hook: Callable[[], None]) -> None:
    """Run `hook` when the gradient of the module's first output that needs one arrives (a pre-backward)."""
    outputs = output if isinstance(output, (tuple, list)) else (output,)
    for y in outputs:
        if isinstance(y, torch.Tensor) and y.requires_grad:
            y.register_hook(lambda _grad: hook())
            return


class Zero3:
    """Gathers a partitioned model's weights around its modules' forward and backward, by `gather`: FSDP units
    (`layer`), DeepSpeed modules (`module`) or per use (`matmul`)."""

    def __init__(self, part: Partition, gather: Gathering, dtype: torch.dtype, offload: bool = False) -> None:
        self.part, self.gather, self.dtype = part, gather, dtype
        self.offload = offload  # parameter offload: the shards and their gradients live on the host
        self.live: dict[int, tuple[weakref.ref, Slot | None]] = {}  # gathered buffers whose views autograd may save
        self.root_pending = 0  # root-unit weights used in this forward whose gradients have not arrived
        self.fsdp = isinstance(gather, FsdpGathering)
        self.deepspeed = isinstance(gather, DeepSpeedGathering)
        for w in part.weights:
            w.slot = gather.place(w.shape, w.group)
        if self.fsdp:
            for group, module in part.units.items():
                module.register_forward_pre_hook(self._unit_pre_forward(group), with_kwargs=True)
                module.register_forward_hook(self._unit_post_forward(group))
        by_module: dict[nn.Module, list[Weight]] = {}
        for w in part.weights:
            for module, _ in w.uses:
                if w not in by_module.setdefault(module, []):
                    by_module[module].append(w)
        for module, ws in by_module.items():
            module.register_forward_pre_hook(self._pre_forward(ws), with_kwargs=True)
            module.register_forward_hook(self._post_forward(ws))

    def _compute_dtype(self) -> torch.dtype:
        """What a weight is gathered in: autocast's dtype (FSDP's param_dtype) when it is on, else the weights'."""
        device = self.gather.device.type
        return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else self.dtype

    # --- FSDP units ---------------------------------------------------------------------------------------------

    def _unit_pre_forward(self, group: str) -> Callable[..., Any]:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            args, kwargs = _first_tensor(args, kwargs, lambda x: Boundary.apply(x, self.gather, group, "post"))
            self.gather.forward_enter(group, self._compute_dtype())
            return args, kwargs
        return hook

    def _unit_post_forward(self, group: str) -> Callable[..., Any]:
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            self.gather.forward_exit(group)
            _on_output_grad(output, lambda: self.gather.backward_enter(group))
        return hook

    def loss_boundary(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss, with FSDP's root pre-backward as the first thing its backward runs."""
        return Boundary.apply(loss, self.gather, ROOT, "pre") if self.fsdp and loss.requires_grad else loss

    # --- every module with weights ------------------------------------------------------------------------------

    def _pre_forward(self, ws: list[Weight]) -> Callable[..., Any]:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            if self.deepspeed and torch.is_grad_enabled():
                args, kwargs = _first_tensor(args, kwargs, lambda x: _OnBackward.apply(x, self._released(ws)))
            dtype = self._compute_dtype()
            for w in ws:
                full = self._gathered(w, dtype)
                for m, name in w.uses:
                    if m is module:  # a plain tensor stands in for the parameter while the module runs
                        module._parameters[name] = cast(nn.Parameter, full)
            return args, kwargs
        return hook

    def _post_forward(self, ws: list[Weight]) -> Callable[..., Any]:
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            for w in ws:
                for m, name in w.uses:
                    if m is module:
                        module._parameters[name] = w.shard
            if self.deepspeed:
                self._released(ws)()
                _on_output_grad(output, self._fetched(ws))
        return hook

    def _released(self, ws: list[Weight]) -> Callable[[], None]:
        """DeepSpeed's post-forward and post-backward of a module: its weights are released (unless reused soon or
        persistent)."""
        def release() -> None:
            for w in ws:
                assert w.slot is not None
                self.gather.module_exit(w.slot)
        return release

    def _fetched(self, ws: list[Weight]) -> Callable[[], None]:
        """DeepSpeed's pre-backward of a module: its weights are fetched again (and the next ones prefetched)."""
        def fetch() -> None:
            for w in ws:
                assert w.slot is not None
                self.gather.module_enter(w.slot, None)
        return fetch

    def _gathered(self, w: Weight, dtype: torch.dtype) -> torch.Tensor:
        """The full weight for one forward use: a view of its gathered unit, or all-gathered for this use alone."""
        assert w.shard is not None
        if isinstance(self.gather, FsdpGathering) and w.group == ROOT and self.gather.units[ROOT].buffer is None:
            self.gather.forward_enter(ROOT, dtype)  # FSDP's root unit: gathered as forward first needs it, for the step
        if w.slot is None:
            full = torch.empty(w.shape, dtype=dtype, device=self.gather.device)
        else:
            self.gather.module_enter(w.slot, dtype)
            full = self.gather.weight(w.slot)
        base = full if full._base is None else full._base
        key = id(base)
        self.live[key] = (weakref.ref(base, lambda _ref: self.live.pop(key, None)), w.slot)
        if not (w.trainable and torch.is_grad_enabled()):
            return full
        if self.fsdp and w.group == ROOT:
            self.root_pending += 1
        return _AllGather.apply(w.shard, full, self, w)

    def reduce_scatter(self, w: Weight, grad: torch.Tensor) -> torch.Tensor:
        """The shard's gradient (the reduce-scatter's output) from the full one, which FSDP holds until its unit's
        post-backward; the root unit's post-backward runs once every gradient it expects has arrived."""
        assert w.shard is not None
        if w.slot is not None:
            self.gather.keep_grad(w.slot, grad)
        if self.fsdp and w.group == ROOT:
            self.root_pending -= 1
            if self.root_pending == 0:
                self.gather.backward_exit(ROOT)
        from oomdoctor.verify.workload import host_memory

        with host_memory(self.gather.device, self.offload):  # offloaded: reduce-scattered into host memory
            return grad.new_empty(w.shard.shape, dtype=w.shard.dtype)

    # --- what autograd saves ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def forward(self, inner: tuple[Callable, Callable] | None = None) -> Iterator[None]:
        """A forward whose saved gathered weights are kept as where they live (gathered again in backward); other
        saved tensors go through `inner` (activation offloading's hooks). Checkpointed blocks recompute whole (no
        early stop), so every module's post-forward restores its shards."""
        pack_other, unpack_other = inner or (lambda t: t, lambda t: t)

        def pack(t: torch.Tensor) -> Any:
            base = t if t._base is None else t._base
            entry = self.live.get(id(base))
            if entry is not None and entry[0]() is base:
                return _Saved(entry[1], base.numel(), base.dtype, tuple(t.shape), tuple(t.stride()),
                              int(t.storage_offset()))
            return pack_other(t)

        def unpack(saved: Any) -> torch.Tensor:
            return self._regathered(saved) if isinstance(saved, _Saved) else unpack_other(saved)

        with torch.utils.checkpoint.set_checkpoint_early_stop(False), \
                torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            yield

    def _regathered(self, saved: _Saved) -> torch.Tensor:
        """A saved gathered weight as backward needs it: its unit gathered again if it was released, or all-gathered
        once more for this op alone (per use)."""
        if saved.slot is None:
            base = torch.empty(saved.numel, dtype=saved.dtype, device=self.gather.device)
        else:
            self.gather.weight(saved.slot)
            buffer = saved.slot.unit.buffer
            assert buffer is not None
            base = buffer
        return base.as_strided(saved.size, saved.stride, saved.offset)

    def end_pass(self) -> None:
        """One forward (and its backward) is over: the gathering's own end, and every shard in its place."""
        self.gather.end_pass()
        self.root_pending = 0
        for w in self.part.weights:
            for module, name in w.uses:
                module._parameters[name] = w.shard
