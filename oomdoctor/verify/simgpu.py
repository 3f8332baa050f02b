"""The simulated GPU: a Python PrivateUse1 device `simgpu`, CUDA-like autocast and SDPA, and a storage tracker.

Everything here imports torch; only trial subprocesses import this module.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from oomdoctor.verify.reduce import global_scratch
from oomdoctor.verify.rounding import round_size

DEVICE = "simgpu"


class SimUnavailable(RuntimeError):
    """This torch build lacks the experimental PrivateUse1 Python-backend API the simulator needs."""


_lock = threading.Lock()
_ready = False
_libs: list[Any] = []  # keep torch.library registrations alive


class _Backend:
    """The `torch.simgpu` module PyTorch expects a registered backend to have."""

    def is_initialized(self) -> bool:
        return True

    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def device_count(self) -> int:
        return 1

    def _is_in_bad_fork(self) -> bool:
        return False

    def manual_seed_all(self, seed: int) -> None:
        return None

    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        return [torch.float16, torch.bfloat16]

    def is_bf16_supported(self) -> bool:
        return True


def setup() -> torch.device:
    """Register `simgpu` once per process (feature-detected) and return its device."""
    global _ready
    with _lock:
        if _ready:
            return torch.device(DEVICE, 0)
        reg = getattr(torch.utils, "backend_registration", None)
        setup_fn = getattr(reg, "_setup_privateuseone_for_python_backend", None)
        acc = getattr(torch._C, "_acc", None)
        if setup_fn is None or acc is None or not hasattr(acc, "register_python_privateuseone_hook"):
            raise SimUnavailable(
                f"torch {torch.__version__} has no PrivateUse1 Python-backend API "
                "(torch.utils.backend_registration._setup_privateuseone_for_python_backend); "
                "the simulated GPU needs torch 2.6-2.13 — use --device cuda or another torch"
            )
        setup_fn(rename=DEVICE, backend_module=_Backend())
        _register_autocast()
        _register_sdpa()
        _register_backward_kernels()
        _ready = True
        return torch.device(DEVICE, 0)


# --- CUDA autocast policy (aten/src/ATen/autocast_mode.cpp, CUDA lists; subset that matters for memory) -----------

_LOWER = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm", "conv1d", "conv2d", "prelu",
          "scaled_dot_product_attention", "_convolution", "chain_matmul")
_FP32 = ("softmax.int", "log_softmax.int", "layer_norm", "group_norm", "cross_entropy_loss", "nll_loss",
         "mse_loss", "l1_loss", "smooth_l1_loss", "binary_cross_entropy_with_logits", "kl_div", "exp", "log",
         "log1p", "rsqrt", "reciprocal", "pow.Tensor_Scalar", "logsumexp", "cumsum", "norm.Scalar", "sum",
         "prod", "softplus", "cosine_similarity", "dist", "cdist", "erfinv")
_AUTOCAST_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)  # type: ignore[attr-defined]


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != dtype \
            and value.device.type == DEVICE:
        return value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _autocast_kernel(op: Any, target: torch.dtype | None):
    def kernel(*args: Any, **kwargs: Any) -> Any:
        dtype = target or torch.get_autocast_dtype(DEVICE)
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
            return op(*_cast(args, dtype), **_cast(kwargs, dtype))
    return kernel


def _register_autocast() -> None:
    lib = torch.library.Library("aten", "IMPL")
    _libs.append(lib)
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    _libs.append(fallback)
    for names, target in ((_LOWER, None), (_FP32, torch.float32)):
        for name in names:
            base, _, overload = name.partition(".")
            packet = getattr(torch.ops.aten, base, None)
            if packet is None:
                continue
            op = getattr(packet, overload or "default", None)
            if op is None:
                continue
            lib.impl(name, _autocast_kernel(op, target), "AutocastPrivateUse1")


# --- SDPA: pick the fused kernel CUDA would pick (sdp_utils: flash for fp16/bf16, else mem-efficient) -------------

def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    aten = torch.ops.aten
    half = query.dtype in (torch.float16, torch.bfloat16)
    if half and attn_mask is None and query.shape[-1] <= 256:
        # FlashAttention takes grouped key/value heads as they are (sdp_utils.cpp: flash supports grouped-query
        # attention), so only the unexpanded key and value are kept for backward, as on CUDA (measured on an H200)
        return aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale)[0]
    grouped = enable_gqa and key.shape[-3] != query.shape[-3]
    if query.dtype in (torch.float16, torch.bfloat16, torch.float32) and not grouped:
        needs_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        return aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, needs_lse, dropout_p, is_causal, scale=scale)[0]
    # The math kernel: the memory-efficient one takes no grouped-query attention (sdp_utils.cpp), so CUDA runs grouped
    # heads outside FlashAttention here, repeating them and materialising the scores (an H200: fp32, 24 query and 8
    # key/value heads, 2 x 2048 tokens took 3.49 GB where the same heads ungrouped took 0.30 GB)
    return aten._scaled_dot_product_attention_math(query, key, value, attn_mask, dropout_p, is_causal,
                                                   scale=scale, enable_gqa=grouped)[0]


def _register_sdpa() -> None:
    lib = torch.library.Library("aten", "IMPL")
    _libs.append(lib)
    lib.impl("scaled_dot_product_attention", _sdpa, "AutogradPrivateUse1")


# --- backward kernels CUDA runs as one op -------------------------------------------------------------------------
# silu_backward and mish_backward have CUDA kernels (one output each); elsewhere PyTorch decomposes them into their
# formulas (math_silu_backward: sigmoid, 1 - s, x * (1 - s), 1 + ..., s * ..., grad * ...; math_mish_backward:
# softplus, tanh, sigmoid, ...), and the decompositions' temporaries (six and seven tensors the input's size) were
# counted as a CUDA step's. Registered for the simulated device: the kernel's one output, as CUDA allocates it.
# These are all the aten ops with a CPU kernel and a CompositeImplicitAutograd fallback but none for PrivateUse1
# but native_channel_shuffle, whose fallback makes the one output a kernel would (a view, then one copy);
# tests/test_verify_sim.py enumerates them, so a torch that adds one fails there.
ONE_OUTPUT_BACKWARD = ("silu_backward", "mish_backward")


def _one_output_backward(grad_output: torch.Tensor, self: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(grad_output, memory_format=torch.contiguous_format)


def _register_backward_kernels() -> None:
    lib = torch.library.Library("aten", "IMPL")
    _libs.append(lib)
    for name in ONE_OUTPUT_BACKWARD:
        lib.impl(name, _one_output_backward, "AutogradPrivateUse1")


# --- storage tracker --------------------------------------------------------------------------------------------

def round_block(nbytes: int) -> int:
    """Round a storage size the way the caching allocator's round_size does at minimum (512 B)."""
    return round_size(nbytes)


