"""The table of OOM message formats: for each, when to try it, its pattern, event kind, era and figures.

A new message era is one `MessageFormat` entry here (its pattern in `formats.py`) plus one example line
in `tests/test_patterns.py` (PyTorch's eras) or `tests/test_formats_battery.py` (the other libraries' messages).
Order matters: the first entry that matches a message wins.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

import regex

from oomdoctor.parse import formats as P
from oomdoctor.parse.lazyregex import lazy
from oomdoctor.parse.model import OtherProcess
from oomdoctor.units import GIB, UnitError, parse_size, to_bytes

Match: TypeAlias = "regex.Match[str]"
Figures: TypeAlias = dict[str, Any]

CLASSIFY_CHARS = 16384  # a message is classified on its first 16 KiB (a longer one is glued text)
PROCESS_SELF_MARGIN_BYTES = 4 * GIB  # a container's own pid sits at most this far above PyTorch's reserve
# A sole listed process whose memory and the free memory make up the card, to this margin, is the failing one (its
# NVML figure may lag PyTorch's reserve by as much)
SOLE_PROCESS_MARGIN_BYTES = GIB
DEVICE_KIND = {"CUDA": "cuda_oom", "HIP": "hip_oom", "XPU": "xpu_oom", "NPU": "cuda_oom", "MLU": "cuda_oom",
               "GCU": "cuda_oom", "MUSA": "cuda_oom"}
TF_DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
                  "int32": 4, "int64": 8, "int8": 1, "uint8": 1, "int16": 2, "bool": 1, "complex64": 8, "qint8": 1,
                  "uint16": 2, "uint32": 4, "uint64": 8, "complex128": 16, "float128": 16}
# TensorFlow's device names ("/job:localhost/replica:0/task:0/device:GPU:0"; before 1.4 ".../task:0/gpu:0"), its BFC
# allocator's ("GPU_0_bfc"), NCCL's warning prefix ("[3] ... NCCL WARN"), a CUDA call's check in ONNX Runtime and
# CNTK ("CUBLAS failure 3: CUBLAS_STATUS_ALLOC_FAILED ; GPU=0 ; hostname=...")
_GPU_INDEX = lazy(r"device:GPU:(?P<i>\d{1,20})|\bGPU[_ ](?P<j>\d{1,20})_bfc|\[(?P<k>\d{1,20})\] \S+ NCCL WARN"
                  r"|/task:\d{1,6}/gpu:(?P<l>\d{1,20})\b|; GPU=(?P<m>\d{1,6}) ;")

_OOM_WORDS = ("out of memory", "Tried to allocate")
_XLA_WORDS = ("RESOURCE_EXHAUSTED", "esource exhausted", "ran out of memory", "Ran out of memory")


@dataclass(frozen=True)
class MessageFormat:
    """One message format: tried when any `gate` string is in the text (and every `also` string), unless `veto` matches."""

    name: str
    gate: tuple[str, ...]
    pattern: regex.Pattern[str] | None  # None: the gate alone identifies the message (no figures)
    kind: str | Callable[[Match | None, str], str]
    figures: Callable[[Match], Figures] | None = None
    era: str | Callable[[Match, str], str] | None = None
    also: tuple[str, ...] = ()
    veto: regex.Pattern[str] | None = None
    bare: bool = False  # the gate alone is enough when the pattern does not match (the match is then None)
    complete: bool = True  # False for a fallback that only gives part of a message's figures
    recognise_only: bool = False  # the pattern only recognises the message; it has no figures (match dropped)
    same_failure: bool = False  # every such message near another is the same failure (one per failing call site)
    single_line: bool = False  # the message is its line alone: never joined with the lines after it
    gives_way: bool = False  # a stand-in (a notebook's traceback header): the failure only when no message follows
    says: str | None = None  # what the message itself names as the failure (the event's message_says), unless its figures do
    own_allocator: bool = False  # a library that allocates device memory itself (not through PyTorch's caching allocator)
    caught: bool = False  # the library caught the failure and went on (the event is not fatal)

    def admits(self, text: str) -> bool:
        """The cheap string test that decides whether the pattern is tried at all."""
        return any(g in text for g in self.gate) and all(a in text for a in self.also)

    def kind_of(self, m: Match | None, text: str) -> str:
        return self.kind if isinstance(self.kind, str) else self.kind(m, text)

    def era_of(self, m: Match | None, text: str) -> str | None:
        if callable(self.era):
            return self.era(m, text) if m is not None else None
        return self.era


class Classified(NamedTuple):
    """A recognised message: its event kind, the pattern's match (None for a bare message) and its format."""

    kind: str
    match: Match | None
    fmt: MessageFormat

    @property
    def full(self) -> bool:
        """The message matched its format in full (not a fallback, not bare)."""
        return self.match is not None and self.fmt.complete


def _size(m: Match, group: str) -> int | None:
    v = m.groupdict().get(group)
    return parse_size(v) if v else None


