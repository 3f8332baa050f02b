"""A model of PyTorch's CUDA caching allocator, replaying an alloc/free trace under a memory limit.

Policy from c10/cuda/CUDACachingAllocator.cpp (notes §3): 512-byte rounding, small (≤1 MiB) and large pools,
2 MiB / 20 MiB / round-to-2-MiB segments, best fit, split and merge, release-cached-and-retry before an OOM,
max_split_size_mb, garbage_collection_threshold, roundup_power2_divisions and expandable_segments.
Streams as c10 keeps them: a block belongs to the stream it was allocated on, a free block serves only requests of
its own stream (BlockPool's (stream, size, address) order), segments are per stream, and a block recorded on another
stream (record_stream) is freed only once that stream's work is done (insert_events / process_events, here when the
caller says so). Stream 0 is the compute (current) stream; a trace that never names another is replayed as before.
No CUDA graphs. Pure Python: no torch import.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from oomdoctor.units import MIB, format_bytes
from oomdoctor.verify.rounding import (
    K_LARGE_BUFFER,
    K_MIN_BLOCK,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
    allocation_size,
    round_size,
)

NO_SPLIT_LIMIT = 2**63
# Where the modelled device addresses start. PyTorch breaks ties between equal free blocks by address, and cudaMalloc
# gave each new segment a lower address than the last (99 of 99 steps on an H200, docs/verify.md): the model does too.
VA_TOP = 2**47

OOM_HINT = (
    " If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    " to avoid fragmentation.  See documentation for Memory Management "
    " (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
)


class AllocConfError(ValueError):
    """A PYTORCH_CUDA_ALLOC_CONF string the allocator would reject."""


@dataclass(frozen=True)
class AllocConf:
    """The allocator settings that change memory (PYTORCH_CUDA_ALLOC_CONF)."""

    max_split_size: int = NO_SPLIT_LIMIT
    garbage_collection_threshold: float = 0.0
    expandable_segments: bool = False
    roundup_power2_divisions: int = 0
    # c10's setMemoryFraction: below 1.0 it caps what PyTorch may reserve at fraction x the device's total, and
    # only then does garbage_collection_threshold act (garbage_collect_cached_blocks runs only under a fraction)
    per_process_memory_fraction: float = 1.0
    backend: str = "native"  # "cudaMallocAsync": CUDA's stream-ordered pool, which this model does not simulate
    # how much larger than an oversize request a cached oversize block may be and still be handed out
    max_non_split_rounding: int = K_LARGE_BUFFER

    @classmethod
    def parse(cls, text: str | None) -> AllocConf:
        """Parse `key:value,key:value` the way c10's AllocatorConfig does (the keys that matter here)."""
        values: dict[str, object] = {}
        for item in _split_conf(text or ""):
            key, sep, raw = item.partition(":")
            key, raw = key.strip(), raw.strip()
            if not sep:
                raise AllocConfError(f"allocator option without a value: {item!r}")
            if key == "max_split_size_mb":
                mb = int(raw)
                if mb < 20:
                    raise AllocConfError("CachingAllocator option max_split_size_mb too small, must be >= 20")
                values["max_split_size"] = mb * MIB
            elif key == "garbage_collection_threshold":
                thr = float(raw)
                if not 0.0 < thr < 1.0:
                    raise AllocConfError("garbage_collection_threshold must be between 0.0 and 1.0")
                values["garbage_collection_threshold"] = thr
            elif key == "expandable_segments":
                values["expandable_segments"] = raw.lower() in ("true", "1")
            elif key == "roundup_power2_divisions":
                if raw.startswith("["):
                    raise AllocConfError("per-interval roundup_power2_divisions is not modelled; use one number")
                values["roundup_power2_divisions"] = int(raw)
            elif key == "per_process_memory_fraction":
                fraction = float(raw)
                if not 0.0 <= fraction <= 1.0:
                    raise AllocConfError(f"invalid fraction:{raw}. Please set within [0, 1].")
                values["per_process_memory_fraction"] = fraction
            elif key == "backend":
                if raw not in ("native", "cudaMallocAsync"):
                    raise AllocConfError("Unknown allocator backend, options are native and cudaMallocAsync")
                values["backend"] = raw
            elif key == "max_non_split_rounding_mb":
                mb = int(raw)
                if mb < K_LARGE_BUFFER // MIB:
                    raise AllocConfError("CachingAllocator option max_non_split_rounding_mb too small, must be >= "
                                         f"{K_LARGE_BUFFER // MIB}")
                values["max_non_split_rounding"] = mb * MIB
            elif key in ("release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
                         "pinned_num_register_threads", "pinned_use_background_threads",
                         "graph_capture_record_stream_reuse"):
                continue  # accepted by PyTorch, no effect on this model
            else:
                raise AllocConfError(f"Unrecognized CachingAllocator option: {key}")
        return cls(**values)  # type: ignore[arg-type]

    def render(self) -> str:
        """The settings as a PYTORCH_CUDA_ALLOC_CONF string."""
        parts = [f"backend:{self.backend}"] if self.backend != "native" else []
        if self.expandable_segments:
            parts.append("expandable_segments:True")
        if self.max_split_size < NO_SPLIT_LIMIT:
            parts.append(f"max_split_size_mb:{self.max_split_size // MIB}")
        if self.garbage_collection_threshold:
            parts.append(f"garbage_collection_threshold:{self.garbage_collection_threshold}")
        if self.roundup_power2_divisions:
            parts.append(f"roundup_power2_divisions:{self.roundup_power2_divisions}")
        if self.max_non_split_rounding != K_LARGE_BUFFER:
            parts.append(f"max_non_split_rounding_mb:{self.max_non_split_rounding // MIB}")
        if self.per_process_memory_fraction < 1.0:
            parts.append(f"per_process_memory_fraction:{self.per_process_memory_fraction}")
        return ",".join(parts)


