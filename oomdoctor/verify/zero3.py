"""ZeRO-3/FSDP parameter gathering on one rank: which full (unsharded) parameters are live when.

Three ways to gather, chosen by `zero3_gather_unit`:

* `layer` (PyTorch FSDP FULL_SHARD, one wrapped unit per transformer block): a block's weights are all-gathered into
  one flat buffer before its forward, freed after it (reshard_after_forward) and gathered again before its backward.
  The root unit (embedding, head) is gathered for the whole step, as FSDP does not reshard the root after forward.
  Prefetch: `zero3_backward_prefetch_units` units ahead in backward (BACKWARD_PRE: issued before the current unit's
  backward compute), `zero3_forward_prefetch_units` in forward (forward_prefetch, off by default). A unit's
  unsharded gradients stay until its post-backward, where they are flattened for the reduce-scatter and freed.
* `module` (DeepSpeed ZeRO-3): each module's parameters are fetched before it runs and released after, in the module
  order the first pass records; later passes prefetch up to `zero3_prefetch_bucket_elements` ahead while at most
  `zero3_max_live_elements` are gathered, keep a parameter used again within `zero3_max_reuse_distance_elements`,
  and keep parameters under `zero3_persistence_threshold_elements` gathered for the run.
* `matmul`: each weight just before its own matmul, freed right after (no prefetch; a lower bound).

Gathered buffers are the working set beside the model states (the 1/N shards, their gradients and optimizer states),
which stay 16 bytes per parameter / N with AdamW and fp32 weights whatever the unit.

Streams (`zero3_streams`, on by default; `layer` and `module`): both libraries all-gather on a stream of their own
(FSDP's `_unshard` under `state._unshard_stream`, DeepSpeed's `__all_gather_params` under its `__allgather_stream`,
a separate stream with overlap_comm, stage 3's default), so a gathered buffer is allocated from that stream's pool,
and both free it with `record_stream(current_stream())` (FSDP's `_free_unsharded_flat_param`, DeepSpeed's
`free_param`), so the caching allocator reuses it only once the compute stream's work on it is done. Here that is
the next unit's or module's compute: a buffer freed after one unit's forward can serve the gather after the next.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import torch

from oomdoctor.verify import simgpu

ROOT = "root"  # FSDP's root unit: the parameters no block holds (embedding, final norm, head)
COMPUTE_STREAM, GATHER_STREAM = 0, 1  # the current stream, and FSDP's unshard / DeepSpeed's allgather stream


@dataclass(eq=False)
class Unit:
    """Parameters gathered together, at offsets in one flat buffer in the compute dtype."""

    name: str
    numel: int = 0
    persistent: bool = False
    buffer: torch.Tensor | None = None
    grads: list[torch.Tensor] = field(default_factory=list)  # unsharded gradients waiting for the reduce-scatter
    in_backward: bool = False

    def add(self, shape: tuple[int, ...]) -> int:
        """Room for one weight of `shape`; its offset in the flat buffer."""
        offset = self.numel
        self.numel += math.prod(shape)
        return offset


@dataclass(frozen=True)
class Slot:
    """Where one sharded weight lives when gathered."""

    unit: Unit
    offset: int
    shape: tuple[int, ...]


class Gathering:
    """Per-matmul gathering (`matmul`): no unit outlives its op; the base of the other two."""

    def __init__(self, device: torch.device, dtype: torch.dtype, streams: bool = False) -> None:
        self.device = device
        self.dtype = dtype  # the compute dtype the last forward gathered in (backward has no autocast to ask)
        self.streams = streams  # gather on GATHER_STREAM, free with record_stream on the compute stream

    def place(self, shape: tuple[int, ...], group: str) -> Slot | None:
        """The slot of a new sharded weight of block/root `group`; None: gathered per matmul."""
        return None

    def weight(self, slot: Slot) -> torch.Tensor:
        """The gathered weight: a view into its unit's buffer (gathered now if it is not live)."""
        if slot.unit.buffer is None:
            self._gather(slot.unit)
        assert slot.unit.buffer is not None
        n = math.prod(slot.shape)
        return slot.unit.buffer[slot.offset : slot.offset + n].view(slot.shape)

    def _gather(self, unit: Unit) -> None:
        """All-gather `unit` into one flat buffer in the compute dtype (on the gather stream)."""
        if unit.buffer is None:
            with simgpu.on_stream(GATHER_STREAM if self.streams else COMPUTE_STREAM):
                unit.buffer = torch.empty(unit.numel, dtype=self.dtype, device=self.device)

    def _free(self, unit: Unit) -> None:
        """Reshard `unit`: its gathered buffer goes (once the compute stream is done with it)."""
        if self.streams and unit.buffer is not None:
            simgpu.record_stream(unit.buffer, COMPUTE_STREAM)
        unit.buffer = None

    def _compute_starts(self) -> None:
        """A unit's or module's compute starts: the compute stream's work on earlier buffers is done by now."""
        if self.streams:
            simgpu.process_events()

    def forward_enter(self, group: str, dtype: torch.dtype) -> None:
        """FSDP's pre-forward of a unit."""

    def forward_exit(self, group: str) -> None:
        """FSDP's post-forward of a unit."""

    def backward_enter(self, group: str) -> None:
        """FSDP's pre-backward of a unit (its outputs' gradients are ready)."""

    def backward_exit(self, group: str) -> None:
        """FSDP's post-backward of a unit (its inputs' gradients are computed)."""

    def module_enter(self, slot: Slot, dtype: torch.dtype | None) -> None:
        """DeepSpeed's pre-forward/pre-backward of the module owning `slot`."""

    def module_exit(self, slot: Slot) -> None:
        """DeepSpeed's post-forward/post-backward of that module."""

    def keep_grad(self, slot: Slot, grad: torch.Tensor) -> None:
        """An unsharded gradient, held until its unit's reduce-scatter (FSDP) or let go at once (DeepSpeed)."""

    def end_pass(self) -> None:
        """One forward (and its backward) is over."""