def _requested_only(m: Match) -> Figures:
    """A message that prints the request in bytes and nothing else."""
    return {"requested_bytes": int(m["requested"])}


def _caching_common(m: Match) -> Figures:
    req = m["requested"]
    gpu = m.groupdict().get("gpu")
    f: Figures = {"requested_bytes": None if req.startswith("more") else parse_size(req),
                  "gpu_index": int(gpu) if gpu else None}
    for key, group in (("total_bytes", "total"), ("free_bytes", "free"), ("allocated_bytes", "allocated"),
                       ("allowed_bytes", "allowed"), ("private_pools_bytes", "private")):
        f[key] = _size(m, group)
    return f


def _malloc_async(m: Match) -> Figures:
    """The cudaMallocAsync backend: no cache of its own, so nothing reserved-but-unallocated; its "PyTorch limit" is
    the memory fraction's cap (kept as allowed_bytes only when below the device: unset, it prints 17179869184.00 GiB)."""
    f: Figures = {"gpu_index": int(m["gpu"]), "detail": {"allocator_backend": "cudaMallocAsync"}}
    for key, group in (("requested_bytes", "requested"), ("allocated_bytes", "allocated"), ("total_bytes", "total"),
                       ("free_bytes", "free")):
        f[key] = _size(m, group)
    limit = _size(m, "limit")
    if limit is not None and f["total_bytes"] is not None and limit < f["total_bytes"]:
        f["allowed_bytes"] = limit
    return f


def _caching_1_0(m: Match) -> Figures:
    """1.0-1.3 print "X cached": the reserved-but-unallocated part."""
    f = _caching_common(m)
    f["reserved_unallocated_bytes"] = _size(m, "cached")
    f["reserved_bytes"] = f["allocated_bytes"] + f["reserved_unallocated_bytes"]
    return f


def _caching_1_4(m: Match) -> Figures:
    f = _caching_common(m)
    f["reserved_bytes"] = _size(m, "reserved")
    f["reserved_unallocated_bytes"] = f["reserved_bytes"] - f["allocated_bytes"]
    return f


def _caching_2_1(m: Match) -> Figures:
    f = _caching_common(m)
    f["reserved_unallocated_bytes"] = _size(m, "unallocated")
    f["reserved_bytes"] = f["allocated_bytes"] + f["reserved_unallocated_bytes"]
    _processes(f, m["procs"])
    return f


def _caching_any(m: Match) -> Figures:
    """A message cut short: whatever it printed before the cut, the process clauses included."""
    f = _caching_common(m)
    if m.groupdict().get("unallocated") and f["allocated_bytes"] is not None:  # cut after its last figure
        f["reserved_unallocated_bytes"] = _size(m, "unallocated")
        f["reserved_bytes"] = f["allocated_bytes"] + f["reserved_unallocated_bytes"]
    if m.groupdict().get("reserved") and f["allocated_bytes"] is not None:  # 1.4-2.0's, cut inside "in total by PyTorch"
        f["reserved_bytes"] = _size(m, "reserved")
        f["reserved_unallocated_bytes"] = f["reserved_bytes"] - f["allocated_bytes"]
    if m["procs"]:
        _processes(f, m["procs"])
    return f


def _processes(f: Figures, procs: str) -> None:
    """Split the `Process N has X memory in use` clauses into this process and the others."""
    others: list[OtherProcess] = []
    for pm in P.PROCESS_CLAUSE.finditer(procs or ""):
        size = parse_size(pm["size"])
        if pm["self"]:
            f["process_in_use_bytes"] = size
        else:
            others.append(OtherProcess(pid=int(pm["pid"]), bytes=size))
    # PyTorch's own hold: its reserve, or at least what it allocated when the message was cut before the reserve
    reserved = f.get("reserved_bytes")
    held = reserved if reserved is not None else f.get("allocated_bytes")
    if "process_in_use_bytes" not in f and others and held is not None:
        # Containers print the failing process under its own pid: it is the one just above PyTorch's reserve.
        me = None if reserved is None else min(
            (p for p in others if 0 <= p.bytes - reserved <= PROCESS_SELF_MARGIN_BYTES),
            key=lambda p: p.bytes - reserved, default=None)
        if me is not None:
            f["process_in_use_bytes"] = me.bytes
            others.remove(me)
        elif len(others) == 1 and _sole_process(f, others[0], held):
            f["process_in_use_bytes"] = others.pop().bytes
    f["other_processes"] = tuple(others)


def _sole_process(f: Figures, p: OtherProcess, held: int) -> bool:
    """The one process the message lists holds all the card's used memory and at least about PyTorch's hold (`held`):
    it is the failing process under a container's pid (NVML's figure may lag the reserve a little)."""
    total, free = f.get("total_bytes"), f.get("free_bytes")
    return total is not None and free is not None and abs(total - free - p.bytes) <= SOLE_PROCESS_MARGIN_BYTES \
        and p.bytes >= held - SOLE_PROCESS_MARGIN_BYTES


