"""The built-in workload: a decoder-only transformer step in plain torch, as one rank of a ZeRO/FSDP job.

Follows the entry-point protocol: `transformer(params, device)` returns a callable that runs one step.
Sharding is modelled on one rank: ZeRO-1 divides optimizer states, ZeRO-2 also gradients (reduce-scattered
as each one is accumulated), ZeRO-3/FSDP also parameters (gathered in forward and again in backward, by
FSDP unit, DeepSpeed module or matmul: verify/zero3.py). Offload keeps optimizer states (and with `all`
the parameter shards) on the CPU.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from oomdoctor.verify.dszero import DeepSpeedStep
from oomdoctor.verify.params import TransformerParams
from oomdoctor.verify.zero3 import ROOT, Boundary, Gathering, Slot, gathering

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# Decoding is replayed in at most this many steps: the KV cache reaches its full length through the same growth,
# while a 1,024-token completion costs 32 model passes instead of 1,024 (tested against token by token).
DECODE_STEPS = 32


# bitsandbytes' 8-bit optimizers (Optimizer2State): a uint8 state per moment plus one fp32 absmax per 256-element
# block; a parameter under min_8bit_size elements keeps 32-bit states
BNB_BLOCK = 256
BNB_MIN_8BIT_SIZE = 4096


def bnb_states(numel: int, device: torch.device) -> list[torch.Tensor]:
    """The two moments bitsandbytes' AdamW8bit keeps for one parameter of `numel` elements."""
    if numel < BNB_MIN_8BIT_SIZE:
        return [torch.zeros(numel, dtype=torch.float32, device=device) for _ in range(2)]
    blocks = -(-numel // BNB_BLOCK)
    return [torch.zeros(numel, dtype=torch.uint8, device=device) for _ in range(2)] + \
        [torch.zeros(blocks, dtype=torch.float32, device=device) for _ in range(2)]


DDP_BUCKET_BYTES = 25 * 1024 * 1024  # DistributedDataParallel's bucket_cap_mb default (MiB in its code)
DDP_FIRST_BUCKET_BYTES = 1024 * 1024  # its first bucket is small, so the first allreduce starts early


class DdpBuckets:
    """DistributedDataParallel's gradient buckets for some parameters, as its Reducer allocates them when the model is
    wrapped: per dtype, trainable parameters in the order their gradients become ready (last layer first), a bucket
    closed once it reaches 1 MiB (the first) or 25 MiB (the rest). With gradient_as_bucket_view off (the default)
    they hold a copy of every gradient beside the .grad tensors; with it on, each .grad is a view into its bucket."""

    def __init__(self, parameters: Iterable[torch.Tensor], device: torch.device, as_grad_views: bool = False) -> None:
        groups: dict[torch.dtype, list[list[torch.Tensor]]] = {}
        for q in reversed([q for q in parameters if q.requires_grad]):
            members = groups.setdefault(q.dtype, [[]])
            members[-1].append(q)
            cap = DDP_FIRST_BUCKET_BYTES if len(members) == 1 else DDP_BUCKET_BYTES
            if sum(x.numel() for x in members[-1]) * q.dtype.itemsize >= cap:
                members.append([])
        self.tensors: list[torch.Tensor] = []
        self.views: list[tuple[torch.Tensor, torch.Tensor]] = []
        for dtype, members in groups.items():
            for bucket in filter(None, members):
                flat = torch.empty(sum(q.numel() for q in bucket), dtype=dtype, device=device)
                self.tensors.append(flat)
                offset = 0
                for q in bucket:
                    if as_grad_views:
                        self.views.append((q, flat[offset : offset + q.numel()].view_as(q)))
                    offset += q.numel()

    def point_grads(self) -> None:
        """gradient_as_bucket_view: each .grad is its bucket view again (the Reducer re-points a gradient an
        optimizer's zero_grad(set_to_none=True) dropped), so backward accumulates into the bucket in place."""
        for q, view in self.views:
            q.grad = view


OFFLOAD_MIN_BYTES = 1024  # torchtune's OffloadActivations keeps smaller saved tensors on the device


def offload_hooks() -> tuple[Callable[[torch.Tensor], Any], Callable[[Any], torch.Tensor]]:
    """The saved-tensor hooks of torchtune's activation offloading: a saved activation goes to host memory and comes
    back to the device when backward needs it; parameters and tensors under 1 KiB stay where they are."""

    def pack(t: torch.Tensor) -> Any:
        if isinstance(t, torch.nn.Parameter) or t.device.type == "cpu" or t.numel() * t.element_size() < OFFLOAD_MIN_BYTES:
            return t
        return (t.device, t.to("cpu"))

    def unpack(saved: Any) -> torch.Tensor:
        return saved[1].to(saved[0]) if isinstance(saved, tuple) else saved

    return pack, unpack


def offload_activations(on: bool) -> contextlib.AbstractContextManager[Any]:
    """A forward whose saved activations go to host memory and come back to the device one by one in backward, as
    torchtune's activation offloading does (offload_hooks); `on` false: as they are."""
    return torch.autograd.graph.saved_tensors_hooks(*offload_hooks()) if on else contextlib.nullcontext()


def keeping(step: Callable[[], None], resident: list[Any]) -> Callable[[], None]:
    """`step`, with what the run keeps beside the model (DDP's buckets, a reference model) held for as long as the
    step is: allocated once when the workload is built, never freed by a trial. DDP buckets whose views are the
    gradients point the gradients at them before every step."""
    if not resident:
        return step
    buckets = [r for r in resident if isinstance(r, DdpBuckets) and r.views]

    def step_beside() -> None:
        _ = resident
        for b in buckets:
            b.point_grads()
        step()
    return step_beside


def decode_chunks(max_new_tokens: int) -> Iterator[int]:
    """The tokens each replayed decoding step adds: at most DECODE_STEPS steps that together make max_new_tokens."""
    per_step = -(-max_new_tokens // DECODE_STEPS)
    for done in range(0, max_new_tokens, per_step):
        yield min(per_step, max_new_tokens - done)


def _compute_dtype(device: torch.device, fallback: torch.dtype) -> torch.dtype:
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return fallback


def _fetch(gather: Gathering, slot: Slot | None, shape: tuple[int, ...], dtype: torch.dtype | None) -> torch.Tensor:
    """The full weight for one op: from its unit's gathered buffer, or all-gathered for this op alone (matmul)."""
    if slot is None:
        assert dtype is not None
        return torch.empty(shape, dtype=dtype, device=gather.device)  # all-gather output
    gather.module_enter(slot, dtype)
    return gather.weight(slot)


class _Gathered(torch.autograd.Function):
    """y = x @ gather(shard).T: the full weight exists only while its unit is gathered (ZeRO-3/FSDP)."""

    @staticmethod
    def forward(ctx, x, shard, shape, gather, slot):
        dt = _compute_dtype(gather.device, shard.dtype)
        with torch.autocast(gather.device.type, enabled=False):
            w = _fetch(gather, slot, shape, dt)
            xc = x.to(dt)
            out = F.linear(xc, w)
            del w
        if slot is not None:
            gather.module_exit(slot)
        ctx.save_for_backward(xc, shard)
        ctx.meta = (shape, gather, slot, dt)
        return out

    @staticmethod
    def backward(ctx, grad):
        xc, shard = ctx.saved_tensors
        shape, gather, slot, dt = ctx.meta
        w = _fetch(gather, slot, shape, dt if slot is None else None)  # re-gather for backward
        grad = grad.to(dt)
        gx = grad @ w
        del w
        gshard = None
        if shard.requires_grad:
            gw = grad.reshape(-1, shape[0]).t() @ xc.reshape(-1, shape[1])
            # the reduce-scatter output has its own storage: a view would keep the full gradient alive
            gshard = gw.reshape(-1)[: shard.numel()].to(shard.device, shard.dtype, copy=True)
            if slot is not None:
                gather.keep_grad(slot, gw)
            del gw
        if slot is not None:
            gather.module_exit(slot)
        return gx, gshard, None, None, None


class _GatheredEmbedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, idx, shard, shape, gather, slot):
        # per matmul the weight's own dtype; a unit is gathered in the compute dtype (FSDP's param_dtype)
        w = _fetch(gather, slot, shape, shard.dtype if slot is None else _compute_dtype(gather.device, shard.dtype))
        out = F.embedding(idx, w)
        del w
        if slot is not None:
            gather.module_exit(slot)
        ctx.save_for_backward(idx, shard)
        ctx.meta = (shape, gather, slot)
        return out

    @staticmethod
    def backward(ctx, grad):
        idx, shard = ctx.saved_tensors
        shape, gather, slot = ctx.meta
        if slot is not None:
            gather.module_enter(slot, None)
        full = torch.zeros(shape, dtype=grad.dtype, device=gather.device)
        full.index_add_(0, idx.reshape(-1), grad.reshape(-1, shape[1]))
        gshard = full.reshape(-1)[: shard.numel()].to(shard.device, shard.dtype, copy=True)
        if slot is not None:
            gather.keep_grad(slot, full)
            gather.module_exit(slot)
        del full
        gather.backward_exit(ROOT)  # the embedding's is the root unit's last gradient
        return None, gshard, None, None, None


def host_memory(device: torch.device, offloaded: bool):
    """Offloaded parameter shards (and, for `model: hf`, their gradients): on the simulator they stay on the device
    but are not counted (fake CPU leaves with device gradients break fake-mode autograd); on a GPU, the host's."""
    if offloaded and device.type == "simgpu":
        from oomdoctor.verify.simgpu import untracked
        return untracked()
    return contextlib.nullcontext()


class Ctx:
    """What every layer needs to know about placement."""

    def __init__(self, p: TransformerParams, device: torch.device) -> None:
        self.p = p
        self.device = device
        self.dtype = DTYPES[p.dtype]
        self.sharded = p.zero_stage >= 3
        self.offload_params = p.offload == "all"
        self.gather = gathering(p, device, self.dtype)

    def place(self, shape: tuple[int, ...], group: str) -> Slot | None:
        """Where a sharded weight of block/root `group` is gathered (None: per matmul, or not sharded)."""
        return self.gather.place(shape, group) if self.sharded else None

    def weight(self, shape: tuple[int, ...], trainable: bool) -> nn.Parameter:
        if self.sharded:
            n = math.prod(shape)
            with host_memory(self.device, self.offload_params):
                data = torch.empty(-(-n // self.p.world_size), dtype=self.dtype, device=self.device)
        else:
            data = torch.empty(shape, dtype=self.dtype, device=self.device)
        nn.init.normal_(data, std=0.02)
        return nn.Parameter(data, requires_grad=trainable)


class Linear(nn.Module):
    def __init__(self, ctx: Ctx, fan_in: int, fan_out: int, group: str, lora: bool = False) -> None:
        super().__init__()
        self.ctx, self.shape = ctx, (fan_out, fan_in)
        r = ctx.p.lora_rank
        self.weight = ctx.weight(self.shape, trainable=r == 0)
        self.slot = ctx.place(self.shape, group)
        self.lora = lora and r > 0
        if self.lora:
            self.lora_a = nn.Parameter(torch.randn(r, fan_in, dtype=ctx.dtype, device=ctx.device) * 0.01)
            self.lora_b = nn.Parameter(torch.zeros(fan_out, r, dtype=ctx.dtype, device=ctx.device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ctx.sharded:
            y = _Gathered.apply(x, self.weight, self.shape, self.ctx.gather, self.slot)
        else:
            y = F.linear(x, self.weight)
        if self.lora:
            p = self.ctx.p.lora_dropout
            xa = F.dropout(x, p, training=self.training) if p else x  # keeps a mask and its own copy of x
            y = y + F.linear(F.linear(xa, self.lora_a), self.lora_b)
        return y


class RMSNorm(nn.Module):
    """Llama-family RMSNorm as HF and litgpt write it: computed in fp32, so its fp32 input is saved for backward."""

    def __init__(self, ctx: Ctx, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width, dtype=ctx.dtype, device=ctx.device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
        return self.weight * h.to(x.dtype)


def _norm(ctx: Ctx, width: int) -> nn.Module:
    if ctx.p.norm_kind == "rmsnorm":
        return RMSNorm(ctx, width)
    return nn.LayerNorm(width, device=ctx.device, dtype=ctx.dtype)


class Block(nn.Module):
    def __init__(self, ctx: Ctx, group: str) -> None:
        super().__init__()
        p = ctx.p
        w, f = p.width, p.ffn_size
        self.p, self.group = p, group
        self.ln1 = _norm(ctx, w)
        self.ln2 = _norm(ctx, w)
        self.q = Linear(ctx, w, w, group, lora=True)
        self.k = Linear(ctx, w, w, group)
        self.v = Linear(ctx, w, w, group, lora=True)
        self.o = Linear(ctx, w, w, group)
        self.up = Linear(ctx, w, f, group)
        self.down = Linear(ctx, f, w, group)
        self.gate = Linear(ctx, w, f, group) if p.mlp == "swiglu" else None
        if p.lora_rank:
            for ln in (self.ln1, self.ln2):
                ln.requires_grad_(False)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, s, _ = t.shape
        return t.view(b, s, self.p.heads, self.p.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, cache: list | None = None) -> torch.Tensor:
        h = self.ln1(x)
        q, k, v = self._heads(self.q(h)), self._heads(self.k(h)), self._heads(self.v(h))
        causal = True
        if cache is not None:
            if cache:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
                causal = False  # one new token attends to the whole cache
            cache[:] = [k, v]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        x = x + self.o(a.transpose(1, 2).reshape(x.shape))
        h = self.ln2(x)
        if self.gate is not None:
            m = F.silu(self.gate(h)) * self.up(h)
        else:
            m = F.gelu(self.up(h))
        return x + self.down(m)


class Transformer(nn.Module):
    def __init__(self, ctx: Ctx) -> None:
        super().__init__()
        p = ctx.p
        self.ctx, self.p = ctx, p
        full_ft = p.lora_rank == 0
        shape = (p.vocab, p.width)
        self.embed = ctx.weight(shape, trainable=full_ft)
        self.embed_slot = ctx.place(shape, ROOT)
        self.blocks = nn.ModuleList(Block(ctx, f"block{i}") for i in range(p.layers))
        self.ln_f = _norm(ctx, p.width)
        self.ln_f.requires_grad_(full_ft)
        self.head = None if p.tie_embeddings else ctx.weight(shape, trainable=full_ft)
        self.head_slot = self.embed_slot if p.tie_embeddings else ctx.place(shape, ROOT)

    def _embed(self, idx: torch.Tensor) -> torch.Tensor:
        shape = (self.p.vocab, self.p.width)
        if self.ctx.sharded:
            return _GatheredEmbedding.apply(idx, self.embed, shape, self.ctx.gather, self.embed_slot)
        return F.embedding(idx, self.embed)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        w = self.embed if self.head is None else self.head
        if self.ctx.sharded:
            return _Gathered.apply(h, w, (self.p.vocab, self.p.width), self.ctx.gather, self.head_slot)
        return F.linear(h, w)

    def hidden(self, idx: torch.Tensor, caches: list | None = None) -> torch.Tensor:
        if self.ctx.sharded:  # FSDP's root unit: gathered as forward starts, kept until backward ends
            self.ctx.gather.forward_enter(ROOT, _compute_dtype(self.ctx.device, self.ctx.dtype))
        x = self._embed(idx)
        ckpt = self.p.gradient_checkpointing and torch.is_grad_enabled() and caches is None
        for i, block in enumerate(self.blocks):
            x = self._unit(block, x, ckpt and i % self.p.checkpoint_every == 0, None if caches is None else caches[i])
        return self.ln_f(x)

    def _unit(self, block: nn.Module, x: torch.Tensor, ckpt: bool, cache: list | None) -> torch.Tensor:
        """Run one block, as an FSDP unit when sharded: gathered around its forward, its backward bracketed."""
        def run(h: torch.Tensor) -> torch.Tensor:
            return checkpoint(block, h, use_reentrant=False) if ckpt else block(h, cache)

        if not self.ctx.sharded:
            return run(x)
        gather, group = self.ctx.gather, str(block.group)
        x = Boundary.apply(x, gather, group, "post")
        gather.forward_enter(group, _compute_dtype(self.ctx.device, self.ctx.dtype))
        y = run(x)
        gather.forward_exit(group)
        return Boundary.apply(y, gather, group, "pre")

    def loss(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.hidden(idx)
        targets = idx
        if self.p.fused_cross_entropy:
            loss = self._chunked_loss(h, targets)
        else:
            logits = self._logits(h).float()  # HF-style upcast: B·T·V fp32
            loss = F.cross_entropy(logits.view(-1, self.p.vocab), targets.reshape(-1))
            del logits
        if self.ctx.sharded:  # the root unit's pre-backward: the first thing backward runs
            loss = Boundary.apply(loss, self.ctx.gather, ROOT, "pre")
        return loss

    def _chunked_loss(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Chunked cross-entropy: at most ce_chunk_tokens rows of logits exist at once, in forward and backward."""
        flat, tflat = h.reshape(-1, self.p.width), targets.reshape(-1)

        def chunk_loss(hc: torch.Tensor, tc: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(self._logits(hc).float(), tc, reduction="sum")

        total: torch.Tensor | None = None
        n = self.p.ce_chunk_tokens
        for hc, tc in zip(flat.split(n), tflat.split(n)):
            part = checkpoint(chunk_loss, hc, tc, use_reentrant=False) if torch.is_grad_enabled() \
                else chunk_loss(hc, tc)
            total = part if total is None else total + part
        assert total is not None  # at least one chunk
        return total / flat.shape[0]


class OptimizerParams(Protocol):
    """What the ZeRO optimizer reads of a workload's params (TransformerParams, HFParams)."""

    @property
    def zero_stage(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def zero_bucket_elements(self) -> int: ...
    @property
    def overlap_comm(self) -> bool: ...
    @property
    def dtype(self) -> str: ...
    @property
    def master_weights(self) -> bool: ...
    @property
    def optimizer(self) -> str: ...
    @property
    def offload(self) -> str: ...


class Optimizer:
    """AdamW / SGD / Adafactor-like over this rank's shard of each trainable parameter, foreach-style like CUDA: the
    ZeRO optimizer of both workloads (DeepSpeed's partitioned states; FSDP's optimizer over its sharded parameters).

    States live on the device unless offloaded; with master weights the update runs on an fp32 copy.
    """

    def __init__(self, model: nn.Module, p: OptimizerParams, device: torch.device) -> None:
        self.p, self.device = p, device
        self.params = [q for q in model.parameters() if q.requires_grad]
        self.state_device = torch.device("cpu") if p.offload != "none" else device
        self.master = p.master_weights and p.dtype != "float32"
        self.gshards: dict[int, torch.Tensor] = {}
        self.state: dict[int, dict[str, torch.Tensor]] = {}
        # DeepSpeed ZeRO-3's gradient bucket (contiguous_gradients): allocated with the optimizer, kept for the run
        self.ipg = self._bucket() if p.zero_stage == 3 and p.zero_bucket_elements else None
        # DeepSpeed's bf16/fp16 mode with AdamW on the device: its own flat partitions and step (verify/dszero.py)
        self.ds = DeepSpeedStep(self.params, self._k, p.zero_stage, p.optimizer == "adamw_fused", device) \
            if self.master and p.zero_stage >= 1 and p.offload == "none" and p.optimizer in ("adamw", "adamw_fused") \
            and self.params else None
        if p.zero_stage == 2 or (self.ds is not None and p.zero_stage == 3):
            for q in self.params:
                q.register_post_accumulate_grad_hook(self._reduce_scatter)

    def _bucket(self) -> torch.Tensor:
        return torch.empty(self.p.zero_bucket_elements, dtype=DTYPES[self.p.dtype], device=self.device)

    def backward_buckets(self) -> list[torch.Tensor]:
        """DeepSpeed ZeRO-1/2's gradient buckets for one backward (contiguous_gradients): reduce_bucket_size elements
        in the weights' dtype, a second with overlap_comm; allocated as backward starts, released at its end."""
        if self.p.zero_stage not in (1, 2) or not self.p.zero_bucket_elements:
            return []
        return [self._bucket() for _ in range(2 if self.p.overlap_comm else 1)]

    def _k(self, q: torch.Tensor) -> int:
        if self.p.zero_stage in (1, 2):
            return -(-q.numel() // self.p.world_size)
        return q.numel()

    def _reduce_scatter(self, q: torch.Tensor) -> None:
        assert q.grad is not None  # a post-accumulate-grad hook runs with the gradient in place
        g = q.grad.reshape(-1)[: self._k(q)]
        if self.ds is not None:
            self.ds.accumulate(q, g)
            q.grad = None
            return
        buf = self.gshards.get(id(q))
        if buf is None:
            self.gshards[id(q)] = g.clone()
        else:
            buf.add_(g)
        q.grad = None

    def _grad(self, q: torch.Tensor) -> torch.Tensor | None:
        if self.p.zero_stage == 2:
            return self.gshards.get(id(q))
        return None if q.grad is None else q.grad.reshape(-1)[: self._k(q)]

    @torch.no_grad()
    def init_state(self) -> None:
        if self.ds is not None:
            self.ds.init_state()
            return
        for q in self.params:
            if id(q) in self.state:
                continue
            k = self._k(q)
            dt = torch.float32 if self.master else q.dtype
            st: dict[str, torch.Tensor] = {}
            if self.master:
                st["master"] = torch.empty(k, dtype=torch.float32, device=self.state_device)
            if self.p.optimizer in ("adamw", "adamw_fused"):
                st["m"] = torch.zeros(k, dtype=dt, device=self.state_device)
                st["v"] = torch.zeros(k, dtype=dt, device=self.state_device)
            elif self.p.optimizer == "adamw8bit":
                st.update(zip(("m", "v", "absmax_m", "absmax_v"), bnb_states(k, self.state_device)))
            elif self.p.optimizer == "adafactor":
                rows = max(1, q.shape[0] // (self.p.world_size if self.p.zero_stage in (1, 2) else 1))
                cols = max(1, k // rows)
                st["vr"] = torch.zeros(rows, dtype=dt, device=self.state_device)
                st["vc"] = torch.zeros(cols, dtype=dt, device=self.state_device)
            self.state[id(q)] = st

    @torch.no_grad()
    def step(self) -> None:
        if self.ds is not None:
            self.ds.step()
            return
        self.init_state()
        items = [(q, g) for q in self.params if (g := self._grad(q)) is not None]
        if not items:
            return
        offload = self.state_device != self.device
        grads = [g.to(self.state_device) if offload else g for _, g in items]
        if self.master:
            grads = [g.float() for g in grads]
        targets = [self.state[id(q)]["master"] if self.master else q.reshape(-1)[: self._k(q)]
                   for q, _ in items]
        if offload and not self.master:
            targets = [t.to(self.state_device) for t in targets]
        lr, wd = 1e-4, 0.01
        if self.p.optimizer == "adamw":
            ms = [self.state[id(q)]["m"] for q, _ in items]
            vs = [self.state[id(q)]["v"] for q, _ in items]
            torch._foreach_lerp_(ms, grads, 0.1)
            torch._foreach_mul_(vs, 0.999)
            torch._foreach_addcmul_(vs, grads, grads, 0.001)
            denom = torch._foreach_sqrt(vs)
            torch._foreach_add_(denom, 1e-8)
            torch._foreach_mul_(targets, 1 - lr * wd)
            torch._foreach_addcdiv_(targets, ms, denom, -lr)
            del denom
        elif self.p.optimizer in ("sgd", "adamw8bit", "adamw_fused"):  # the 8-bit and fused AdamW: one kernel, in place
            torch._foreach_add_(targets, grads, alpha=-lr)
        else:
            for (q, _), g, t in zip(items, grads, targets):
                st = self.state[id(q)]
                rows, cols = st["vr"].numel(), st["vc"].numel()
                g2 = (g[: rows * cols] * g[: rows * cols]).view(rows, cols)
                st["vr"].lerp_(g2.mean(1), 0.2)
                st["vc"].lerp_(g2.mean(0), 0.2)
                approx = torch.outer(st["vr"], st["vc"]).reshape(-1)
                del g2
                t[: rows * cols].addcdiv_(g[: rows * cols], approx.sqrt_().add_(1e-30), value=-lr)
                del approx
        if self.master or offload:
            for (q, _), t in zip(items, targets):
                q.reshape(-1)[: self._k(q)].copy_(t)  # shard back to the device copy (in place)
        del grads, targets, items

    def zero_grad(self) -> None:
        for q in self.params:
            q.grad = None
        self.gshards.clear()
        if self.ds is not None:
            self.ds.zero_grad()


def mid_training_states(model: nn.Module, p: OptimizerParams, device: torch.device) -> Optimizer:
    """The optimizer with its states allocated, as they stand between two training steps; the caller keeps it for as
    long as its step (a dropped optimizer would free them before the step runs)."""
    opt = Optimizer(model, p, device)
    opt.init_state()
    return opt


def transformer(params: dict[str, Any] | TransformerParams, device: torch.device,
                phase: str = "train") -> Callable[[], None]:
    """Build the model on `device` and return a callable that runs one step of `phase`."""
    p = params if isinstance(params, TransformerParams) else TransformerParams.model_validate(params)
    ctx = Ctx(p, device)
    model = Transformer(ctx)
    step = _phase_step(p, model, device, phase)
    return keeping(step, [DdpBuckets(model.parameters(), device, p.ddp_bucket_view)] if p.ddp_buckets else [])


def _phase_step(p: TransformerParams, model: Transformer, device: torch.device,
                phase: str) -> Callable[[], None]:
    """One step of `phase` on the built model."""
    autocast = (torch.autocast(device.type, dtype=DTYPES[p.autocast]) if p.autocast
                else contextlib.nullcontext())

    def tokens(batch: int, seq: int) -> torch.Tensor:
        return torch.randint(0, p.vocab, (batch, seq), device=device)

    if phase == "train":
        opt = Optimizer(model, p, device)

        def train_step() -> None:
            model.train()
            for _ in range(p.grad_accum):
                with autocast, offload_activations(p.activation_offload):
                    loss = model.loss(tokens(p.batch, p.seq_len)) / p.grad_accum
                buckets = opt.backward_buckets()
                loss.backward()
                model.ctx.gather.end_pass()
                del loss, buckets
            opt.step()
            opt.zero_grad()
        return train_step

    eval_batch = p.eval_batch or p.batch
    if phase == "eval":
        states = mid_training_states(model, p, device)  # eval happens mid-training: optimizer states exist

        def eval_step() -> None:
            model.eval()
            with (torch.no_grad() if p.eval_no_grad else contextlib.nullcontext()), autocast:
                loss = model.loss(tokens(eval_batch, p.seq_len))
            model.ctx.gather.end_pass()
            del loss
        return keeping(eval_step, [states])

    if phase == "generate":
        # an RL rollout happens between optimizer steps: their states exist
        between_steps = [mid_training_states(model, p, device)] if p.generate_in_training else []

        def generate_step() -> None:
            model.eval()
            with torch.no_grad(), autocast:
                caches: list[list] = [[] for _ in range(p.layers)]
                sequences = eval_batch * p.num_generations
                h = model.hidden(tokens(sequences, p.seq_len), caches)
                logits = model._logits(h[:, -1:]).float()
                model.ctx.gather.end_pass()
                for chunk in decode_chunks(p.max_new_tokens):  # the cache grows as in token-by-token decoding
                    nxt = logits.argmax(-1).expand(sequences, chunk)
                    h = model.hidden(nxt, caches)
                    logits = model._logits(h[:, -1:]).float()
                    model.ctx.gather.end_pass()
                del caches, h, logits
        return keeping(generate_step, between_steps)
    raise ValueError(f"unknown phase {phase!r}")