def _split_conf(text: str) -> list[str]:
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        items.append(cur)
    return [i for i in (s.strip() for s in items) if i]


NO_STREAMS: frozenset[int] = frozenset()


class Block:
    """A range of a segment, free or allocated; blocks of a segment tile it in address order, all on its stream."""

    __slots__ = ("addr", "allocated", "event_count", "freed_at", "next", "prev", "seg", "size", "stream",
                 "stream_uses")

    def __init__(self, size: int, addr: int, seg: int, stream: int = 0) -> None:
        self.size, self.addr, self.seg, self.stream = size, addr, seg, stream
        self.prev: Block | None = None
        self.next: Block | None = None
        self.allocated = False
        self.freed_at = 0
        self.stream_uses = NO_STREAMS  # other streams it was used on (record_stream)
        self.event_count = 0  # those streams' work not known done since its free: not in a pool yet

    def key(self) -> tuple[int, int]:
        return (self.size, self.addr)


class OutOfMemory(Exception):
    """The modelled allocator could not satisfy a request."""


@dataclass
class ReplayResult:
    """What a trace replay measured."""

    capacity_bytes: int
    non_pytorch_bytes: int
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    oom: bool = False
    message: str | None = None
    oom_event: int | None = None
    num_alloc_retries: int = 0
    segments: int = 0
    segments_allocated: int = 0
    requested_bytes: int | None = None
    reserved_at_oom: int | None = None
    allocated_at_oom: int | None = None
    events: int = 0

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.non_pytorch_bytes - self.peak_reserved_bytes


@dataclass
class _Pool:
    """c10's BlockPool: free blocks in (stream, size, address) order, kept here as one sorted list per stream."""

    small: bool
    free: list[tuple[int, int]] = field(default_factory=list)  # stream 0's, sorted (size, addr)
    side: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # other streams', sorted the same way
    by_key: dict[tuple[int, int], Block] = field(default_factory=dict)  # every stream's (addresses are unique)
    free_block_calls: int = 0  # c10 get_free_blocks_call_count: a block's GC age counts this pool's searches

    def blocks(self, stream: int) -> list[tuple[int, int]]:
        """The free blocks of `stream`, sorted (size, addr)."""
        return self.free if stream == 0 else self.side.setdefault(stream, [])

    def insert(self, b: Block) -> None:
        """insert_into_blocks: the block's age starts now."""
        b.freed_at = self.free_block_calls
        k = b.key()
        bisect.insort(self.blocks(b.stream), k)
        self.by_key[k] = b

    def remove(self, b: Block) -> None:
        k = b.key()
        free = self.blocks(b.stream)
        del free[bisect.bisect_left(free, k)]
        del self.by_key[k]