def _xla_size(v: str) -> int:
    """XLA prints "1.5G" for GiB."""
    return parse_size(v + "iB" if v[-1] in "KMGT" else v)


def dims_of(shape: str) -> list[int]:
    """The dimensions of a printed shape such as "8, 1024, 4096"."""
    return [int(d) for d in shape.replace(" ", "").split(",") if d]


# NumPy's array-protocol type strings ("<u8", "|S16", "<U32"): kind and size; U counts 4-byte characters.
_NUMPY_TYPESTR = lazy(r"^[<>|=]?(?P<kind>[biufcSUVmMO])(?P<n>\d{1,6})$")
# A structured data type's fields as NumPy prints them: "[('sample_id', '<u8'), ('ptr', '<u8')]" (a field with a
# shape of its own, "('xyz', '<f4', (3,))", is not read: the printed size stands)
_NUMPY_FIELD = lazy(r"\(\s?['\"‘’][^'\"‘’]{0,80}['\"‘’],\s?['\"‘’](?P<t>[<>|=]?\w{1,8})['\"‘’]\)")


def _numpy_itemsize(dtype: str) -> int | None:
    """Bytes per element of a NumPy data type as printed (a name, a type string or a structured type), or None."""
    if dtype.startswith("["):
        fields = [f["t"] for f in _NUMPY_FIELD.finditer(dtype)]
        sizes = [_numpy_itemsize(t) for t in fields]
        whole = len(fields) == dtype.count("(")  # every field read: none has a shape of its own
        return sum(sizes) if fields and whole and all(sizes) else None  # type: ignore[arg-type]
    if (m := _NUMPY_TYPESTR.match(dtype)) is None:
        return TF_DTYPE_BYTES.get(dtype.lower())
    return int(m["n"]) * (4 if m["kind"] == "U" else 1)


def _tensor_bytes(dims: list[int], dtype: str | None) -> int | None:
    """Bytes of a tensor of this shape and dtype (TensorFlow and NumPy names, NumPy's type strings and structured
    types: _numpy_itemsize), or None for an unknown dtype."""
    item = _numpy_itemsize(dtype or "")
    return item * math.prod(dims) if item else None


def _tf_oom(m: Match) -> Figures:
    if m["shape"] is None:
        return {}
    dims = dims_of(m["shape"])
    f: Figures = {"detail": {"shape": dims, "dtype": m["dtype"], "device": m["device"], "allocator": m["allocator"]}}
    n = _tensor_bytes(dims, m["dtype"])
    if n is not None:
        f["requested_bytes"] = n
    return f


def _numpy_alloc(m: Match) -> Figures:
    """NumPy's host allocation failure: the exact request from the shape and dtype, else its rounded size."""
    dims = dims_of(m["shape"])
    n = _tensor_bytes(dims, m["dtype"]) if dims else None
    if n is not None:
        return {"requested_bytes": n, "detail": {"shape": dims, "dtype": m["dtype"]}}
    return {"requested_bytes": parse_size(m["size"].replace(". ", " ").rstrip(".")) if m["size"] else None}


def _kv_cache(m: Match) -> Figures:
    f: Figures = {}
    if m["need"]:
        f["requested_bytes"], f["free_bytes"] = parse_size(m["need"]), parse_size(m["avail"])
    if m["tokens"]:
        f["detail"] = {"kv_cache_tokens": int(m["tokens"])}
    return f


def _caching_era(m: Match, text: str) -> str:
    if m["capword"] == "capacty" or "max_split_size_mb" in text:
        return "2.1"
    if "PYTORCH_ALLOC_CONF" in text:
        return "2.9-2.10"
    if "docs.pytorch.org" in text:
        return "2.11+"
    return "2.2-2.8"


def _device_kind(m: Match | None, text: str) -> str:
    return DEVICE_KIND[(m["device"] if m is not None else None) or "CUDA"]


def _tf_if_named(m: Match | None, text: str) -> str:
    """TensorFlow's BFC allocator, unless it is the copy XLA vendors into jaxlib (external/org_tensorflow, external/xla)."""
    return "tf_oom" if "tensorflow" in text and not JAXLIB_VENDORED.search(text) else "xla_oom"


JAXLIB_VENDORED = lazy(r"external/(?:org_tensorflow|xla|tsl)/")


