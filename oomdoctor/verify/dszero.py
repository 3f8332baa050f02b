"""DeepSpeed ZeRO's own optimizer step as memory sees it: flat fp32 partitions and the step's temporaries.

Follows DeepSpeed (deepspeedai/DeepSpeed at edaa722, 2026-08) `runtime/zero/stage_1_and_2.py` (DeepSpeedZeroOptimizer)
and `runtime/zero/stage3.py` (DeepSpeedZeroOptimizer_Stage3) in their bf16/fp16 mode with the optimizer on the device:
* the fp32 master partition and the optimizer's moments are one flat tensor each per (sub-)group
  (`single_partition_of_fp32_groups`, `fp32_partitioned_groups_flat`; FusedAdam's states are `zeros_like` of it);
* stage 2 copies each reduced gradient into `grads_in_partition`, one flat buffer in the weights' dtype allocated at the
  first reduction (`copy_grads_in_partition`) and alive until the step has upcast it; stage 3 keeps
  `grad_partitions_flat_buffer`, allocated with the optimizer and kept for the run;
* `step` first takes the gradient norm, each gradient as an fp64 copy (`get_grad_norm_direct`:
  `torch.linalg.vector_norm(g.double())`), then per (sub-)group flattens the gradients (`self.flatten`, a copy in the
  weights' dtype), upcasts that to fp32 (`.to(fp32)`: the `single_grad_partition`), drops the flat copy and the 16-bit
  gradients, runs the optimizer and drops the fp32 gradient (`single_partition_of_fp32_groups[i].grad = None`);
  stage 3 does this per sub-group of `sub_group_size` elements (`_prepare_fp32_grad_for_sub_group`, `_release_sub_group`);
* the all-gather of the updated weights writes into the flat 16-bit buffer in place (`all_gather_dp_groups`,
  `all_gather_into_tensor`), so `allgather_bucket_size` allocates nothing.
One parameter group (HF Trainer makes two, the second holds biases and norms); this rank's partition is 1/N of each
parameter, where DeepSpeed cuts the flat buffer into N contiguous ranges. Imports torch; only trial subprocesses
import this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

# runtime/zero/config.py: DeepSpeedZeroConfig.sub_group_size (stage 3)
SUB_GROUP_ELEMENTS = 1_000_000_000


class DeepSpeedStep:
    """This rank's flat fp32 partition(s), moments and gradient buffer, and the step that updates them."""

    def __init__(self, params: Sequence[torch.Tensor], numel: Callable[[torch.Tensor], int], stage: int,
                 fused: bool, device: torch.device, sub_group_elements: int = SUB_GROUP_ELEMENTS) -> None:
        self.params, self.numel, self.stage, self.fused, self.device = params, numel, stage, fused, device
        self.groups: list[list[torch.Tensor]] = [[]]
        size = 0
        for q in params:
            if stage == 3 and self.groups[-1] and size + numel(q) > sub_group_elements:
                self.groups.append([])
                size = 0
            self.groups[-1].append(q)
            size += numel(q)
        self.offsets: dict[int, int] = {}
        offset = 0
        for q in params:
            self.offsets[id(q)] = offset
            offset += numel(q)
        self.total = offset
        self.flat: list[dict[str, torch.Tensor]] = []
        self.grads: dict[int, torch.Tensor] = {}  # views into grad_buffer
        # stage 2's grads_in_partition comes with the first reduction; stage 3's grad_partitions_flat_buffer with the
        # optimizer (DeepSpeedZeroOptimizer_Stage3.__init__), kept for the run
        self.grad_buffer: torch.Tensor | None = None
        if stage == 3 and params:
            self.grad_buffer = torch.zeros(self.total, dtype=params[0].dtype, device=device)

    def init_state(self) -> None:
        """The flat fp32 master partition and AdamW's two moments per (sub-)group."""
        if self.flat:
            return
        for group in self.groups:
            n = sum(self.numel(q) for q in group)
            self.flat.append({name: torch.zeros(n, dtype=torch.float32, device=self.device)
                              for name in ("master", "m", "v")})

    def accumulate(self, q: torch.Tensor, grad: torch.Tensor) -> None:
        """Copy (or add) this rank's part of `q`'s reduced gradient into the flat gradient buffer."""
        if self.grad_buffer is None:
            self.grad_buffer = torch.empty(self.total, dtype=grad.dtype, device=self.device)
        view = self.grads.get(id(q))
        if view is None:
            start = self.offsets[id(q)]
            view = self.grads[id(q)] = self.grad_buffer[start : start + self.numel(q)]
            view.copy_(grad)
        else:
            view.add_(grad)

    def grad(self, q: torch.Tensor) -> torch.Tensor | None:
        """This rank's part of `q`'s gradient: a slice of the full one at stage 1, a view into the buffer above."""
        if self.stage == 1:
            return None if q.grad is None else q.grad.reshape(-1)[: self.numel(q)]
        return self.grads.get(id(q))

    def _drop(self, q: torch.Tensor) -> None:
        """free_grad_in_param_list / zero_grad(set_to_none): stage 3's views into its kept buffer stay."""
        if self.stage == 1:
            q.grad = None
        elif self.stage == 2:
            self.grads.pop(id(q), None)

    @torch.no_grad()
    def step(self) -> None:
        """DeepSpeed's step: the fp64 norm copies, then per (sub-)group flatten, upcast, free, update, write back."""
        self.init_state()
        grads = {id(q): g for q in self.params if (g := self.grad(q)) is not None}
        if not grads:
            return
        norms = [torch.linalg.vector_norm(g.double()) for g in grads.values()]
        total_norm = torch.stack(norms).square().sum().float()
        del norms
        for group, st in zip(self.groups, self.flat):
            present = [q for q in group if id(q) in grads]
            if not present:
                continue
            flat = torch.cat([grads[id(q)].reshape(-1) for q in present])
            single = flat.to(torch.float32)
            del flat
            for q in present:
                self._drop(q)
                del grads[id(q)]
            if self.stage == 2 and not grads:  # the last views gone: grads_in_partition is freed before the update
                self.grads.clear()
                self.grad_buffer = None
            self._update(st, single[: st["master"].numel()])
            del single
            for q in present:
                start = self.offsets[id(q)] - self.offsets[id(group[0])]
                q.reshape(-1)[: self.numel(q)].copy_(st["master"][start : start + self.numel(q)])
        del total_norm

    def _update(self, st: dict[str, torch.Tensor], g: torch.Tensor) -> None:
        """AdamW on the flat partition: DeepSpeed's FusedAdam (and torch's fused) in place; torch's foreach AdamW
        with its sqrt(v) temporary the size of the partition."""
        lr, wd = 1e-4, 0.01
        master, m, v = st["master"], st["m"], st["v"]
        m.lerp_(g, 0.1)
        v.mul_(0.999).addcmul_(g, g, value=0.001)
        master.mul_(1 - lr * wd)
        if self.fused:
            master.add_(g, alpha=-lr)
            return
        denom = v.sqrt()
        denom.add_(1e-8)
        master.addcdiv_(m, denom, value=-lr)
        del denom

    def zero_grad(self) -> None:
        """Stage 3's gradients stay in their buffer (overwritten by the next backward); the others are gone."""
        for q in self.params:
            self._drop(q)