class CachingAllocator:
    """The native (segment-based) caching allocator, under `capacity - non_pytorch` bytes."""

    def __init__(self, capacity: int, conf: AllocConf | None = None, non_pytorch: int = 0,
                 total_capacity: int | None = None) -> None:
        self.capacity = capacity
        self.conf = conf or AllocConf()
        self.non_pytorch = non_pytorch
        self.total_capacity = total_capacity or capacity
        self.allowed = capacity - non_pytorch  # what PyTorch may reserve
        self.fraction_set = self.conf.per_process_memory_fraction < 1.0  # c10's allowed_memory_maximum has a value
        if self.fraction_set:
            self.allowed = min(self.allowed, int(self.conf.per_process_memory_fraction * self.total_capacity))
        self.pools = (_Pool(small=True), _Pool(small=False))
        self.allocated = 0
        self.reserved = 0
        self.peak_allocated = 0
        self.peak_reserved = 0
        self.retries = 0
        self.segments = 0
        self.segments_allocated = 0  # c10's segment.all.allocated: every cudaMalloc'd segment, released or not
        self._next_addr = VA_TOP  # cudaMalloc hands out successive segments at lower addresses (seen on an H200)
        # one expandable segment per (stream, pool), made when first needed
        self.expandable: dict[tuple[int, bool], ExpandableSegment] | None = \
            {} if self.conf.expandable_segments else None
        self.events: list[Block] = []  # freed blocks waiting for other streams' work (c10's cuda_events)

    # -- public ----------------------------------------------------------------------------------------------
    def malloc(self, orig: int, stream: int = 0) -> Block:
        size = round_size(orig, self.conf.roundup_power2_divisions)
        small = size <= K_SMALL_SIZE
        if self.expandable is not None:
            block = self._expandable(stream, small).malloc(size)
        else:
            block = self._malloc_native(size, small, stream)
        block.allocated = True
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    def free(self, block: Block) -> None:
        """free: allocated bytes drop now; a block used on other streams waits for their work (insert_events)."""
        block.allocated = False
        self.allocated -= block.size
        if block.stream_uses:
            self._insert_events(block)
        else:
            self._free_block(block)

    def record_stream(self, block: Block, stream: int) -> None:
        """recordStream: `block` is used on `stream` too (a use on its own stream needs nothing)."""
        if stream != block.stream:
            block.stream_uses = block.stream_uses | {stream}

    def process_events(self) -> None:
        """process_events with every recorded stream's work done: the blocks waiting on it go to their pools.
        The caller says when (the point where the other streams' work is known complete)."""
        waiting, self.events = self.events, []
        for block in waiting:
            block.event_count = 0
            self._free_block(block)

    # -- streams ---------------------------------------------------------------------------------------------
    def _insert_events(self, block: Block) -> None:
        """insert_events: one event per stream the block was used on; it stays out of every pool until done."""
        block.event_count, block.stream_uses = len(block.stream_uses), NO_STREAMS
        self.events.append(block)

    def _free_block(self, block: Block) -> None:
        """free_block: into its pool (or its expandable segment), merged with free neighbours."""
        if self.expandable is not None:
            self._expandable(block.stream, block.seg == -1).free(block)  # seg -1 small, -2 large
        else:
            self._free_native(block)

    def _expandable(self, stream: int, small: bool) -> ExpandableSegment:
        assert self.expandable is not None
        seg = self.expandable.get((stream, small))
        if seg is None:
            seg = self.expandable[(stream, small)] = ExpandableSegment(small, self, stream)
        return seg

    # -- native ----------------------------------------------------------------------------------------------
    def _pool(self, small: bool) -> _Pool:
        return self.pools[0 if small else 1]

    def _get_free_block(self, pool: _Pool, size: int, stream: int) -> Block | None:
        pool.free_block_calls += 1
        free = pool.blocks(stream)
        i = bisect.bisect_left(free, (size, -1))
        if i == len(free):
            return None  # nothing of this stream is large enough, whatever other streams have cached
        block = pool.by_key[free[i]]
        mss = self.conf.max_split_size
        if size < mss and block.size >= mss:
            return None  # do not hand out an oversize block to a normal request
        if size >= mss and block.size >= size + self.conf.max_non_split_rounding:
            return None  # nor an oversize block much larger than the request (max_non_split_rounding_mb)
        pool.remove(block)
        return block

    def _cuda_malloc(self, size: int) -> bool:
        return self.reserved + size <= self.allowed

    def _new_segment(self, alloc_size: int, small: bool, stream: int) -> Block:
        self.segments += 1
        self.segments_allocated += 1  # also the segment's id (negative for the small pool)
        self._next_addr -= alloc_size
        block = Block(alloc_size, self._next_addr, -self.segments_allocated if small else self.segments_allocated,
                      stream)
        self.reserved += alloc_size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return block

    def _malloc_native(self, size: int, small: bool, stream: int) -> Block:
        pool = self._pool(small)
        alloc_size = allocation_size(size)
        block = self._get_free_block(pool, size, stream)
        if block is None:
            if self.fraction_set and self.conf.garbage_collection_threshold > 0:
                self._garbage_collect()
            if self._cuda_malloc(alloc_size) or (self._release_available(pool, size, stream)
                                                 and self._cuda_malloc(alloc_size)):
                block = self._new_segment(alloc_size, small, stream)
            else:
                self._release_cached()
                self.retries += 1
                if not self._cuda_malloc(alloc_size):
                    raise OutOfMemory(alloc_size)
                block = self._new_segment(alloc_size, small, stream)
        remaining = block.size - size
        if self._should_split(small, size, remaining):
            rest = Block(remaining, block.addr + size, block.seg, block.stream)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            pool.insert(rest)
        return block

    def _should_split(self, small: bool, size: int, remaining: int) -> bool:
        if small:
            return remaining >= K_MIN_BLOCK
        return size < self.conf.max_split_size and remaining > K_SMALL_SIZE

    def _free_native(self, block: Block) -> None:
        pool = self._pool(block.seg < 0)
        for other in (block.prev, block.next):  # try_merge_blocks: a segment's blocks share its stream
            if other is not None and not other.allocated and not other.event_count:
                pool.remove(other)
                if other is block.prev:
                    block.addr = other.addr
                    block.prev = other.prev
                    if other.prev is not None:
                        other.prev.next = block
                else:
                    block.next = other.next
                    if other.next is not None:
                        other.next.prev = block
                block.size += other.size
        pool.insert(block)

    def _release_block(self, pool: _Pool, block: Block) -> None:
        pool.remove(block)
        self.reserved -= block.size
        self.segments -= 1

    def _whole_free_segments(self, pool: _Pool) -> list[Block]:
        return [b for b in pool.by_key.values() if b.prev is None and b.next is None]

    def _release_available(self, pool: _Pool, size: int, stream: int) -> bool:
        """release_available_cached_blocks: only with max_split_size; frees oversize cached segments of the
        requesting stream."""
        mss = self.conf.max_split_size
        if mss >= NO_SPLIT_LIMIT or pool.small:
            return False
        key = max(size, mss)
        oversize = sorted((b for b in self._whole_free_segments(pool) if b.size >= mss and b.stream == stream),
                          key=Block.key)
        for b in oversize:
            if b.size >= key:
                self._release_block(pool, b)
                return True
        released = 0
        for b in reversed(oversize):
            if released >= key:
                break
            self._release_block(pool, b)
            released += b.size
        return released >= key

    def _release_cached(self) -> None:
        """release_cached_blocks: wait for every stream (synchronize_and_free_events), then cudaFree every cached
        block that is a whole segment (both pools, every stream)."""
        self.process_events()
        for pool in self.pools:
            for b in self._whole_free_segments(pool):
                self._release_block(pool, b)

    def _garbage_collect(self) -> None:
        """garbage_collect_cached_blocks: above threshold × allowed, free every unsplit large block at least as old
        as their average, and again with the rest until enough is freed (a sweep does not stop at the target: c10
        frees more so that GC runs less often)."""
        target = self.reserved - self.conf.garbage_collection_threshold * self.allowed
        if target <= 0:
            return
        pool = self._pool(False)
        reclaimed = 0
        while reclaimed < target:
            cands = self._whole_free_segments(pool)
            if not cands:
                return
            ages = [pool.free_block_calls - b.freed_at for b in cands]
            avg = sum(ages) / len(ages)
            for b, age in zip(cands, ages):
                if age >= avg:
                    self._release_block(pool, b)
                    reclaimed += b.size

    # -- reporting ------------------------------------------------------------------------------------------
    def shown_size(self, orig: int) -> int:
        """What the OOM message says was tried for a request of `orig` bytes: the segment asked of cudaMalloc
        (get_allocation_size of the rounded size), or the rounded size itself with expandable segments."""
        size = round_size(orig, self.conf.roundup_power2_divisions)
        return size if self.expandable is not None else allocation_size(size)

    def oom_message(self, alloc_size: int, device_index: int = 0) -> str:
        """An era-F (torch ≈2.11–2.13) CUDA OOM message for the modelled state."""
        in_use = self.reserved + self.non_pytorch
        free = max(0, self.capacity - in_use)
        return (
            f"CUDA out of memory. Tried to allocate {format_bytes(alloc_size)}. GPU {device_index} has a total "
            f"capacity of {format_bytes(self.total_capacity)} of which {format_bytes(free)} is free. "
            f"Including non-PyTorch memory, this process has {format_bytes(in_use)} memory in use. "
            f"Of the allocated memory {format_bytes(self.allocated)} is allocated by PyTorch, and "
            f"{format_bytes(self.reserved - self.allocated)} is reserved by PyTorch but unallocated."
            + ("" if self.conf.expandable_segments else OOM_HINT)
        )