class FsdpGathering(Gathering):
    """PyTorch FSDP FULL_SHARD with one wrapped unit per block and the root unit (`layer`)."""

    def __init__(self, device: torch.device, dtype: torch.dtype, forward_prefetch: int, backward_prefetch: int,
                 streams: bool = False) -> None:
        super().__init__(device, dtype, streams)
        self.units: dict[str, Unit] = {}
        self.order: list[str] = []  # the units' pre-forward order, recorded as FSDP's execution-order data is
        self.forward_prefetch = forward_prefetch
        self.backward_prefetch = backward_prefetch

    def place(self, shape: tuple[int, ...], group: str) -> Slot:
        unit = self.units.setdefault(group, Unit(group))
        return Slot(unit, unit.add(shape), shape)

    def _ahead(self, group: str, depth: int, step: int) -> list[Unit]:
        """The next `depth` units after `group` in forward order (`step` 1) or backward order (-1)."""
        if group not in self.order or not depth:
            return []
        i = self.order.index(group)
        picked = [self.order[j] for j in range(i + step, i + step * (depth + 1), step) if 0 <= j < len(self.order)]
        return [self.units[g] for g in picked]

    def forward_enter(self, group: str, dtype: torch.dtype) -> None:
        self.dtype = dtype
        if group not in self.units:
            return
        self._gather(self.units[group])
        for unit in self._ahead(group, self.forward_prefetch, 1):  # known from an earlier pass only, as in FSDP
            self._gather(unit)
        if group not in self.order:
            self.order.append(group)
        self._compute_starts()

    def forward_exit(self, group: str) -> None:
        unit = self.units.get(group)
        if unit is not None and group != ROOT and not unit.in_backward:  # a recompute in backward keeps it
            self._free(unit)

    def backward_enter(self, group: str) -> None:
        unit = self.units.get(group)
        if unit is None:
            return
        unit.in_backward = True
        self._gather(unit)
        for ahead in self._ahead(group, self.backward_prefetch, -1):  # BACKWARD_PRE: before this unit's compute
            self._gather(ahead)
        self._compute_starts()

    def backward_exit(self, group: str) -> None:
        unit = self.units.get(group)
        if unit is None or not unit.in_backward:
            return
        if unit.grads:  # the unsharded gradients are flattened into the reduce-scatter's input, then freed
            flat = torch.empty(unit.numel, dtype=unit.grads[0].dtype, device=self.device)
            unit.grads.clear()
            del flat
        unit.in_backward = False
        self._free(unit)

    def keep_grad(self, slot: Slot, grad: torch.Tensor) -> None:
        slot.unit.grads.append(grad)

    def end_pass(self) -> None:
        """FSDP's final backward callback: a unit whose post-backward never ran (no gradient reached its input, as
        for the first block under a frozen embedding) is reduce-scattered and resharded now."""
        for group, unit in self.units.items():
            if unit.in_backward:
                self.backward_exit(group)
        self._compute_starts()  # the optimizer step