MESSAGE_FORMATS: tuple[MessageFormat, ...] = (
    # PyTorch's caching allocator, newest era first.
    MessageFormat("CACHING_2_1", _OOM_WORDS, P.CACHING_2_1, _device_kind, _caching_2_1, _caching_era),
    MessageFormat("CACHING_1_4", _OOM_WORDS, P.CACHING_1_4, _device_kind, _caching_1_4,
                  lambda m, text: "1.10-2.0" if "max_split_size_mb" in text else "1.4-2.0"),
    MessageFormat("CACHING_1_0", _OOM_WORDS, P.CACHING_1_0, _device_kind, _caching_1_0, "1.0-1.3"),
    MessageFormat("CACHING_ANY", _OOM_WORDS, P.CACHING_ANY, _device_kind, _caching_any, complete=False),
    MessageFormat("CACHING_2_1_HEADLESS", ("Tried to allocate",), P.CACHING_2_1_HEADLESS, "cuda_oom", _caching_any,
                  complete=False),
    MessageFormat("CACHING_BARE", ("out of memory",), P.CACHING_BARE, _device_kind, recognise_only=True),
    MessageFormat("MALLOC_ASYNC", ("would exceed allowed memory",), P.MALLOC_ASYNC, "cuda_oom", _malloc_async),
    MessageFormat("MALLOC_ASYNC_CUT", ("Allocation on device",), P.MALLOC_ASYNC_CUT, "cuda_oom",
                  lambda m: {"gpu_index": ord(m["devchar"])} if m["devchar"] else {}, complete=False, single_line=True),
    MessageFormat("MPS", _OOM_WORDS, P.MPS, "mps_oom", lambda m: {
        "requested_bytes": _size(m, "requested"), "allocated_bytes": _size(m, "allocated"),
        "total_bytes": _size(m, "total"), "detail": {"other_allocations_bytes": _size(m, "other"), "pool": m["pool"]}}),
    MessageFormat("MPS_BARE", ("MPS backend out of memory",), None, "mps_oom"),
    MessageFormat("MPS_BUFFER_SIZE", ("Invalid buffer size",), P.MPS_BUFFER_SIZE, "mps_oom", lambda m: {
        "requested_bytes": parse_size(m["requested"])}, says="buffer_over_device_limit"),
    MessageFormat("METAL_COMMAND_OOM", ("CallbackErrorOutOfMemory", "Command buffer execution failed: Insufficient"),
                  P.METAL_COMMAND_OOM, "mps_oom",
                  recognise_only=True, same_failure=True, single_line=True, says="metal_out_of_memory"),
    MessageFormat("MLX_METAL_MALLOC", ("[metal::malloc]",), P.MLX_METAL_MALLOC, "mps_oom", lambda m: {
        "requested_bytes": int(m["requested"]), "detail": {"max_buffer_bytes": int(m["limit"])}},
        says="metal_buffer_over_limit"),
    MessageFormat("THC_PRE_1_0", _OOM_WORDS, P.THC_PRE_1_0, "cuda_oom", era="pre-1.0", recognise_only=True,
                  same_failure=True),
    # admitted on its own words too: TF 1.x printed the driver's error name without ": out of memory" after it. Its
    # allocator backs off by a tenth after each refusal ("failed to allocate 13.83G", then 12.45G, 11.20G, ...): one
    # failure, whatever sizes its lines name
    MessageFormat("STREAM_EXECUTOR_OOM", (*_OOM_WORDS, "from device: "), P.STREAM_EXECUTOR_OOM, _tf_if_named,
                  _requested_only, same_failure=True),
    MessageFormat("STREAM_EXECUTOR_HOST", ("bytes on host",), P.STREAM_EXECUTOR_HOST, _tf_if_named,
                  _requested_only, says="pinned_memory"),
    MessageFormat("NCCL", _OOM_WORDS, P.NCCL, "nccl", recognise_only=True),
    # the legacy THC check; from the caching host allocator it is pinned host memory that cudaHostAlloc refused
    # ("THCudaCheck FAIL file=/pytorch/aten/src/THC/THCCachingHostAllocator.cpp line=278 error=2 : out of memory")
    MessageFormat("THCUDACHECK_HOST", ("CachingHostAllocator",), None, "host_oom", era="pre-1.0",
                  also=("THCudaCheck FAIL", "out of memory"), same_failure=True, says="pinned_memory"),
    MessageFormat("THCUDACHECK", ("THCudaCheck FAIL",), None, "cuda_oom", era="pre-1.0", also=("out of memory",),
                  same_failure=True),
    MessageFormat("XGBOOST_DEVICE", ("Memory allocation error on worker",), P.XGBOOST_DEVICE, "cuda_error", lambda m: {
        "requested_bytes": int(m["requested"]), "free_bytes": int(m["free"])}, own_allocator=True),
    MessageFormat("CTRANSLATE2", ("CUDA failed with error out of memory",), None, "cuda_error", own_allocator=True),
    # dlib's CUDA wrapper: "Error while calling cudaMalloc(&data, ...) in file .../gpu_data.cpp:190. code: 2, reason: out
    # of memory" (dlib::cuda_error)
    MessageFormat("DLIB_CUDA", ("code: 2, reason: out of memory",), None, "cuda_error", own_allocator=True),
    # tinygrad's CUDA runtime checking a driver call: "CUDA Error 2, out of memory" (CUDA_ERROR_OUT_OF_MEMORY = 2)
    MessageFormat("TINYGRAD_CUDA", ("CUDA Error 2, out of memory",), None, "cuda_error", own_allocator=True),
    # PhysX repeats its refusal for each retry of the same buffer: one failure
    MessageFormat("PHYSX_DEVICE", ("PxgCudaDeviceMemoryAllocator fail to allocate memory",), P.PHYSX_DEVICE, "cuda_error",
                  _requested_only, same_failure=True, single_line=True, own_allocator=True),
    MessageFormat("GLOG_CUDA_CHECK", ("== cudaSuccess",), P.GLOG_CUDA_CHECK, "cuda_error", recognise_only=True,
                  own_allocator=True),
    MessageFormat("CUDA_ERROR", (*_OOM_WORDS, "cudaErrorMemoryAllocation"), P.CUDA_ERROR_STRICT, "cuda_error",
                  recognise_only=True),
    MessageFormat("CUDA_FAILURE", ("CUDA failure 2",), P.CUDA_FAILURE, "cuda_error",
                  lambda m: {"gpu_index": int(m["gpu"]) if m["gpu"] else None}),
    MessageFormat("HIP_ERROR", ("HIP error", "hipErrorOutOfMemory"), P.HIP_ERROR, "hip_oom", recognise_only=True),
    # ggml's HIP build checking its virtual-memory pool (CU_CHECK): "ggml-cuda.cu:444: HipVMM Failure: out of memory"
    MessageFormat("GGML_HIP_VMM", ("HipVMM Failure: out of memory",), None, "hip_oom", own_allocator=True),
    MessageFormat("XPU_DEVICE_MEMORY", ("OUT_OF_DEVICE_MEMORY",), P.XPU_DEVICE_MEMORY, "xpu_oom", recognise_only=True),
    MessageFormat("DIRECTML_ALLOC", ("GPU video memory",), P.DIRECTML_ALLOC, "cuda_error", lambda m: {
        "requested_bytes": int(m["requested"]), "detail": {"backend": "directml"}}),
    MessageFormat("DEEPSPEED_WORKSPACE", ("Workspace can't be allocated",), P.DEEPSPEED_WORKSPACE, "cuda_error",
                  lambda m: {"detail": {"library": "deepspeed"}}, says="inference_workspace"),
    MessageFormat("VLLM_STARTUP_FREE", ("Free memory on device",), P.VLLM_STARTUP_FREE, "cuda_oom", lambda m: {
        "free_bytes": to_bytes(m["free"], "GiB"), "total_bytes": to_bytes(m["total"], "GiB"),
        "requested_bytes": to_bytes(m["want"], "GiB"),
        "detail": {"engine": "vllm", "gpu_memory_utilization": float(m["util"])}},
        says="startup_free_below_utilization"),
    MessageFormat("PADDLE_GPU_INFO", ("allocating <= available",), P.PADDLE_GPU_INFO, "cuda_oom", lambda m: {
        "requested_bytes": int(m["requested"]), "free_bytes": int(m["free"])}),
    MessageFormat("GGML_CUDA", ("cudaMalloc failed: out of memory",), P.GGML_CUDA, "cuda_error", lambda m: {
        "requested_bytes": int(m["bytes"]) if m["bytes"] else parse_size(m["requested"]), "gpu_index": int(m["gpu"])},
        same_failure=True, own_allocator=True),  # its buffer's own line after it, a record of its own, is the same failure
    # after GGML_CUDA, whose message holds this line as its exact size
    MessageFormat("GGML_BUFFER", ("to allocate CUDA",), P.GGML_BUFFER, "cuda_error", lambda m: {
        "requested_bytes": int(m["requested"]) if m["requested"] else None, "gpu_index": int(m["gpu"])},
        same_failure=True, own_allocator=True),
    MessageFormat("CUPY_POOL", ("ut of memory to allocate", "Out of memory allocating"), P.CUPY_POOL, "cuda_oom",
                  lambda m: {"requested_bytes": int((m["requested"] or m["requested2"]).replace(",", ""))}, own_allocator=True),
    MessageFormat("FLASHLIGHT_AF", ("Failed to allocate memory of size",), P.FLASHLIGHT_AF, "cuda_error", lambda m: {
        "requested_bytes": parse_size(m["requested"]), "gpu_index": int(m["gpu"]), "total_bytes": parse_size(m["total"]),
        "allocated_bytes": parse_size(m["allocated"])}, same_failure=True, own_allocator=True),
    MessageFormat("ARRAYFIRE", ("Device out of memory:101",), None, "cuda_error", same_failure=True, own_allocator=True),
    MessageFormat("FAISS_GPU", ("cudaMalloc error out of memory",), P.FAISS_GPU, "cuda_error", lambda m: {
        "requested_bytes": int(m["requested"]), "gpu_index": int(m["gpu"])}, own_allocator=True),
    MessageFormat("FAISS_GPU_OLD", ("failed to cudaMalloc",), P.FAISS_GPU_OLD, "cuda_error", _requested_only, own_allocator=True),
    MessageFormat("MXNET_CUDA", ("cudaMalloc failed", "cudaMalloc retry failed", "Memory allocation failed"),
                  P.MXNET_CUDA, "cuda_error", recognise_only=True, own_allocator=True),
    MessageFormat("KALDI_CUDA", ("Memory allocation failure",), P.KALDI_CUDA, "cuda_error", recognise_only=True,
                  same_failure=True, own_allocator=True),
    MessageFormat("DEVICE_ALLOC_FAILED", ("failed (",), P.DEVICE_ALLOC_FAILED, "cuda_error", lambda m: {
        "requested_bytes": parse_size(m["requested"])}, same_failure=True, own_allocator=True),
    MessageFormat("D2_RETRY_ON_CPU", ("to CPU due to CUDA OOM",), P.D2_RETRY_ON_CPU, "cuda_oom", recognise_only=True,
                  single_line=True, caught=True),
    MessageFormat("KALDI_REGION", ("Failed to allocate a memory region",), P.KALDI_REGION, "cuda_error", lambda m: {
        "requested_bytes": int(m["requested"]), "free_bytes": _size(m, "free"), "total_bytes": _size(m, "total")},
        same_failure=True, own_allocator=True),
    MessageFormat("ORT_ARENA", ("allocate memory for requested",), P.ORT_ARENA,
                  lambda m, text: "host_oom" if P.ORT_CPU.search(text) else "cuda_error", _requested_only, own_allocator=True),
    MessageFormat("TENSORRT_OOM", ("Cuda Runtime (out of memory)", ": OutOfMemory ("), P.TENSORRT_OOM, "cuda_error",
                  lambda m: {"requested_bytes": int(m["bytes"]) if m["bytes"] else None}, same_failure=True, own_allocator=True),
    MessageFormat("PADDLE_LEGACY", ("Cannot allocate",), P.PADDLE_LEGACY, "cuda_oom", lambda m: {
        "requested_bytes": to_bytes(m["requested"], "MiB"), "free_bytes": to_bytes(m["free"], "MiB"),
        "total_bytes": int(m["total"]), "gpu_index": int(m["gpu"]),
        "allocated_bytes": to_bytes(m["used"], "GiB") if m["used"] else None}, own_allocator=True),
    MessageFormat("CATBOOST_OOM", ("Out of memory. Requested",), P.CATBOOST_OOM, "cuda_oom", lambda m: {
        "requested_bytes": to_bytes(m["requested"], "MiB"), "free_bytes": to_bytes(m["free"], "MiB")},
        same_failure=True, own_allocator=True),
    MessageFormat("CUDA_DRIVER_OOM", ("CUDA_ERROR_OUT_OF_MEMORY",), P.CUDA_DRIVER_OOM, "cuda_error", recognise_only=True),
    MessageFormat("PADDLE", ("Out of memory error on GPU",), P.PADDLE, "cuda_oom", lambda m: {
        "requested_bytes": _size(m, "requested"), "allocated_bytes": _size(m, "allocated"),
        "free_bytes": _size(m, "free"), "gpu_index": int(m["gpu"])}, own_allocator=True),
    MessageFormat("PADDLE_HOST", ("Fail to alloc memory",), P.PADDLE_HOST, "host_oom",
                  _requested_only, says="alloc_failed"),
    MessageFormat("CUBLAS", ("ALLOC_FAILED",), P.CUBLAS, "cublas",
                  lambda m: {"detail": {"library": (m["lib"] or m["fft"]).upper()}}),
    MessageFormat("CUBLAS_CREATE", ("CUBLAS_STATUS_NOT_INITIALIZED",), P.CUBLAS_CREATE, "cublas",
                  lambda m: {"detail": {"library": "CUBLAS"}}, says="cublas_handle"),
    MessageFormat("CUDNN_NO_ALGO", ("valid cuDNN algorithm",), P.CUDNN_NO_ALGO, "cublas",
                  lambda m: {"detail": {"library": "CUDNN"}}, says="cudnn_no_algorithm"),
    # TensorFlow / XLA. TensorFlow warns with the same words when it only lost speed: not a failure.
    MessageFormat("XLA_BYTES", _XLA_WORDS, P.XLA_BYTES, "xla_oom",
                  lambda m: {"requested_bytes": parse_size(m["requested"])}, veto=P.TF_NOT_A_FAILURE),
    MessageFormat("SKIP_BATCH", ("ran out of memory",), P.SKIP_BATCH, "cuda_oom", recognise_only=True, same_failure=True),
    MessageFormat("XLA_REQUEST", _XLA_WORDS, P.XLA_REQUEST, "xla_oom", _requested_only, veto=P.TF_NOT_A_FAILURE),
    MessageFormat("SPCONV_CHECK", ("failed with error 2",), P.SPCONV_CHECK, "cuda_error", recognise_only=True,
                  own_allocator=True),
    MessageFormat("XLA_CONSTANT", ("for new constant",), P.XLA_CONSTANT, "xla_oom", _requested_only),
    MessageFormat("XLA_HBM", _XLA_WORDS, P.XLA_HBM, "xla_oom", lambda m: {
        "total_bytes": _xla_size(m["limit"]), "detail": {"used_bytes": _xla_size(m["used"]), "memory_space": m["space"]}},
        veto=P.TF_NOT_A_FAILURE),
    MessageFormat("BFC_RAN_OUT", _XLA_WORDS, P.BFC_RAN_OUT, _tf_if_named, lambda m: {
        "requested_bytes": int(m["rounded"]) if m["rounded"] else parse_size(m["requested"])}, veto=P.TF_NOT_A_FAILURE),
    MessageFormat("XLA_XRT", _XLA_WORDS, P.XLA_XRT, "xla_oom", lambda m: {
        "requested_bytes": _xla_size(m["requested"]), "free_bytes": _xla_size(m["free"]) if m["free"] else None},
        veto=P.TF_NOT_A_FAILURE),
    MessageFormat("XLA_ANY", _XLA_WORDS, P.XLA_ANY, "xla_oom", veto=P.TF_NOT_A_FAILURE, recognise_only=True),
    MessageFormat("XLA_TF_RESOURCE", ("Resource exhausted: Out of memory",), None, "xla_oom", veto=P.TF_NOT_A_FAILURE),
    MessageFormat("TF_OOM", ("OOM when allocating",), P.TF_OOM, "tf_oom", _tf_oom, veto=P.TF_NOT_A_FAILURE, bare=True),
    MessageFormat("TF_EAGER_ALLOC", ("failed to allocate memory",), P.TF_EAGER_ALLOC, "tf_oom",
                  lambda m: {"gpu_index": int(m["gpu"])}, also=("ResourceExhaustedError",), veto=P.TF_NOT_A_FAILURE),
    MessageFormat("TF_GRAPH_ALLOC", ("failed to allocate memory",), P.TF_GRAPH_ALLOC, "tf_oom",
                  also=("ResourceExhaustedError",), veto=P.TF_NOT_A_FAILURE),
    MessageFormat("KV_CACHE", ("KV cache", "cache blocks"), P.KV_CACHE, "kv_cache", _kv_cache, veto=P.TF_NOT_A_FAILURE),
    MessageFormat("SGLANG_KV", ("Not enough memory",), P.SGLANG_KV, "kv_cache",
                  lambda m: {"detail": {"engine": "sglang"}}, says="kv_pool_no_room"),
    MessageFormat("TGI_PREFILL", ("Not enough memory",), P.TGI_PREFILL, "kv_cache",
                  lambda m: {"detail": {"engine": "text-generation-inference", "prefill_tokens": int(m["tokens"])}},
                  says="prefill_warmup"),
    MessageFormat("AUTO_BATCH_ZERO", ("No executable batch size",), P.AUTO_BATCH_ZERO, "cuda_oom",
                  says="batch_halved_to_zero"),
    MessageFormat("SHM_EXHAUSTED", ("shared memory", "</torch_", "/dev/shm/"), P.SHM_EXHAUSTED, "host_oom",
                  same_failure=True, says="shared_memory"),
    MessageFormat("HOST_ENOMEM", ("Errno 12", "WinError 1455", "paging file"), P.HOST_ENOMEM, "host_oom",
                  lambda m: {"detail": {"message_says": "enomem" if "Errno 12" in m.group() else "paging_file"}}),
    MessageFormat("CPU_POSIX_MEMALIGN", ("posix_memalign",), P.CPU_POSIX_MEMALIGN, "host_oom", recognise_only=True,
                  says="alloc_failed"),
    MessageFormat("MXNET_CPU", ("allocate CPU Memory",), P.MXNET_CPU, "host_oom", recognise_only=True, says="alloc_failed"),
    MessageFormat("OLLAMA_HOST", ("requires more system memory",), P.OLLAMA_HOST, "host_oom", lambda m: {
        "requested_bytes": parse_size(m["requested"]), "free_bytes": parse_size(m["free"])}, says="alloc_failed"),
    MessageFormat("CPU_ALLOC", ("DefaultCPUAllocator",), P.CPU_ALLOC, "host_oom", lambda m: {
        "requested_bytes": int(m["requested"]) if m["requested"] else to_bytes(m["gb"], "GiB")}, veto=P.TF_NOT_A_FAILURE,
        says="alloc_failed"),
    MessageFormat("NUMPY_ALLOC", ("Unable to allocate",), P.NUMPY_ALLOC, "host_oom", _numpy_alloc, says="alloc_failed"),
    MessageFormat("RMM_CUDA_ALLOC", ("CUDA error (failed to allocate",), P.RMM_CUDA_ALLOC, "cuda_error",
                  _requested_only, own_allocator=True),
    MessageFormat("RMM_POOL", ("Maximum pool size exceeded", "out_of_memory"), P.RMM_POOL, "cuda_oom",
                  recognise_only=True, own_allocator=True),
    MessageFormat("THRUST_BAD_ALLOC", ("bad_alloc",), P.THRUST_BAD_ALLOC, "cuda_error", recognise_only=True,
                  same_failure=True),
    MessageFormat("BAD_ALLOC", ("std::bad_alloc",), P.BAD_ALLOC, "host_oom", recognise_only=True, same_failure=True,
                  says="alloc_failed"),
    MessageFormat("RAY_HOST_OOM", ("OutOfMemoryError",), P.RAY_HOST_OOM, "host_oom", recognise_only=True),
    MessageFormat("RAY_OOM_HINT", ("address the out of memory issue",), P.RAY_OOM_HINT, "host_oom", recognise_only=True,
                  same_failure=True),
    MessageFormat("RUST_ALLOC", ("memory allocation of",), P.RUST_ALLOC, "host_oom",
                  _requested_only, single_line=True, says="alloc_failed"),
    MessageFormat("CYMEM_ALLOC", ("Error assigning",), P.CYMEM_ALLOC, "host_oom",
                  _requested_only, single_line=True, says="alloc_failed"),
    MessageFormat("PY_MEMORY_ERROR", ("MemoryError",), P.PY_MEMORY_ERROR, "host_oom", recognise_only=True,
                  single_line=True, says="alloc_failed"),
    MessageFormat("HOST_KILL", ("",), P.HOST_KILL, "host_oom", veto=P.HOST_KILL_NOT),
    MessageFormat("IPYTHON_OOM_HEADER", ("OutOfMemoryError",), P.IPYTHON_OOM_HEADER, "cuda_oom",
                  also=("Traceback (most recent call last)",), recognise_only=True, single_line=True, gives_way=True),
    MessageFormat("IPYTHON_TF_OOM_HEADER", ("ResourceExhaustedError",), P.IPYTHON_TF_OOM_HEADER, "tf_oom",
                  also=("Traceback (most recent call last)",), recognise_only=True, single_line=True, gives_way=True),
    MessageFormat("IPYTHON_MEMORY_ERROR_HEADER", ("MemoryError",), P.IPYTHON_MEMORY_ERROR_HEADER, "host_oom",
                  also=("Traceback (most recent call last)",), recognise_only=True, single_line=True, gives_way=True,
                  says="alloc_failed"),
    MessageFormat("DATALOADER_EXIT", ("exited unexpectedly",), P.DATALOADER_EXIT, "host_oom", recognise_only=True,
                  single_line=True),
)
_VETO_ALL = {"HOST_KILL"}  # TensorFlow's not-a-failure note silences host kills on the same text too