def snapshot_segments(alloc: CachingAllocator, live: Iterable[Block], frames_of: Any = None,
                      device: int = 0) -> list[dict[str, Any]]:
    """The modelled state in `torch.cuda.memory._snapshot()`'s segment format (native segments: every free block is
    in a pool, every live one is given), so it is read by the same summary as a real snapshot. `frames_of(block)`
    gives a live block's recorded stack (innermost first) or None. A freed block still waiting for another
    stream's work is `active_pending_free`, as c10 shows it."""
    by_seg: dict[int, list[Block]] = {}
    for b in [*live, *alloc.events, *(b for pool in alloc.pools for b in pool.by_key.values())]:
        by_seg.setdefault(b.seg, []).append(b)
    segments = []
    for seg, blocks in sorted(by_seg.items(), key=lambda kv: min(b.addr for b in kv[1])):
        blocks.sort(key=lambda b: b.addr)
        segments.append({
            "device": device, "address": blocks[0].addr, "total_size": sum(b.size for b in blocks),
            "allocated_size": sum(b.size for b in blocks if b.allocated), "segment_type": "small" if seg < 0 else "large",
            "is_expandable": False,
            "blocks": [{"size": b.size, "state": _block_state(b),
                        **({"frames": frames} if b.allocated and frames_of and (frames := frames_of(b)) else {})}
                       for b in blocks],
        })
    return segments