class DeepSpeedGathering(Gathering):
    """DeepSpeed ZeRO-3's parameter coordinator as memory sees it (`module`): fetch per module, prefetch along the
    recorded module order, release unless reused soon or persistent."""

    def __init__(self, device: torch.device, dtype: torch.dtype, prefetch_bucket: int, max_live: int,
                 persistence_threshold: int, max_reuse_distance: int, streams: bool = False) -> None:
        super().__init__(device, dtype, streams)
        self.prefetch_bucket = prefetch_bucket
        self.max_live = max_live
        self.persistence_threshold = persistence_threshold
        self.max_reuse_distance = max_reuse_distance
        self.units: list[Unit] = []
        self.recording: list[Unit] = []
        self.trace: list[Unit] | None = None  # the first pass's module order; no prefetch until it is complete
        self.queue: deque[Unit] = deque()
        self.claimed: Counter[int] = Counter()  # uses of a unit already taken off the queue by a prefetch
        self.pos = 0

    def place(self, shape: tuple[int, ...], group: str) -> Slot:
        unit = Unit(f"{group}.{len(self.units)}")
        unit.add(shape)
        unit.persistent = unit.numel < self.persistence_threshold  # never partitioned: gathered for the run
        self.units.append(unit)
        return Slot(unit, 0, shape)

    def live_elements(self) -> int:
        """Elements gathered now, persistent ones included."""
        return sum(u.numel for u in self.units if u.buffer is not None)

    def module_enter(self, slot: Slot, dtype: torch.dtype | None) -> None:
        if dtype is not None:
            self.dtype = dtype
        unit = slot.unit
        self._gather(unit)
        if self.trace is None:
            self.recording.append(unit)
        else:
            self._take_off_queue(unit)
            self.pos += 1
            self._prefetch()
        self._compute_starts()

    def _take_off_queue(self, unit: Unit) -> None:
        """The current use leaves the queue, unless a prefetch took it off already."""
        if self.claimed[id(unit)]:
            self.claimed[id(unit)] -= 1
            return
        while self.queue:
            if self.queue.popleft() is unit:
                return

    def _prefetch(self) -> None:
        """Gather the next modules' parameters: until the bucket's elements are in flight or the live cap is met."""
        budget = min(self.max_live - self.live_elements(), self.prefetch_bucket)
        fetched = 0
        while self.queue and fetched < budget:
            unit = self.queue.popleft()
            self.claimed[id(unit)] += 1
            if unit.buffer is None:
                self._gather(unit)
                fetched += unit.numel

    def _reused_soon(self, unit: Unit) -> bool:
        """Whether `unit` is used again within the reuse distance (elements of the modules in between)."""
        assert self.trace is not None
        seen = 0
        for other in self.trace[self.pos:]:
            if seen >= self.max_reuse_distance:
                return False
            if other is unit:
                return True
            seen += other.numel
        return False

    def module_exit(self, slot: Slot) -> None:
        unit = slot.unit
        if unit.persistent:
            return
        if self.trace is not None and (self.claimed[id(unit)] or self._reused_soon(unit)):
            return
        self._free(unit)

    def end_pass(self) -> None:
        if self.trace is None:
            self.trace = self.recording
        for unit in self.units:
            if not unit.persistent:
                self._free(unit)
        self._compute_starts()  # the optimizer step
        self.queue = deque(self.trace)
        self.claimed.clear()
        self.pos = 0


def gathering(p: Any, device: torch.device, dtype: torch.dtype) -> Gathering:
    """The gathering `p` (ZeroParams at zero_stage 3: the built-in transformer's or a transformers model's) asks for."""
    streams = p.zero3_streams
    if p.zero3_gather_unit == "layer":
        return FsdpGathering(device, dtype, p.zero3_forward_prefetch_units, p.zero3_backward_prefetch_units, streams)
    if p.zero3_gather_unit == "module":
        return DeepSpeedGathering(device, dtype, p.zero3_prefetch_bucket_elements, p.zero3_max_live_elements,
                                  p.zero3_persistence_threshold_elements, p.zero3_max_reuse_distance_elements,
                                  streams)
    return Gathering(device, dtype)


class Boundary(torch.autograd.Function):
    """Identity whose backward is an FSDP unit's pre-backward ("pre", on its output) or post-backward ("post", on
    its input: every gradient inside the unit is computed once the input's is)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, gather: Gathering, group: str, event: str) -> torch.Tensor:
        ctx.hook = (gather, group, event)
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        gather, group, event = ctx.hook
        (gather.backward_enter if event == "pre" else gather.backward_exit)(group)
        return grad, None, None, None