def _align(n: int, to: int) -> int:
    """`n` rounded up to a multiple of `to` (a kernel's tile)."""
    return -(-n // to) * to


_MM_OPS = {"mm", "addmm", "bmm", "baddbmm"}
_CUBLAS_OPS = _MM_OPS | {"_addmm_activation", "addmv", "mv", "addbmm", "dot", "vdot", "addr"}  # a cuBLAS handle
_CUBLASLT_OPS = {"addmm", "_addmm_activation"}  # with a 1-D bias these take ATen's cuBLASLt path (gemm_and_bias)


def flash_backward_scratch(args: tuple) -> list[int]:
    """Scratch of FlashAttention-2's backward as PyTorch runs it (aten/src/ATen/native/transformers/cuda/flash_attn/
    flash_api.cpp, mha_bwd, non-deterministic): `softmax_d` (batch, heads, seqlen_q rounded to 128) and `dq_accum`
    (batch, seqlen_q rounded, heads, head_dim rounded to 32, or 256 above 192), both fp32, beside dq/dk/dv; with
    fewer key/value heads than query heads (grouped-query attention) also `dk_expanded` and `dv_expanded` (batch,
    seqlen_k, heads, head_dim) in the query's dtype, which the kernel fills per query head and then sums into dk/dv.
    On an H200 (torch 2.11) one request of their total (+256 bytes) was seen for a Llama-3.2-3B layer."""
    q, k = args[1], args[2]  # _scaled_dot_product_flash_attention_backward(grad_out, query, key, ...): (b, h, s, d)
    b, h, s, d = q.shape
    s_r = _align(s, 128)
    d_r = _align(d, 32) if d <= 192 else 256
    scratch = [b * h * s_r * 4, b * s_r * h * d_r * 4]
    if k.shape[1] != h:
        scratch += [b * k.shape[2] * h * d * q.element_size()] * 2
    return scratch


def efficient_backward_scratch(args: tuple) -> list[int]:
    """Scratch of the memory-efficient (CUTLASS) attention backward as PyTorch runs it on CUDA (aten/src/ATen/native/
    transformers/cuda/attention_backward.cu, _efficient_attention_backward; mem_eff_attention/kernel_backward.h):
    - fp16/bf16: `delta` (batch, heads, queries) fp32, then the kernel's workspace, zeroed when keys are split: the
      fp32 accumulator of dq (kNeedsAccumGradQ: the output is not fp32), queries rounded to the kernel's row block
      (128 for head dims 65-128, else 64) by the head dim rounded to 64, per batch and head; with head dims above
      128 (dk, dv not kept in registers) also fp32 accumulators of dk and dv per key split (keys rounded to 64,
      splits capped at 200 / (batch x heads)).
    - fp32: no workspace (the kernel accumulates in its output's dtype), but delta is computed outside the kernel
      (kKernelComputesDelta holds for half only) as (grad_out * out).sum(-1).transpose(-2, -1).contiguous(): the
      product (the output's size, fp32), its sum and the transposed copy live to the end of that expression.
    Both take the output's gradient in (batch, queries, heads, dim) order and copy it when it is not contiguous there
    (`grad_out.contiguous()`); a model's step hands it over contiguous, the gradient of a sum is an expanded one.
    An H200 (torch 2.11, bench/measured/sdpa-h200-2026-11-28.json: fp32, 2 x 24 heads x 2048 x 128, causal, the
    backward of a sum) measured 303,170,560 bytes over the inputs; the simulated device gives 303,171,584 (1 KiB over,
    as its forward is; 252,839,936 without the copy, 251,659,264 with no scratch at all). sm70's own delta path is not
    modelled."""
    q, k, v = args[1], args[2], args[3]  # (b, h, m, d) as SDPA takes them
    b, h, m, d = q.shape
    n, dv = k.shape[2], v.shape[3]
    rows = b * h * m * 4
    if q.dtype == torch.float32:
        return [*_grad_out_copy(args), b * h * m * dv * 4, rows, rows]
    widest = max(d, dv)
    block_i = 128 if 64 < widest <= 128 else 64
    gq = _align(m, block_i) * _align(d, 64)
    gkv = 0
    if widest > 128:
        splits = max(1, min(-(-n // 64), 200 // (b * h)))
        gkv = splits * _align(n, 64) * (_align(d, block_i) + _align(dv, block_i))
    return [*_grad_out_copy(args), rows, b * h * _align(gq + gkv, 4) * 4]


def _grad_out_copy(args: tuple) -> list[int]:
    """The output gradient's contiguous copy an attention backward makes when (batch, queries, heads, dim) order is
    not how it is laid out."""
    grad_out = args[0]
    if grad_out.transpose(1, 2).is_contiguous():
        return []
    return [grad_out.numel() * grad_out.element_size()]


def safe_softmax_scratch(args: tuple) -> list[int]:
    """What `_safe_softmax` (the math attention kernel's softmax, aten/src/ATen/native/transformers/attention.cpp)
    allocates beside its output: `self.isneginf()`, a bool the scores' size, and the rows `all()` of it finds fully
    masked; the output is the softmax's own, zeroed in place there (`where_out`). An H200 (torch 2.11) measured the
    forward of fp32 grouped-query attention at 2 x 24 heads x 2048 tokens 224 MiB over what the simulated device had:
    this 192 MiB bool and the 32 MiB cuBLAS workspace."""
    scores, dim = args[0], args[1] if len(args) > 1 else -1
    return [scores.numel(), scores.numel() // max(1, scores.shape[dim])]


_SCRATCH = {"_scaled_dot_product_flash_attention_backward": flash_backward_scratch,
            "_scaled_dot_product_efficient_attention_backward": efficient_backward_scratch,
            "_safe_softmax": safe_softmax_scratch}

_REDUCE_OPS = {"sum", "mean"}  # ATen's gpu_reduce_kernel with a plain accumulator (Reduce.cuh)


def reduce_scratch(args: tuple, figures: tuple[int, int]) -> list[int]:
    """The staging buffer and semaphores CUDA's sum/mean kernel allocates for `args` (self, dim, ...) on a GPU with
    these (multiprocessors, threads per multiprocessor)."""
    x = args[0]
    dims = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) and args[1] else range(x.dim())
    reduced = {d % x.dim() for d in dims} if x.dim() else set()
    wide = x.dtype in (torch.float64, torch.complex64, torch.complex128) or not x.dtype.is_floating_point
    return global_scratch(x.shape, x.stride(), reduced, 8 if wide else 4, figures)


# cuDNN convolutions (aten/src/ATen/native/cudnn/Conv_v8.cpp run_conv_plan: the plan's workspace from the caching
# allocator around each execution): the forward is one kernel, the backward one per gradient asked for (data, filter)
_CONV_OPS = {"convolution", "convolution_backward"}


def _conv_kernels(name: str, args: tuple) -> int:
    if name != "convolution_backward":
        return 1
    mask = args[-1] if args and isinstance(args[-1], (list, tuple)) else (True, True, True)
    return int(bool(mask[0])) + int(bool(mask[1]))


def _on(args: tuple, device_type: str) -> bool:
    return bool(args) and isinstance(args[0], torch.Tensor) and args[0].device.type == device_type


class StorageTracker(TorchDispatchMode):
    """Emits an ordered trace of ("a", id, bytes) / ("f", id, 0) for every storage on the tracked device, and the
    stream events allocator.replay reads: ("s", stream, 0) before the first allocation on another stream than the
    last one's, ("r", id, stream) when a storage is recorded on a stream, ("e", 0, 0) when the other streams' work
    is known done. Everything is on stream 0 (the compute stream) unless `on_stream` says otherwise.

    Enter it *inside* FakeTensorMode so it sees ops first. Frees come from weakref callbacks on the storage
    object, which fire in whichever thread drops the last reference (backward runs on the device thread).
    It also counts matmul and attention FLOPs, the compute estimate verify reports on the simulator, and allocates
    the cuBLAS and cuBLASLt workspaces (`workspaces`: their bytes, see verify/libraries.py) the first time each
    thread runs a matrix product, kept for the rest of the run as on CUDA; FlashAttention's backward scratch and,
    given `conv_workspace`, each cuDNN convolution kernel's workspace live around their op only; given
    `gpu_figures`, so does the staging buffer of a sum or mean over outer dimensions (verify/reduce.py).
    """

    def __init__(self, device_type: str = DEVICE, workspaces: tuple[int, int] = (0, 0), conv_workspace: int = 0,
                 gpu_figures: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.device_type = device_type
        self.workspaces = workspaces
        self.conv_workspace = conv_workspace
        self.gpu_figures = gpu_figures  # (multiprocessors, threads per multiprocessor): reductions' global scratch
        self._workspace_held: set[tuple[int, int]] = set()  # (thread, 0 cuBLAS / 1 cuBLASLt) already held
        self.trace: list[tuple[str, int, int]] = []
        self.live = 0
        self.peak = 0
        self.flops = 0
        self._refs: dict[int, weakref.ref] = {}
        self._next = 0
        self.paused = 0
        self.stream = 0  # what new storages are allocated on
        self._trace_stream = 0  # the stream the trace's allocations are on so far

    @contextlib.contextmanager
    def on_stream(self, stream: int):
        """Storages created inside are allocated on `stream` (torch.cuda.stream(s) around them)."""
        saved, self.stream = self.stream, stream
        try:
            yield
        finally:
            self.stream = saved

    def record_stream(self, t: torch.Tensor, stream: int) -> None:
        """Tensor.record_stream: `t`'s storage is used on `stream`, so its free waits for that stream's work."""
        sid = getattr(t.untyped_storage(), "_oomdoctor_sid", None)
        if sid is not None and sid >= 0 and sid in self._refs:
            self.trace.append(("r", sid, stream))
            self._recorded(sid, stream)

    def process_events(self) -> None:
        """Every stream's work recorded so far is done: storages freed while waiting for it can be reused."""
        self.trace.append(("e", 0, 0))
        self._events_done()

    @contextlib.contextmanager
    def untracked(self):
        """Storages created inside are not device memory (e.g. modelled as offloaded to the host)."""
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1

    def _on_free(self, sid: int, nbytes: int):
        def callback(_ref: Any) -> None:
            self._refs.pop(sid, None)
            self._free(sid, nbytes)
        return callback

    def _free(self, sid: int, nbytes: int) -> None:
        """Count the end of device allocation `sid` of `nbytes`."""
        self.live -= nbytes
        self.trace.append(("f", sid, nbytes))
        self._freed(sid)

    def _allocated(self, sid: int, nbytes: int) -> None:
        """A storage came to life (the live simulation allocates it from the allocator model here)."""

    def _freed(self, sid: int) -> None:
        """A storage died."""

    def _recorded(self, sid: int, stream: int) -> None:
        """A live storage was recorded on `stream`."""

    def _events_done(self) -> None:
        """The recorded streams' work is done."""

    def _add(self, nbytes: int, kind: str = "a") -> int:
        """Count a new device allocation of `nbytes` (already rounded) and return its id."""
        sid = self._next
        self._next += 1
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        if self.stream != self._trace_stream:
            self._trace_stream = self.stream
            self.trace.append(("s", self.stream, 0))
        self.trace.append((kind, sid, nbytes))
        return sid

    def _workspace(self, name: str, args: tuple) -> None:
        """Allocate the library workspaces a matrix product needs on this thread, once (never freed, as on CUDA)."""
        if self.paused or name not in _CUBLAS_OPS or not _on(args, self.device_type):
            return
        lt = name in _CUBLASLT_OPS and args[0].dim() == 1  # addmm(bias, x, w) with a 1-D bias: gemm_and_bias
        for kind in (0, 1) if lt else (0,):
            key = (threading.get_ident(), kind)
            if key not in self._workspace_held:
                self._workspace_held.add(key)
                nbytes = round_block(self.workspaces[kind])
                self._allocated(self._add(nbytes), nbytes)

    def _transients(self, sizes: list[int]) -> None:
        """Allocate scratch buffers an op's kernel takes from the caching allocator, in order, then free them all (the
        op's outputs are live by then, as they are when a CUDA kernel runs)."""
        sids = []
        for size in sizes:
            nbytes = round_block(size)
            sid = self._add(nbytes)
            self._allocated(sid, nbytes)
            sids.append((sid, nbytes))
        for sid, nbytes in sids:
            self._free(sid, nbytes)

    def _conv_scratch(self, nbytes: int) -> None:
        """A cuDNN convolution's workspace around its kernel: at most `nbytes`, less when memory is short (the trace's
        ("w", id, bytes); a live allocator halves it until it fits)."""
        sid = self._add(nbytes, kind="w")
        self._allocated_upto(sid, nbytes)
        self._free(sid, nbytes)

    def _allocated_upto(self, sid: int, nbytes: int) -> None:
        """A workspace of at most `nbytes` came to life (the live simulation gives it what fits)."""

    def _track(self, t: torch.Tensor) -> None:
        if t.device.type != self.device_type:
            return
        storage = t.untyped_storage()
        if getattr(storage, "_oomdoctor_sid", None) is not None:
            return
        if self.paused:
            storage._oomdoctor_sid = -1  # type: ignore[attr-defined]
            return
        nbytes = round_block(storage.nbytes()) if storage.nbytes() else 0
        if nbytes == 0:
            return
        try:
            storage._oomdoctor_sid = self._next  # type: ignore[attr-defined]
        except AttributeError:
            return
        sid = self._add(nbytes)
        self._refs[sid] = weakref.ref(storage, self._on_free(sid, nbytes))
        self._allocated(sid, nbytes)

    def _count_flops(self, name: str, args: tuple) -> None:
        if name in _MM_OPS:
            a, b = (args[1], args[2]) if name.startswith(("addmm", "baddbmm")) else (args[0], args[1])
            batch = a.shape[0] if a.dim() == 3 else 1
            self.flops += 2 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]
        elif name.startswith("_scaled_dot_product") and not name.endswith("_backward"):
            q, k = args[0], args[1]
            b, h, s, d = q.shape
            self.flops += 4 * b * h * s * k.shape[-2] * d
        elif name.startswith("_scaled_dot_product") and name.endswith("_backward"):
            q = args[1]
            b, h, s, d = q.shape
            self.flops += 10 * b * h * s * args[2].shape[-2] * d

    def __enter__(self):
        global ACTIVE
        ACTIVE = self
        return super().__enter__()

    def __exit__(self, *exc):
        global ACTIVE
        ACTIVE = None
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]  # the op without its overload: "mm" of "mm.default"
        if self.workspaces[0]:
            self._workspace(name, args)
        out = func(*args, **(kwargs or {}))
        for t in _tensors(out):
            self._track(t)
        if name in _SCRATCH and not self.paused:
            self._transients(_SCRATCH[name](args))
        if self.gpu_figures and name in _REDUCE_OPS and not self.paused and _on(args, self.device_type):
            self._transients(reduce_scratch(args, self.gpu_figures))
        if self.conv_workspace and name in _CONV_OPS and not self.paused and _on(args, self.device_type):
            for _ in range(_conv_kernels(name, args)):
                self._conv_scratch(round_block(self.conv_workspace))
        with contextlib.suppress(AttributeError, IndexError, TypeError, ValueError):
            self._count_flops(name, args)
        return out


ACTIVE: StorageTracker | None = None


def untracked():
    """A context where new storages are not counted (no-op outside a tracked replay)."""
    return ACTIVE.untracked() if ACTIVE is not None else contextlib.nullcontext()


def on_stream(stream: int):
    """A context where new storages are allocated on `stream` (no-op outside a tracked replay)."""
    return ACTIVE.on_stream(stream) if ACTIVE is not None else contextlib.nullcontext()


def record_stream(t: torch.Tensor, stream: int) -> None:
    """`t.record_stream(stream)` on the simulated device (no-op outside a tracked replay)."""
    if ACTIVE is not None:
        ACTIVE.record_stream(t, stream)


def process_events() -> None:
    """The other streams' work is done (no-op outside a tracked replay)."""
    if ACTIVE is not None:
        ACTIVE.process_events()


def _tensors(value: Any):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


class LiveTracker(StorageTracker):
    """Allocates every storage from the caching-allocator model as it is created, so the program itself meets the
    OOM at the failing allocation (as on a GPU of that size), with the allocator's state for `oomdoctor.capture`."""

    def __init__(self, allocator: Any, history: bool = False, workspaces: tuple[int, int] = (0, 0),
                 conv_workspace: int = 0, gpu_figures: tuple[int, int] | None = None) -> None:
        super().__init__(workspaces=workspaces, conv_workspace=conv_workspace, gpu_figures=gpu_figures)
        self.allocator, self.history = allocator, history
        self.blocks: dict[int, Any] = {}
        self.frames: dict[int, list[dict[str, Any]]] = {}  # id(block) -> its stack, innermost first

    def _allocated(self, sid: int, nbytes: int) -> None:
        from oomdoctor.verify.allocator import OutOfMemory

        try:
            block = self.allocator.malloc(nbytes, self.stream)
        except OutOfMemory:
            shown = self.allocator.shown_size(nbytes)
            self._report_oom(shown)
            raise torch.OutOfMemoryError(self.allocator.oom_message(shown)) from None
        self.blocks[sid] = block
        if self.history:
            self.frames[id(block)] = _python_frames()

    def _allocated_upto(self, sid: int, nbytes: int) -> None:
        from oomdoctor.verify.allocator import malloc_at_most

        block = malloc_at_most(self.allocator, nbytes, self.stream)
        if block is not None:
            self.blocks[sid] = block

    def _freed(self, sid: int) -> None:
        block = self.blocks.pop(sid, None)
        if block is not None:
            self.frames.pop(id(block), None)
            self.allocator.free(block)

    def _recorded(self, sid: int, stream: int) -> None:
        if sid in self.blocks:
            self.allocator.record_stream(self.blocks[sid], stream)

    def _events_done(self) -> None:
        self.allocator.process_events()

    def snapshot(self) -> dict[str, Any]:
        """The modelled state as `torch.cuda.memory._snapshot()` would give it (segments; no trace)."""
        from oomdoctor.verify.allocator import snapshot_segments

        return {"segments": snapshot_segments(self.allocator, self.blocks.values(),
                                              lambda b: self.frames.get(id(b))), "device_traces": []}

    def _report_oom(self, requested: int) -> None:
        """Tell an installed `oomdoctor.capture` hook, as PyTorch's OOM observer would on CUDA."""
        import sys

        capture = sys.modules.get("oomdoctor.capture")
        hook = capture.active() if capture is not None else None
        if hook is not None:
            a = self.allocator
            hook.observe_simulated(requested, a.allocated, max(0, a.capacity - a.reserved - a.non_pytorch),
                                   self.snapshot(), a.total_capacity)


def _python_frames(limit: int = 32) -> list[dict[str, Any]]:
    """The Python stack of an allocation, innermost first, without torch's and this package's own frames."""
    import traceback

    frames = []
    for f in reversed(traceback.extract_stack(limit=limit + 16)):
        if "/torch/" in f.filename or "/oomdoctor/verify/" in f.filename or f.filename.startswith("<frozen"):
            continue
        frames.append({"filename": f.filename, "line": f.lineno or 0, "name": f.name})
        if len(frames) >= limit:
            break
    return frames


@contextlib.contextmanager
def simulate(capacity: int | str, *, alloc_conf: str = "", non_pytorch: int | str = 0, history: bool = False,
             gpu: str | None = None, cudnn_workspace: int | str = 0):
    """Run the code inside on a simulated GPU of `capacity` ("24GiB" or bytes): tensors on the device it yields are
    fake (no memory, no compute) and allocated from the caching-allocator model, so an allocation that would not
    fit raises torch.OutOfMemoryError with CUDA's message there; `gpu` (its name: H100, A100) sizes the cuBLAS
    workspaces and the reductions' staging buffers, `cudnn_workspace` what each convolution kernel's workspace asks
    for (less when memory is short). `history` records each allocation's Python stack
    (for `oomdoctor.capture`'s top allocations). Build the model inside the block: `Module.to(device)` and
    `.cuda()` are no-ops there (as in verify's trials; restored on exit)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from oomdoctor.units import parse_size
    from oomdoctor.verify.allocator import AllocConf, CachingAllocator
    from oomdoctor.verify.libraries import workspaces
    from oomdoctor.verify.reduce import gpu_figures
    from oomdoctor.verify.trial import patched_for_sim

    def size(v: int | str) -> int:
        return v if isinstance(v, int) else parse_size(v)

    device = setup()
    allocator = CachingAllocator(size(capacity), AllocConf.parse(alloc_conf), size(non_pytorch))
    # as in verify's trials (model.to(gpu)/.cuda() keep the model where it was built), and restored on exit
    tracker = LiveTracker(allocator, history, workspaces(gpu), size(cudnn_workspace), gpu_figures(gpu))
    with patched_for_sim(torch), FakeTensorMode(allow_non_fake_inputs=True), tracker, torch.device(device):
        yield device