def _block_state(b: Block) -> str:
    return "active_allocated" if b.allocated else "active_pending_free" if b.event_count else "inactive"


class ExpandableSegment:
    """expandable_segments:True — one growing virtual segment per pool and stream, physical memory mapped in pages.

    Pages are 2 MiB (small pool) or 20 MiB (large pool). A block is placed in the free address range that needs
    no new pages (best fit), else where the fewest new pages are needed; on a failed mapping every fully
    free page is unmapped and the request retried once.
    """

    def __init__(self, small: bool, owner: CachingAllocator, stream: int = 0) -> None:
        self.small = small
        self.owner = owner
        self.stream = stream
        self.page = K_SMALL_BUFFER if small else K_LARGE_BUFFER
        self.live: dict[int, int] = {}  # page -> allocated bytes on it
        self.mapped: set[int] = set()
        self.free_ranges: list[tuple[int, int]] = [(0, 1 << 60)]  # sorted (addr, size)

    def _pages(self, addr: int, size: int) -> range:
        return range(addr // self.page, (addr + size - 1) // self.page + 1)

    def _new_pages(self, addr: int, size: int) -> int:
        return sum(1 for p in self._pages(addr, size) if p not in self.mapped)

    def _choose(self, size: int) -> int:
        best: tuple[int, int, int] | None = None  # (new pages, range size, addr)
        for addr, rsize in self.free_ranges:
            if rsize < size:
                continue
            cand = (self._new_pages(addr, size), rsize, addr)
            if best is None or cand < best:
                best = cand
                if cand[0] == 0 and rsize == size:
                    break
        assert best is not None  # the last range is unbounded
        return best[2]

    def malloc(self, size: int) -> Block:
        owner = self.owner
        addr = self._choose(size)
        need = self._new_pages(addr, size) * self.page
        if owner.reserved + need > owner.allowed:
            self.owner.retries += 1
            owner.process_events()  # release_cached_blocks waits for every stream first
            for seg in (owner.expandable or {}).values():
                seg.unmap_free_pages()
            addr = self._choose(size)
            need = self._new_pages(addr, size) * self.page
            if owner.reserved + need > owner.allowed:
                raise OutOfMemory(size)
        self._take(addr, size)
        for p in self._pages(addr, size):
            if p not in self.mapped:
                self.mapped.add(p)
            lo, hi = max(addr, p * self.page), min(addr + size, (p + 1) * self.page)
            self.live[p] = self.live.get(p, 0) + (hi - lo)
        owner.reserved += need
        owner.peak_reserved = max(owner.peak_reserved, owner.reserved)
        return Block(size, addr, -1 if self.small else -2, self.stream)

    def _take(self, addr: int, size: int) -> None:
        i = bisect.bisect_left(self.free_ranges, (addr, -1))
        _, rsize = self.free_ranges.pop(i)
        if rsize > size:
            self.free_ranges.insert(i, (addr + size, rsize - size))

    def free(self, block: Block) -> None:
        addr, size = block.addr, block.size
        for p in self._pages(addr, size):
            lo, hi = max(addr, p * self.page), min(addr + size, (p + 1) * self.page)
            self.live[p] -= hi - lo
        i = bisect.bisect_left(self.free_ranges, (addr, -1))
        if i < len(self.free_ranges) and self.free_ranges[i][0] == addr + size:
            size += self.free_ranges.pop(i)[1]
        if i > 0 and sum(self.free_ranges[i - 1]) == addr:
            addr, prev = self.free_ranges[i - 1][0], self.free_ranges.pop(i - 1)[1]
            size += prev
            i -= 1
        self.free_ranges.insert(i, (addr, size))

    def unmap_free_pages(self) -> None:
        empty = [p for p in self.mapped if not self.live.get(p)]
        for p in empty:
            self.mapped.discard(p)
            self.live.pop(p, None)
        self.owner.reserved -= len(empty) * self.page


def malloc_at_most(alloc: CachingAllocator, nbytes: int, stream: int = 0) -> Block | None:
    """A library workspace that takes what there is: `nbytes`, halved after each OOM (PyTorch's cuDNN path,
    Conv_v8.cpp generate_and_filter_plans, then the next plan in try_configs), None once under 512 bytes (a plan with
    no workspace)."""
    while nbytes >= 512:
        try:
            return alloc.malloc(nbytes, stream)
        except OutOfMemory:
            nbytes //= 2
    return None


def replay(trace: Iterable[tuple[str, int, int]], capacity: int, conf: AllocConf | None = None,
           non_pytorch: int = 0, total_capacity: int | None = None) -> ReplayResult:
    """Replay ("a", id, bytes) / ("f", id, _) events; stop at the first OOM and describe it.

    Streams: ("s", stream, _) puts the allocations after it on `stream` (0 until one says otherwise), ("r", id,
    stream) records a live block's use on `stream`, ("e", _, _) says every recorded stream's work is done; ("w", id,
    bytes) is a workspace that takes at most `bytes` (malloc_at_most), never an OOM."""
    alloc = CachingAllocator(capacity, conf, non_pytorch, total_capacity)
    result = ReplayResult(capacity_bytes=capacity, non_pytorch_bytes=non_pytorch)
    live: dict[int, Block] = {}
    n = stream = 0
    for n, (kind, sid, nbytes) in enumerate(trace, 1):
        if kind == "a":
            try:
                live[sid] = alloc.malloc(nbytes, stream)
            except OutOfMemory:
                result.oom, result.oom_event = True, n
                result.message = alloc.oom_message(alloc.shown_size(nbytes))
                result.requested_bytes = nbytes
                result.reserved_at_oom, result.allocated_at_oom = alloc.reserved, alloc.allocated
                break
        elif kind == "w":
            block = malloc_at_most(alloc, nbytes, stream)
            if block is not None:
                live[sid] = block
        elif kind == "f":
            block = live.pop(sid, None)
            if block is not None:
                alloc.free(block)
        elif kind == "s":
            stream = sid
        elif kind == "r":
            if sid in live:
                alloc.record_stream(live[sid], nbytes)
        elif kind == "e":
            alloc.process_events()
    result.events = n
    result.peak_allocated_bytes = alloc.peak_allocated
    result.peak_reserved_bytes = alloc.peak_reserved
    result.num_alloc_retries = alloc.retries
    result.segments = alloc.segments
    result.segments_allocated = alloc.segments_allocated
    return result