def classify(text: str) -> Classified | None:
    """The first format that recognises this message text, or None when it is not an OOM."""
    text = text[:CLASSIFY_CHARS]
    not_a_failure: bool | None = None
    for fmt in MESSAGE_FORMATS:
        if not fmt.admits(text):
            continue
        if fmt.veto is not None and fmt.veto.search(text):
            continue
        if fmt.name in _VETO_ALL:
            if not_a_failure is None:
                not_a_failure = bool(P.TF_NOT_A_FAILURE.search(text))
            if not_a_failure:
                return None
        if fmt.pattern is None:
            return Classified(fmt.kind_of(None, text), None, fmt)
        m = fmt.pattern.search(text)
        if m is not None and fmt.recognise_only:
            return Classified(fmt.kind_of(None, text), None, fmt)
        if m is not None or fmt.bare:
            return Classified(fmt.kind_of(m, text), m, fmt)
    return None


def figures(c: Classified, text: str) -> Figures:
    """The figures a recognised message prints, in bytes, with the contract's derivations."""
    try:
        f: Figures = c.fmt.figures(c.match) if c.match is not None and c.fmt.figures else {}
    except UnitError:  # a size with a unit no allocator prints (damaged text): the message, without figures
        f = {}
    if c.fmt.says and "message_says" not in f.get("detail", {}):
        f["detail"] = {**f.get("detail", {}), "message_says": c.fmt.says}
    if f.get("gpu_index") is None:
        g = _GPU_INDEX.search(text)
        if g:
            f["gpu_index"] = int(g["i"] or g["j"] or g["k"] or g["l"] or g["m"])
    return f


def era(c: Classified, text: str) -> str | None:
    """The PyTorch message era the wording belongs to (None for formats without eras)."""
    return c.fmt.era_of(c.match, text)
