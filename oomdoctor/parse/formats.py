"""Every message format oomdoctor recognises: one named, compiled pattern per era or kind, no opinions.

Patterns run on one normalised message (a few lines joined, at most a few KiB), never on a whole log,
and are written without nested quantifiers so they stay linear on hostile text.
"""

from __future__ import annotations

import regex

from oomdoctor.parse.lazyregex import lazy

# "Killed" as glibc's catalogs translate it (the shell's job notice in another locale): German, Simplified
# Chinese, Japanese, Russian, French, Spanish.
KILLED_TRANSLATED = ("Getötet", "已杀死", "強制終了", "Убито", "Processus arrêté", "Terminado (killed)")
KILLED_TRANSLATED_ALTERNATIVES = "|".join(map(regex.escape, KILLED_TRANSLATED))  # the same words, as a pattern's

# Literals one of which every line a message can start on holds: the event scan tries only such lines, and the
# reader keeps (and gives a wide window to) every line holding one, so the two always agree.
TRIGGERS = (
    "out of memory", "Out of memory", "OOM", "ALLOC_FAILED", "Killed", "killed", "SIGKILL", "exitcode", "KV cache",
    "cache blocks", "Out Of Memory", "oom", "RESOURCE_EXHAUSTED", "DefaultCPUAllocator", "ran out of memory",
    "esource exhausted", "memory limit", "return code", "Unable to allocate", "OutOfMemoryError", "exited unexpectedly",
    "Fail to alloc memory", "for new constant", "failed with error 2", "bad_alloc", "MemoryError", "CUDA_ERROR_OUT_OF_MEMORY", "code 137", "signal 9",
    "hipError_t(1002)", "Runtime Error at", "cudaErrorMemoryAllocation", "cudaMalloc failed", "cudaMalloc retry failed",
    "Cannot allocate", "Tried to allocate", "Allocation on device", "failed to allocate memory", "[metal::malloc]",
    "memory allocation of", "ResourceExhaustedError", "Memory allocation fail", "CUBLAS_STATUS_NOT_INITIALIZED",
    "valid cuDNN algorithm", "allocate memory for requested", "Not enough memory", "No executable batch size",
    "WinError 1455", "shared memory", "paging file", "posix_memalign", "</torch_", "/dev/shm/", "OUT_OF_DEVICE_MEMORY",
    "Invalid buffer size", "allocating <= available", "Code 2: OutOfMemory", "CallbackErrorOutOfMemory",
    "requires more system memory", "GPU video memory", "to allocate CUDA", "Workspace can't be allocated",
    "allocate CPU Memory", "Free memory on device", "low on resource: memory", "Insufficient Memory",
    "fail to allocate memory",
    *KILLED_TRANSLATED,
)

SIZE = r"(?<![\d.])\d{1,20}(?:\.\d{1,6})?\s?(?:bytes|[KMGTP]iB|[KMGTP]B|[KMGTP]|B)"
_DEV = r"(?P<device>CUDA|HIP|XPU|NPU|MLU|GCU|MUSA)"
# The hint after a message; it stops where a second writer's message begins on the same line.
_HINT_TAIL = r"(?P<hint>\s*If reserved(?:(?!(?:[A-Z]{2,4} )?out of memory)[^\n]){0,400})?"

# PyTorch caching allocator, 1.0-1.3: "(GPU 0; T total capacity; A already allocated; F free; C cached)"
# The "cached" figure is reserved-but-unallocated (amount_cached - amount_allocated).
# The head, or nothing but the start of the text: a log collector may have cut the head off ("Tried to
# allocate ... (GPU 0; ...)" alone), but another error's "Tried to allocate" clause is not an OOM.
_HEAD = r"(?:" + _DEV + r" out of memory\.\s|(?<=^[\s.…>]{0,8}))"
CACHING_1_0 = lazy(
    _HEAD + r"Tried to allocate (?P<requested>" + SIZE + r")\s?\(GPU (?P<gpu>\d{0,6}); "
    r"(?P<total>" + SIZE + r") total ?capacity; (?P<allocated>" + SIZE + r") already allocated; "
    r"(?P<free>" + SIZE + r") free; (?P<cached>" + SIZE + r") cached\)"
)
# 1.4-2.0: "...; F free; [X allowed; ]R reserved in total by PyTorch)" (+ max_split_size_mb hint from 1.10).
# Ascend NPU builds add "X current active;".
CACHING_1_4 = lazy(
    _HEAD + r"Tried to allocate (?P<requested>" + SIZE + r")\s?\(?(?:GPU|NPU|MLU)\s{1,2}(?P<gpu>\d{0,6}); "
    r"(?P<total>" + SIZE + r") total ?capacity; (?P<allocated>" + SIZE + r") already allocated; "
    r"(?:" + SIZE + r" current active; )?(?:(?P<free>" + SIZE + r") free; )?(?:(?P<allowed>" + SIZE + r") allowed; )?"
    r"(?P<reserved>" + SIZE + r") reserved in total by PyTorch\)?" + _HINT_TAIL  # parentheses lost in a paste
)
# 2.1+ ("capacty" typo in 2.1): ". GPU N has a total capacity of T of which F is free. <processes>
# [X allowed; ]Of the allocated memory A is allocated by PyTorch, [with P allocated in private pools
# (e.g., CUDA Graphs), ]and U is reserved by PyTorch but unallocated." + hint (env var differs per era).
CACHING_2_1 = lazy(
    _HEAD + r"Tried to allocate (?P<requested>" + SIZE + r")\. (?:GPU|MLU) ?(?P<gpu>\d{0,6})\x00? ?has a "
    r"total (?P<capword>capacity|capacty) of (?P<total>" + SIZE + r")(?: of which (?P<free>" + SIZE + r") ?is free)?\.\s?"
    r"(?P<procs>(?:(?:Including non-PyTorch memory, this process|Process \d{1,10}) has " + SIZE + r" memory in use\.\s?){0,64})"
    r"(?:(?P<allowed>" + SIZE + r") allowed; )?"
    r"Of the allocated memory (?P<allocated>" + SIZE + r") is allocated by PyTorch,\s"
    r"(?:with (?P<private>" + SIZE + r") allocated in private pools \(e\.g\., \w+ Graphs\),\s)?"
    r"and (?P<unallocated>" + SIZE + r") is reserved by PyTorch but unallocated\." + _HINT_TAIL
)
# A message cut inside a process clause's closing words ("has 258.00 MiB memory i") at its end: the size is whole.
_IN_USE_CUT = r"(?: in?| in us?)?[\s\"'`]*$"
PROCESS_CLAUSE = lazy(
    r"(?:(?P<self>Including non-PyTorch memory, this process)|Process (?P<pid>\d{1,20})) has (?P<size>" + SIZE + r") memory"
    r"(?: in use|(?=" + _IN_USE_CUT + r"))"
)
# A 2.1+ message's figures up to wherever it was cut: the total and free, the process clauses, and the allocated and
# reserved-but-unallocated figures once " is" follows each (a cut inside the number would misread it: "217.2").
_FIGURES_2_1_CUT = (
    r"has a total capac(?:ity|ty) of (?P<total>" + SIZE + r")(?: of which (?P<free>" + SIZE + r") ?is free)?"
    r"(?:\.\s?(?P<procs>(?:(?:Including non-PyTorch memory, this process|Process \d{1,10}) has " + SIZE
    + r" memory in use\.\s?){0,64}"  # none where NVML is missing
    # the last clause, cut inside its closing words (_IN_USE_CUT)
    r"(?:(?:Including non-PyTorch memory, this process|Process \d{1,10}) has " + SIZE + r" memory" + _IN_USE_CUT
    + r")?))?"
    r"(?:Of the allocated memory (?P<allocated>" + SIZE + r") is\b(?: allocated by PyTorch"
    r"(?:,\s(?:with " + SIZE + r" allocated in private pools \(e\.g\., \w+ Graphs\),\s)?"
    r"and (?P<unallocated>" + SIZE + r") is\b)?)?)?"
)
# Any caching-allocator message whose full form did not match (truncated at a NUL device index, cut by a
# log collector, an unknown future era): the request is still known.
CACHING_ANY = lazy(
    # (a retyped or OCR'd copy may have lost the full stop: "CUDA out of memory Tried to allocate 20.00 MiB GPU 0 has")
    _DEV + r" out of memory\.? Tried to allocate (?P<requested>" + SIZE + r"|more than 1EB memory)"
    r"(?:\.? ?\(?(?:GPU|MLU) (?P<gpu>\d{1,6})(?!\d)"
    # whatever figures came before the cut, in either era's wording (a figure is whole once the word after it begins)
    r"(?:;\s?(?P<total>" + SIZE + r") total(?: ?capacity(?:;\s?(?P<allocated>" + SIZE + r") already\b(?: allocated"
    r"(?:;\s?(?P<free>" + SIZE + r") free(?:;\s?(?P<reserved>" + SIZE + r") reserved\b)?)?)?)?)?"
    r"| " + _FIGURES_2_1_CUT + r")?)?"
)
# A 2.1+ message whose head a paste cut off and whose tail is cut too: "Tried to allocate 4.00 GiB. GPU 2 has a total
# capacity of 21.99 GiB of which 1.21 GiB is free. Including non-PyTorch memory, ..." at the start of a line. The
# device clause is required: another error's "Tried to allocate" is not an OOM.
CACHING_2_1_HEADLESS = lazy(
    r"(?<=^[\s.…>]{0,8})Tried to allocate (?P<requested>" + SIZE + r")\. GPU ?(?P<gpu>\d{1,6})(?!\d) "
    + _FIGURES_2_1_CUT
)


def _cut_anywhere(words: str) -> str:
    """A pattern for any non-empty beginning of `words`, as a paste may cut them ("Tried to alloc", "Tri")."""
    pattern = ""
    for ch in reversed(words[1:]):
        pattern = f"(?:{regex.escape(ch)}{pattern})?"
    return regex.escape(words[0]) + pattern


# The first sentence alone, with the exception that raised it ("torch.cuda.OutOfMemoryError: CUDA out of
# memory." - a paste or a notebook cut after it, or with the figures cut out before the message's closing pointer to
# the documentation): no figures, but the exception names an allocator failure.
CACHING_BARE = lazy(r"(?:OutOfMemoryError|RuntimeError): " + _DEV + r" out of memory\.?[ \t]{0,40}"
                    r"(?:See documentation for Memory Management[^\n]{0,120}"
                    # or cut inside its request, anywhere before the size's unit: "Tried to alloc", "Tried to
                    # allocate 214.00"
                    r"|(?:" + _cut_anywhere("Tried to allocate") + r")(?: \d{1,20}(?:\.\d{0,20})?)?[ \t]{0,40})?(?:\n|$)")
# PyTorch's cudaMallocAsync backend (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync; ComfyUI's --cuda-malloc),
# one figure per line: "Allocation on device 0 would exceed allowed memory. (out of memory)\nCurrently allocated     :
# 9.43 GiB\nRequested               : 640.00 MiB\nDevice limit            : 11.59 GiB\nFree (according to CUDA):
# 7.12 MiB\nPyTorch limit (set by user-supplied memory fraction)\n                        : 17179869184.00 GiB" (unset).
# Its line breaks stay escaped ("\\n") when a client logs ComfyUI's execution_error JSON ("exception_message": ...).
_ROW = r"(?:\s|\\n){0,4}"
MALLOC_ASYNC = lazy(
    r"Allocation on device (?P<gpu>\d{1,6})(?!\d) would exceed allowed memory\. \(out of memory\)"
    r"(?:" + _ROW + r"Currently allocated\s{0,8}:\s{0,4}(?P<allocated>" + SIZE + r"))?"
    r"(?:" + _ROW + r"Requested\s{0,20}:\s{0,4}(?P<requested>" + SIZE + r"))?"
    r"(?:" + _ROW + r"Device limit\s{0,16}:\s{0,4}(?P<total>" + SIZE + r"))?"
    r"(?:" + _ROW + r"Free \(according to CUDA\)\s{0,4}:\s{0,4}(?P<free>" + SIZE + r"))?"
    r"(?:" + _ROW + r"PyTorch limit \(set by user-supplied memory fraction\)(?:\s|\\n){0,40}:\s{0,4}(?P<limit>" + SIZE
    + r"))?"
)
# The same message as many apps print it: c10::DeviceIndex is an 8-bit integer, which older builds streamed as a
# character, so device 0 put a NUL after "Allocation on device " and the print stopped there (ComfyUI's
# "!!! Exception during processing !!! Allocation on device "). Nothing after it: no figures, only the kind.
# A rich console logger puts its record's source on the right of the same row ("... Allocation on device
# execution.py:430").
MALLOC_ASYNC_CUT = lazy(r"(?m)Allocation on device(?: (?P<devchar>[\x00-\x0f])|[ \t]{0,200}$"
                        r"|[ \t]{2,200}[\w.-]{1,80}\.py:\d{1,6}(?!\d))")
# Apple MLX on Metal: one buffer larger than the device lets a single allocation be, "[metal::malloc] Attempting to
# allocate 17179869184 bytes which is greater than the maximum allowed buffer size of 14302248960 bytes." (a
# per-buffer limit, not the device's memory).
MLX_METAL_MALLOC = lazy(r"\[metal::malloc\] Attempting to allocate (?P<requested>\d{1,20}) bytes which is greater than "
                        r"the maximum allowed buffer size of (?P<limit>\d{1,20}) bytes")
# PaddlePaddle: "ResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate X memory on GPU 0,
# Y memory has been allocated and available memory is only Z."
PADDLE = lazy(
    r"Out of memory error on GPU (?P<gpu>\d{1,6})\.\s{0,4}Cannot allocate (?P<requested>" + SIZE + r") memory on GPU \d{1,20},\s{0,4}"
    r"(?:(?P<allocated>" + SIZE + r") memory has been allocated and )?available memory is only\s{0,40}(?P<free>" + SIZE + r")"
)
# PaddlePaddle's host allocator (system_allocator.cc): "Fail to alloc memory of 564023296 size, error code is 12."
# (12 is ENOMEM: the host, not the GPU).
PADDLE_HOST = lazy(r"Fail to alloc memory of (?P<requested>\d{1,20}) size, error code is 12\b")
# TensorFlow's BFC allocator warns with the same words when it only lost some speed: not a failure. A terminal may cut
# the phrase anywhere, and its rows may be rejoined with a space there ("The caller indicate s that ..."): one optional
# blank after each of its characters.
_NOT_A_FAILURE = "The caller indicates that this is not a failure"
TF_NOT_A_FAILURE = lazy(r"\s?".join(map(regex.escape, _NOT_A_FAILURE)))
# TensorFlow 2 eager ops: "ResourceExhaustedError: {{function_node __wrapped__Mul_device_/job:localhost/replica:0/
# task:0/device:GPU:0}} failed to allocate memory [Op:Mul]" - the op and the device, no size.
TF_EAGER_ALLOC = lazy(r"ResourceExhaustedError: \{\{function_node [^}\n]{0,300}?device:GPU:(?P<gpu>\d{1,6})\}\} "
                      r"failed to allocate memory(?: \[Op:(?P<op>\w{1,80})\])?")
# The device attribute of the failing node TF 1.x (before 1.4) printed after its message: _device=".../gpu:0".
TF_NODE_DEVICE = lazy(r'_device="[^"\n]{0,200}?(?:gpu|GPU):(?P<gpu>\d{1,4})"')
# ... and a graph-mode session's (TF 1.15, Colab): "ResourceExhaustedError: failed to allocate memory" then the node,
# "[[{{node model/h18/ln_2/add_1}}]]", and the report_tensor_allocations_upon_oom hint; no size, no device
TF_GRAPH_ALLOC = lazy(r"ResourceExhaustedError:\s{1,4}failed to allocate memory(?![ \t]{0,2}[\w(])")  # its whole message
# Pre-1.0 THC: "cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/..."
THC_PRE_1_0 = lazy(r"cuda runtime error \(2\) : out of memory")
CUDA_ERROR = lazy(
    r"(?:CUDA error|CUDA driver error|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation)(?::)? ?(?:out of memory)?"
)
CUDA_ERROR_STRICT = lazy(
    r"CUDA (?:driver )?error: ?out of memory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY(?!: out of memory\b[^\n]{0,400}?from device)"
    r"|CUDA Error: out of memory at \S{1,300}:\d{1,9}"  # C++ extensions' own check (vLLM's cumem_allocator.cpp)
    r"|CUDA runtime error: out of memory"  # FasterTransformer / TurboMind check_cuda_error: "[TM][ERROR] CUDA runtime error: ..."
    r"|GPUassert: out of memory"  # the gpuAssert macro many CUDA extensions copy: "GPUassert: %s %s %d" (error, file, line)
    # a C++ check macro that names the place, then prints cudaGetErrorString and the failing call on the next line:
    # "CUDA Runtime Error at: src/data_struct_cuda.cu:83" / "out of memory cudaMalloc(&d_x, n * sizeof(float))"
    r"|CUDA (?:Runtime )?Error at:? \S{1,300}:\d{1,9}[ \t]{0,4}(?:\r?\n)?[ \t]{0,8}out of memory\b"
    r"|\bError out of memory at line \d{1,9} in file \S{1,300}"  # bitsandbytes' CUDA_CHECK_RETURN (paged optimizers)
    r"|(?:Cuda|CUDA) error\(2\), out of memory"  # PaddlePaddle 2.x's ExternalError
    r"|error == cudaSuccess\. 2 vs 0\. Error at: \S{1,300}: out of memory"  # Caffe2's CUDA_ENFORCE
    r"|\[CUDA\] out of memory \S{1,300} \d{1,9}"  # LightGBM's gpuAssert: "[CUDA] %s %s %d"
    r"|CUDA error \d{1,3}: out of memory"  # CatBoost's CUDA_SAFE_CALL, NVIDIA Warp
    r"|CUDA error \d{1,3} at \S{1,300}:\d{1,9}: out of memory"  # ggml-cuda.cu's CUDA_CHECK in 2023 (llama.cpp)
    r"|cuMem(?:Alloc|AllocPitch|AllocManaged) failed: out of memory"  # PyCUDA's driver errors
    r"|Cuda Error in allocate: 2 \(out of memory\)"  # TensorRT 7's allocator
    r"|CUDA runtime error in [^\n]{0,300}?: out of memory"  # TensorRT-LLM's TLLM_CUDA_CHECK: "... in ::cudaMallocAsync(...)"
    # a CUDA runtime call named with its arguments, then cudaGetErrorString (XLA's and Triton's checks: ":0:
    # cudaFuncSetAttribute(kernel_entry, cudaFuncAttributeMaxDynamicSharedMemorySize, ...): out of memory")
    r"|\bcuda[A-Z]\w{2,40}\([^\n]{0,400}?\): out of memory"
)
# A glog CHECK on a CUDA call in a framework that allocates device memory itself (never PyTorch's caching allocator):
# Caffe's CHECK_EQ ("... == cudaSuccess (2 vs. 0)  out of memory"), MXNet's mshadow CHECK, with its "CUDA: "
# ("Check failed: e == cudaSuccess CUDA: out of memory"; MXNet 1.x: "... (2 vs. 0) : CUDA: out of memory"),
# GraphVite's CudaCheck ("Check failed: error == cudaSuccess CUDA error out of memory at .../memory.h:131").
GLOG_CUDA_CHECK = lazy(r"Check failed: \w{1,40} == cudaSuccess(?: \(\d{1,3} vs\. 0\))?\s{0,4}(?::\s{1,4})?"
                       r"(?:CUDA: |CUDA error )?out of memory")
# ggml's CUDA check names the device on the line after the error: "CUDA error 2 at .../ggml-cuda.cu:5509: out of
# memory" then "current device: 0" (2023); later "CUDA error: out of memory" then "  current device: 0, in function ..."
CURRENT_DEVICE = lazy(r"^\s{0,8}current device: (?P<gpu>\d{1,4})\b")
# ONNX Runtime's CUDA_CALL (and CNTK's): "CUDA failure 2: out of memory ; GPU=0 ; hostname=... ; expr=cudaMalloc(...)".
CUDA_FAILURE = lazy(r"CUDA failure 2: out of memory(?: ; GPU=(?P<gpu>\d{1,4}))?")
# PyTorch on ROCm: the C10_HIP_CHECK of a failed hipMalloc outside the caching allocator ("HIP error: out of memory").
HIP_ERROR = lazy(r"HIP error: out of memory|hipErrorOutOfMemory")
# Intel GPUs through SYCL / Level Zero: "level_zero backend failed with error: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)".
XPU_DEVICE_MEMORY = lazy(r"UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY")
# PyTorch's MPS allocator refusing one buffer over Metal's per-buffer limit: "Invalid buffer size: 19.45 GB".
MPS_BUFFER_SIZE = lazy(r"Invalid buffer size: (?P<requested>\d{1,12}\.\d\d [KMG]i?B)\b")
# Apple's Metal driver aborting a command buffer (ggml's Metal backend, MLX): "Insufficient Memory
# (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)".
METAL_COMMAND_OOM = lazy(r"kIOGPUCommandBufferCallbackErrorOutOfMemory"
                         r"|Command buffer execution failed: Insufficient Memory")  # its code cut off the line
# PyTorch 1.0-1.2's CPU allocator: "[enforce fail at CPUAllocator.cpp:56] posix_memalign(&data, gAlignment, nbytes)
# == 0. 12 vs 0" (12 is ENOMEM).
CPU_POSIX_MEMALIGN = lazy(r"posix_memalign\(&data, gAlignment, nbytes\) == 0\. 12 vs 0")
# PaddlePaddle's gpu_info.cc before 1.6, sizing a chunk against what the device has free: "enforce allocating <=
# available failed, 10513462067 > 1369702144" (0.x); "Enforce failed. Expected allocating <= available, but received
# allocating:X > available:Y.\nInsufficient GPU memory to allocation." (1.x).
PADDLE_GPU_INFO = lazy(r"allocating <= available(?: failed, |, but received allocating:)(?P<requested>\d{1,20}) > "
                       r"(?:available:)?(?P<free>\d{1,20})")
# MXNet's CPU storage (cpu_device_storage.h): "Failed to allocate CPU Memory".
MXNET_CPU = lazy(r"Failed to allocate CPU Memory")
# RAPIDS Memory Manager's pool at its cap: "MemoryError: std::bad_alloc: out_of_memory: RMM failure at:.../
# pool_memory_resource.hpp:196: Maximum pool size exceeded" (device memory, whatever the C++ exception's name says).
# ... and its cuda_memory_resource (cudaMalloc itself refused, no pool): "MemoryError: std::bad_alloc: out_of_memory: CUDA
# error (failed to allocate 88577278284 bytes) at: .../cuda_memory_resource.hpp", with the size it asked for.
RMM_CUDA_ALLOC = lazy(r"out_of_memory: CUDA error \(failed to allocate (?P<requested>\d{1,20}) bytes\)")
RMM_POOL = lazy(r"RMM failure at: ?\S{1,300}: Maximum pool size exceeded|std::bad_alloc: out_of_memory\b")
# Thrust's bad_alloc carries the CUDA error string: "instance of 'thrust::system::detail::bad_alloc'" / "what():
# std::bad_alloc: out of memory" (a device allocation, not the host's operator new; that what() alone is no proof).
THRUST_BAD_ALLOC = lazy(r"thrust::(?:\w{1,60}::)?system::detail::bad_alloc")  # CCCL adds a versioned namespace
# XGBoost's device allocator, with its figures on the next lines: "Memory allocation error on worker 0: std::bad_alloc:
# cudaErrorMemoryAllocation: out of memory\n- Free memory: 11310923776\n- Requested memory: 47996".
XGBOOST_DEVICE = lazy(r"Memory allocation error on worker \d{1,6}: [^\n]{0,300}\n?[ \t]{0,8}- Free memory: (?P<free>\d{1,20})"
                      r"\s{0,8}- Requested memory: (?P<requested>\d{1,20})")
# NVIDIA PhysX's GPU simulation (Isaac Gym, Isaac Sim) allocating its own buffers; result 2 is CUDA's out of memory:
# "PxgCudaDeviceMemoryAllocator fail to allocate memory 339738624 bytes!! Result = 2"
PHYSX_DEVICE = lazy(r"PxgCudaDeviceMemoryAllocator fail to allocate memory (?P<requested>\d{1,20}) bytes!! Result = 2\b")
# DeepSpeed's inference kernels sizing their workspace (inference_context.h), after printing Requested/Free/Total.
DEEPSPEED_WORKSPACE = lazy(r"Workspace can't be allocated, no enough memory")
# vLLM's start-up check of the free memory against gpu_memory_utilization (another process holds the rest): "Free
# memory on device (59.32/79.15 GiB) on startup is less than desired GPU memory utilization (0.9, 71.24 GiB)".
VLLM_STARTUP_FREE = lazy(
    r"Free memory on device(?: [\w:]{1,20})? \((?P<free>\d{1,6}(?:\.\d{1,4})?)/(?P<total>\d{1,6}(?:\.\d{1,4})?) GiB\) on "
    r"startup is less than desired GPU memory utilization \((?P<util>\d(?:\.\d{1,6})?), (?P<want>\d{1,6}(?:\.\d{1,4})?) GiB\)"
)
# ggml's graph allocator (llama.cpp, Ollama) when its device buffer fails on its own line: "ggml_gallocr_reserve_n: failed
# to allocate CUDA0 buffer of size 2097152000", "unable to allocate CUDA0 buffer".
GGML_BUFFER = lazy(r"(?:failed|unable) to allocate CUDA(?P<gpu>\d{1,3}) buffer(?: of size (?P<requested>\d{1,20}))?")
# Ollama's scheduler refusing a model the host cannot hold: "model requires more system memory (164.8 GiB) than is
# available (13.4 GiB)".
OLLAMA_HOST = lazy(r"model requires more system memory \((?P<requested>" + SIZE + r")\) than is available \((?P<free>"
                   + SIZE + r")\)")
# torch-directml: "Could not allocate tensor with 234881024 bytes. There is not enough GPU video memory available!"
DIRECTML_ALLOC = lazy(r"Could not allocate tensor with (?P<requested>\d{1,20}) bytes\. There is not enough GPU video "
                      r"memory available")
# A notebook's traceback header names the exception before any message: "OutOfMemoryError      Traceback (most recent
# call last)". It is the failure only when the message itself was not kept (the cell's output was cut).
IPYTHON_OOM_HEADER = lazy(r"^\s{0,4}(?:torch\.(?:cuda\.)?)?OutOfMemoryError\s{2,200}Traceback \(most recent call last\)")
# The same header for TensorFlow's ResourceExhaustedError (Keras fit/predict in a notebook), message cut.
IPYTHON_TF_OOM_HEADER = lazy(r"^\s{0,4}(?:tensorflow\.python\.framework\.errors_impl\.)?ResourceExhaustedError"
                             r"\s{2,200}Traceback \(most recent call last\)")
# The same header for Python's host MemoryError, when the paste ends before the exception line.
IPYTHON_MEMORY_ERROR_HEADER = lazy(r"^\s{0,4}MemoryError\s{2,200}Traceback \(most recent call last\)")
# The DataLoader's own report of a worker that died without a Python exception; the kernel's OOM killer is the
# common cause (a segfault or bus error prints its own line first, see DATALOADER_NOT_OOM).
DATALOADER_EXIT = lazy(r"DataLoader worker \(pid\(s\) [\d, ]{1,200}\) exited unexpectedly")
DATALOADER_NOT_OOM = lazy(
    r"Unexpected (?:segmentation fault|bus error|floating-point exception) encountered in worker"
    r"|killed by signal: (?!Killed)"
)
# The CUDA math libraries' allocation-failure statuses; cuFFT's enum has no "STATUS" ("cuFFT error: CUFFT_ALLOC_FAILED").
CUBLAS = lazy(r"(?P<lib>CUBLAS|CUDNN|cuDNN|cuBLAS|CUSOLVER|CUFFT|CUSPARSE)_STATUS_ALLOC_FAILED|(?P<fft>CUFFT)_ALLOC_FAILED")
NCCL = lazy(r"(?:NCCL WARN )?Cuda failure(?: \d{1,20})? '?out of memory'?|ncclSystemError.{0,80}out of memory")
MPS = lazy(
    r"MPS backend out of memory \(MPS allocated: (?P<allocated>" + SIZE + r"), other allocations: (?P<other>" + SIZE
    + r")(?:, max allowed: (?P<total>" + SIZE + r"))?\)\. Tried to allocate (?P<requested>" + SIZE
    + r") on (?P<pool>shared|private) pool"
)
# XLA's allocators: "Out of memory while trying to allocate 6291456 bytes." (StreamExecutor's BFC), and
# "Out of memory allocating 20029400304 bytes." (reported from jaxlib's XlaRuntimeError on a GPU)
XLA_BYTES = lazy(
    r"(?:RESOURCE_EXHAUSTED|Resource exhausted): Out of memory (?:(?:while )?trying to allocate|allocating) (?P<requested>\d{1,20}(?:\.\d{1,20})?\s?(?:bytes|[KMGT]i?B|[KMGT])?)"
)
XLA_HBM = lazy(
    r"Ran out of memory in memory space (?P<space>\w+)\. Used (?P<used>\d{1,20}(?:\.\d{1,20})?[KMGT]?) of (?P<limit>\d{1,20}(?:\.\d{1,20})?[KMGT]?) \w+"
)
# TPU runtime (XRT, torch_xla/TF 1.x on TPU): "Resource exhausted: Attempting to allocate 180.59M. That was not
# possible. There are 142.58M free.; (0x3x0_HBM1)"
# Loading a program reserves its space at the bottom of HBM first: "RESOURCE_EXHAUSTED: Attempting to reserve 6.48G
# at the bottom of memory. That was not possible. There are 6.78G free, 0B reserved, and 3.33G reservable."
XLA_XRT = lazy(
    r"Attempting to (?:allocate|reserve) (?P<requested>\d{1,20}(?:\.\d{1,20})?[KMGT]?)(?: at the bottom of memory)?\. "
    r"That was not possible\.(?: There are (?P<free>\d{1,20}(?:\.\d{1,20})?[KMGT]?) free[.,])?"
)
# PJRT's device allocator (JAX on TPU and GPU): "RESOURCE_EXHAUSTED: Failed to allocate request for 256.00MiB
# (268435456B) on device ordinal 0" (also after "Resource exhausted: ").
XLA_REQUEST = lazy(
    r"(?:RESOURCE_EXHAUSTED|Resource exhausted): Failed to allocate request for \d{1,20}(?:\.\d{1,20})?\s?[KMGT]?i?B"
    r" \((?P<requested>\d{1,20})B\) on device ordinal (?P<device>\d{1,4})"
)
# A C++/CUDA source file's extension, as a check macro prints where it failed.
CPP_SOURCE = r"\.(?:cu|cuh|cc|cpp|h|hpp)"
# spconv's check after a CUDA call (TV_CHECK_CUDA_ERR): the source location as the exception's message, then "cuda
# execution failed with error 2" on the next line (2: cudaErrorMemoryAllocation).
SPCONV_CHECK = lazy(r"[\w./\\-]{1,300}" + CPP_SOURCE + r" \d{1,6}\s{0,4}cuda execution failed with error 2(?!\d)")
# XLA's GPU executable placing a compiled program's constant in device memory outside its BFC allocator: the device
# had no room ("INTERNAL: Failed to allocate 98697216 bytes for new constant"; jaxlib's XlaRuntimeError).
XLA_CONSTANT = lazy(r"Failed to allocate (?P<requested>\d{1,20}) bytes for new constant")
# fairseq's trainer (and projects that copied it, e.g. Boltz) catching an OOM and going on: "| WARNING: ran out of
# memory, skipping batch" (newer fairseq: "ran out of memory with exception: <message>; Skipping batch").
SKIP_BATCH = lazy(r"WARNING:? ran out of memory,? skipping batch")
XLA_ANY = lazy(r"RESOURCE_EXHAUSTED:?[^\n]{0,200}?(?:[Oo]ut of memory|ran out of memory|Ran out of memory)")
# TensorFlow's BFC allocator: "Allocator (GPU_0_bfc) ran out of memory trying to allocate 2.19GiB (rounded to …)";
# TF 1.x before the allocator was named: "Ran out of memory trying to allocate 193.0KiB.  See logs for memory state."
BFC_RAN_OUT = lazy(
    r"(?:Allocator \((?P<allocator>\w+)\) ran|Ran) out of memory trying to allocate (?P<requested>\d{1,20}(?:\.\d{1,20})?(?:[KMGT]i?B|[KMGT]|B)?)"
    r"(?: \(rounded to (?P<rounded>\d{1,20})\))?"
)
BFC_STAT = lazy(r"^\s*(?P<key>Limit|InUse|MaxInUse|NumAllocs|MaxAllocSize|Reserved|PeakReserved|LargestFreeBlock):\s+(?P<value>\d{1,20})\s*$")
TF_OOM = lazy(
    r"OOM when allocating tensor (?:(?:with|of) shape\s?\[?(?P<shape>[\d, ]*)\]?(?: and type (?P<dtype>\w+))? ?)?"
    r"(?:on (?P<device>[\w:/]+) )?(?:by allocator (?P<allocator>\w+))?"
)
STREAM_EXECUTOR_OOM = lazy(
    r"failed to allocate (?P<pretty>\d{1,20}(?:\.\d{1,20})?[KMGT]?) \((?P<requested>\d{1,20}) bytes\) from device: "
    r"(?:CUDA_ERROR_OUT_OF_MEMORY|hipError_t\(1002\)|hipErrorOutOfMemory)"  # ROCm's stream executor: HIP's old 1002
)
# The same stream executor failing to pin host memory for transfers (cuMemHostAlloc): "failed to alloc 4294967296
# bytes on host: CUDA_ERROR_OUT_OF_MEMORY: out of memory" - host RAM, reported through the driver.
STREAM_EXECUTOR_HOST = lazy(r"failed to alloc (?P<requested>\d{1,20}) bytes on host: CUDA_ERROR_OUT_OF_MEMORY")
KV_CACHE = lazy(
    r"No available memory for the cache blocks"
    r"|larger than the maximum number of tokens that can be stored in KV cache \((?P<tokens>\d{1,20})\)"
    r"|(?P<need>\d{1,20}(?:\.\d{1,20})? ?GiB) KV cache is needed, which is larger than the available KV cache memory \((?P<avail>\d{1,20}(?:\.\d{1,20})? ?GiB)\)"
    r"|[Ii]nsufficient (?:memory for )?KV cache"
)
CPU_ALLOC = lazy(
    r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory): you tried to allocate "
    r"(?:(?P<requested>\d{1,20}) bytes|(?P<gb>\d{1,20})GB)"
)
# NumPy (1.17+): "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 315. GiB for an array with shape
# (10000, 100, 84480) and data type float32"; before 1.17 without the size: "Unable to allocate array with shape ...".
# A structured or byte-order-marked data type is printed as NumPy writes it ("[('ptr', '<u8'), ...]", "<U32").
NUMPY_ALLOC = lazy(
    r"Unable to allocate (?:(?P<size>\d{1,20}(?:\.\d{0,6})?\s?(?:bytes|[KMGTPE]iB)) for )?(?:an )?array with shape "
    r"\((?P<shape>[\d, ]{0,200})\) and data type (?P<dtype>\w{1,20}|[<>|=]\w{1,20}|\[[^\]\n]{1,400}\])"
)
# C++ operator new failing on the host: "terminate called after throwing an instance of 'std::bad_alloc'" then
# "  what():  std::bad_alloc" (a data pipeline or extension out of host RAM), or pybind11's "MemoryError: std::bad_alloc".
BAD_ALLOC = lazy(r"instance of 'std::bad_alloc'|what\(\):\s{1,4}std::bad_alloc|MemoryError: std::bad_alloc"
                 r"|(?:\A|\n)\s{0,8}std::bad_alloc\s*(?:\n|\Z)")  # a tool's own handler printing e.what() alone
# The CUDA driver API's own error name, from C++ libraries that call it directly (tiny-cuda-nn's cuMemCreate, cuMemAlloc
# in custom kernels): "cuMemCreate(...) failed with error CUDA_ERROR_OUT_OF_MEMORY".
# flashlight's caching memory manager over ArrayFire (wav2letter, flashlight's ASR): "Failed to allocate memory of size
# 1.27 GiB (Device: 0, Capacity: 31.74 GiB, Allocated: 29.98 GiB, Cached: 994.36 MiB) with error 'ArrayFire Exception
# (Device out of memory:101)"; ArrayFire's own exception alone names no figures.
FLASHLIGHT_AF = lazy(r"Failed to allocate memory of size (?P<requested>" + SIZE + r") \(Device: (?P<gpu>\d{1,4}), "
                     r"Capacity: (?P<total>" + SIZE + r"), Allocated: (?P<allocated>" + SIZE + r")")
# ggml (llama.cpp and its forks) failing a device buffer, with the exact bytes on the allocator's next line:
# "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 279356.51 MiB on device 0: cudaMalloc failed: out of memory"
# "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 292926534144"
GGML_CUDA = lazy(
    r"allocating (?P<requested>\d{1,12}(?:\.\d{1,4})? MiB) on device (?P<gpu>\d{1,4}): cudaMalloc failed: out of memory"
    r"(?:\s{0,4}\n?[^\n]{0,80}failed to allocate CUDA\d{1,4} buffer of size (?P<bytes>\d{1,20}))?"
)
# CuPy's memory pool: "out of memory to allocate 205520896 bytes (total 16068929536 bytes)" (CuPy < 7); newer:
# "Out of memory allocating 205,520,896 bytes (allocated so far: 16,068,929,536 bytes)." The total is what the pool
# holds plus the request, not the card.
CUPY_POOL = lazy(
    r"[Oo]ut of memory to allocate (?P<requested>\d{1,20}) bytes \(total \d{1,20} bytes\)"
    r"|Out of memory allocating (?P<requested2>\d{1,3}(?:,\d{3}){0,6}) bytes \(allocated so far: [\d,]{1,30} bytes\)"
)
# MXNet's pooled storage manager: "src/storage/./pooled_storage_manager.h:107: cudaMalloc failed: out of memory"
# (MXNet 1.7+: "cudaMalloc retry failed: out of memory").
MXNET_CUDA = lazy(r"cudaMalloc (?:retry )?failed: out of memory"
                  r"|pooled_storage_manager\.h:\d{1,5}: Memory allocation failed")  # MXNet before 1.0
# TensorRT's allocator, with the exact request on its next warning line: "[E] 1: [defaultAllocator.cpp::allocate::21]
# Error Code 1: Cuda Runtime (out of memory)" / "[W] Requested amount of GPU memory (20401098752 bytes) could not be
# allocated." (the warning alone, on an engine's optional workspace, is harmless). TensorRT 8.4+ names the failure
# itself: "[virtualMemoryBuffer.cpp::resizePhysical::145] Error Code 2: OutOfMemory (no further information)".
TENSORRT_OOM = lazy(
    r"Error Code \d{1,3}: (?:Cuda Runtime \(out of memory\)|OutOfMemory \()"
    r"(?:\s{0,4}\n?[^\n]{0,40}Requested amount of GPU memory \((?P<bytes>\d{1,20}) bytes\))?"
)
# The builder going on without the tactic whose workspace did not fit: the OOM above it was survived.
TRT_TACTIC_SKIPPED = lazy(r"Skipping tactic \S{1,40} due to (?:insufficient memory|exceeding max workspace)")
# PaddlePaddle's legacy allocator (1.x): "Cannot allocate 112.500000MB in GPU 0, available 632.937500MBtotal
# 7981694976GpuMinChunkSize 256.000000BGpuMaxChunkSize 6.496908GBGPU memory used: 6.412701GB" (MB/GB are 2^20/2^30).
PADDLE_LEGACY = lazy(
    r"Cannot allocate (?P<requested>\d{1,12}(?:\.\d{1,8})?)MB in GPU (?P<gpu>\d{1,4}), available "
    r"(?P<free>\d{1,12}(?:\.\d{1,8})?)MB\s?total (?P<total>\d{1,20})"
    r"(?:[^\n]{0,200}?GPU memory used: (?P<used>\d{1,6}(?:\.\d{1,8})?)GB)?"
)
# CatBoost's GPU memory pool (figures in MiB): "Error: Out of memory. Requested 1070.546387; Free 1010.952393"
CATBOOST_OOM = lazy(r"Out of memory\. Requested (?P<requested>\d{1,12}(?:\.\d{1,8})?); Free (?P<free>\d{1,12}(?:\.\d{1,8})?)")
# faiss's GPU resources: "StandardGpuResources: alloc fail type TemporaryMemoryOverflow dev 0 space Device stream
# 0xbcdba10 size 32279537664 bytes (cudaMalloc error out of memory [2])"
FAISS_GPU = lazy(
    r"alloc fail type \w{1,40} dev (?P<gpu>\d{1,4}) space \w{1,20} stream (?:0x)?[0-9a-fA-F]{1,20} size "
    r"(?P<requested>\d{1,20}) bytes \(cudaMalloc error out of memory"
)
# faiss before 1.6.x (allocMemorySpaceV): "... 'err == cudaSuccess' failed: failed to cudaMalloc 2150400000 bytes
# (error 2 out of memory)" - the request, no device.
FAISS_GPU_OLD = lazy(r"failed to cudaMalloc (?P<requested>\d{1,20}) bytes \(error 2 out of memory\)")
CUDA_DRIVER_OOM = lazy(r"\bCUDA_ERROR_OUT_OF_MEMORY\b")
# Kaldi's CUDA allocator (Kaldi, Eesen): a failed cudaMalloc is retried once after the cache is released, then
# "WARNING (...) Allocation failed for the second time." and "ERROR (prog:MallocInternal():cuda-device.cc:668) Memory
# allocation failure" (cu-allocator.cc in later Kaldi: the same words from its MallocPitch).
KALDI_CUDA = lazy(r"\(\S{1,80}:(?:MallocInternal|MallocPitch\w{0,20}|Malloc\w{0,20})\(\):[\w.-]{1,60}:\d{1,6}\)\s{1,4}"
                  r"Memory allocation failure")
# Kaldi's cu-allocator (5.5+) growing its pool: "ERROR (nnet3-train[5.5]:AllocateNewRegion():cu-allocator.cc:519) Failed
# to allocate a memory region of 8088715264 bytes.  Possibly this is due to sharing the GPU.  ...  Memory info:
# free:15426M, used:17053M, total:32480M, free/total:0.474948 CUDA error: 'out of memory'" (M: MiB, the device's)
KALDI_REGION = lazy(r"Failed to allocate a memory region of (?P<requested>\d{1,20}) bytes\."
                    r"(?:[^\n]{0,600}?Memory info: free:(?P<free>\d{1,12}M), used:\d{1,12}M, total:(?P<total>\d{1,12}M))?")
# A native engine's own device allocation, sized and refused in one line: "ds4: CUDA q8 fp16 cache alloc failed (64.00
# MiB): out of memory"
DEVICE_ALLOC_FAILED = lazy(r"\b(?:CUDA|GPU|[Dd]evice)\b[^\n]{0,80}?\balloc(?:ation)? failed \((?P<requested>" + SIZE
                           + r")\): out of memory")
# detectron2's retry_if_cuda_oom catching an OOM and running the call again on the CPU: "[07/09 16:09:19
# d2.utils.memory]: Attempting to copy inputs of <function paste_masks_in_image at 0x7f...> to CPU due to CUDA OOM"
D2_RETRY_ON_CPU = lazy(r"Attempting to copy inputs(?: of [^\n]{1,300}?)? to CPU due to CUDA OOM")
# cuBLAS creating its handle (PyTorch's first matmul on a device or stream) cannot get its workspace: the driver
# returns NOT_INITIALIZED or ALLOC_FAILED; with the device already full, the usual reason.
CUBLAS_CREATE = lazy(r"CUBLAS_STATUS_NOT_INITIALIZED when calling `?cublasCreate\(handle\)")
# cuDNN finds no convolution algorithm whose workspace fits in what is left (PyTorch's Conv_v7/v8 search).
CUDNN_NO_ALGO = lazy(r"Unable to find a valid cuDNN algorithm to run convolution")
# ONNX Runtime's arena: "bfc_arena.cc:376 ... BFCArena::AllocateRawInternal ... Failed to allocate memory for
# requested buffer of size 2830172160". The arena serves the CUDA provider or the CPU one ("Cpu"; NCHWc nodes are
# the CPU provider's layout).
ORT_ARENA = lazy(r"Failed to allocate memory for requested buffer of size (?P<requested>\d{1,20})")
ORT_CPU = lazy(r"_nchwc\b|BFCArena for Cpu|CPUExecutionProvider")
# SGLang sizes its KV pool from --mem-fraction-static after loading the weights; when the weights (and CUDA graphs)
# leave nothing for it: "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
SGLANG_KV = lazy(r"Not enough memory\. Please try to increase --mem-fraction-static")
# TGI's warm-up runs the largest prefill batch it will serve: "Not enough memory to handle 4096 prefill tokens. You
# need to decrease `--max-batch-prefill-tokens`".
TGI_PREFILL = lazy(r"Not enough memory to handle (?P<tokens>\d{1,12}) prefill tokens")
# accelerate's find_executable_batch_size (and HF Trainer's auto_find_batch_size) halved the batch after every OOM
# down to zero: even a batch of one did not fit.
AUTO_BATCH_ZERO = lazy(r"(?<![\"'])No executable batch size found, reached zero")  # not the raise statement's string
# Host memory the process could not get from the kernel: fork/mmap failing with ENOMEM ("OSError: [Errno 12] Cannot
# allocate memory", DataLoader workers forking a large parent), Windows' commit limit ("[WinError 1455] The paging
# file is too small for this operation to complete", each worker mapping torch's DLLs again).
HOST_ENOMEM = lazy(r"\[Errno 12\] Cannot allocate memory|\[WinError 1455\] The paging file is too small"
                   r"|The paging file is too small for this operation to complete")  # a DLL load, Rust's "os error 1455"
# A DataLoader worker killed by SIGBUS while writing a batch into /dev/shm (Docker's default 64 MiB): PyTorch's own
# reading of it, from the worker ("ERROR: Unexpected bus error encountered in worker. This might be caused by
# insufficient shared memory (shm).") or the main process ("... killed by signal: Bus error. It is possible that
# dataloader's workers are out of shared memory.").
# Also torch.multiprocessing writing a shared tensor into a full /dev/shm ("unable to write to file
# </torch_722_783672312_1>: No space left on device (28)"), or any writer into it, NCCL's segments included.
SHM_EXHAUSTED = lazy(r"workers are out of shared memory|insufficient shared memory \(shm\)"
                     r"|unable to write to file </torch_\w{1,80}>|No space left on device: '/dev/shm/"
                     r"|failed to extend /dev/shm/\S{1,200} to \d{1,20} bytes")
# Ray's memory monitor killing work when the node's RAM runs out: "RayOutOfMemoryError: More than 95% of the memory on
# node n01 is used (59.62 / 62.75 GB)" (Ray 1.x), "ray.exceptions.OutOfMemoryError: Task was killed due to the node
# running low on memory." (Ray 2.x).
RAY_HOST_OOM = lazy(r"RayOutOfMemoryError: More than \d{1,3}% of the memory on node"
                    r"|OutOfMemoryError: (?:Task|Actor) was killed due to the node running low on memory")
# The advice that closes Ray's memory-monitor kill, pasted without the lines before it: only that kill prints it.
RAY_OOM_HINT = lazy(r"Refer to the documentation on how to address the out of memory issue: https?://docs\.ray\.io/")
# cymem's pool (spaCy, thinc) failing to get host memory: "MemoryError: Error assigning 18446744072562989824 bytes" (a
# size that wrapped around reads as an impossible request, which the figures' plausibility check then flags).
CYMEM_ALLOC = lazy(r"MemoryError: Error assigning (?P<requested>\d{1,25}) bytes")
# Rust's global allocator failing (tokenizers, polars, candle, ...): "memory allocation of 150994960 bytes failed",
# often with the shell's "Aborted" glued after it.
RUST_ALLOC = lazy(r"memory allocation of (?P<requested>\d{1,25}) bytes failed")
# Python's own MemoryError closing a traceback: the bare class name on its line ("MemoryError"), or with a detail the
# formats above do not own ("MemoryError: cannot allocate memory"). Never part of a longer name (OutOfMemoryError,
# _ArrayMemoryError) or of a sentence.
PY_MEMORY_ERROR = lazy(r"\A\s{0,8}(?:builtins\.)?MemoryError(?:\s*\Z|\s*\n|:[^\n]{0,300}\Z)")
HOST_KILL = lazy(
    r"exitcode\s*:\s*-9\b|Signal 9 \(SIGKILL\)|<Signals\.SIGKILL: 9>"
    r"|\bKilled\s*$|^\s*Killed\b|killed by signal: Killed|(?<!\d)\d{1,10} Killed\s"
    r"|(?<=[\d\]|%])Killed\s*$"  # the shell's notice glued to a progress line left without its newline: "loss: 2.1371Killed"
    # ... or printed over the head of a counter redrawn with "\r": "Killedg in train batch: 127687 / 263115"
    r"|^Killed(?=[a-z][^\n]{0,200}?\d{1,12}\s?(?:/|of)\s?\d{1,12}[^\n]{0,40}$)"
    r"|^\[\d{1,4}\][+-]?\s{1,8}(?:\d{1,10}\s{1,8})?[Kk]illed\s"  # bash / zsh job notice: "[1]    16261 killed     python3 ..."
    r"|terminated by signal SIGKILL"  # fish
    r"|\b(?:exit|exited with|exit status) code 137\b|\binterrupted by signal 9\b"  # 128 + SIGKILL: PyCharm, Docker
    r"|(?:ProcessExitedException|^Exception): process \d{1,6} terminated with signal SIGKILL"  # mp.spawn (before 1.5:
    # a plain Exception)
    r"|oom[_-]kill(?:er)? event|Detected \d{1,20} oom[_-]kill|killed by the cgroup out-of-memory handler"
    r"|exits with return code = -9\b|\breturn code -9\b|[Kk]illed: 9\b"  # DeepSpeed launcher, macOS shells
    r"|task \d{1,20}: Out Of Memory|exceeded memory limit \(\d{1,20} > \d{1,20}\), being killed"
    r"|OOM[ -]?[Kk]illed(?!\"?[ \t]{0,4}[:=][ \t]{0,4}(?:false|False)\b)"  # not docker inspect's "OOMKilled": false
    # the kernel's OOM killer, system-wide or in a memory cgroup; before 4.19: "Kill process N (x) score S or sacrifice child"
    r"|(?:Out of memory|[Mm]emory cgroup out of memory): Kill(?:ed)? process"
    r"|Killed /\S{1,400} due to memory (?:pressure|used)"  # systemd-oomd
    r"|\b[1-9]\d{0,8} Workers? \(tasks / actors\) killed due to memory pressure \(OOM\)"  # Ray's raylet
    r"|The node was low on resource: memory\."  # kubelet's eviction of the pod
    r"|process has terminated: signal: killed\b"  # Go's exec error for a SIGKILLed child (Ollama's llama runner)
    # the shell's notice in a translated locale (glibc's strsignal(SIGKILL)), ending its line as "Killed" does:
    # "run.sh: 行 30: 23195 已杀死", a bar followed by "Getötet"; or, as "N Killed  command", its pid then the command
    # it ran ("./tools/dist_test.sh: 第 13 行： 114146 已杀死 PYTHONPATH=... python3 test.py ...")
    r"|(?:" + KILLED_TRANSLATED_ALTERNATIVES + r")\s*$"
    r"|(?<!\d)\d{1,10} (?:" + KILLED_TRANSLATED_ALTERNATIVES + r")\s"
)
# Not kills: "Killed 3 stale workers", "SIGKILL" in a shutdown notice of a healthy run.
HOST_KILL_NOT = lazy(r"Killed \d{1,20} |Sending process \d{1,20} closing signal SIGKILL|will send SIGKILL|sending SIGKILL")

# Pieces of context (used by oomdoctor.parse.context).
TORCH_VERSION = lazy(
    r"(?:(?<![\w/.])torch(?:==|\s+version\s*[:=]?\s*|:\s*|\s+)|PyTorch version\s*:\s*|torch\.__version__\s*[:=]\s*)"
    r"v?(?P<version>\d{1,20}\.\d{1,20}(?:\.\d{1,20})?(?:[+.][\w.]+)?)"
)
ALLOC_CONF = lazy(
    r"(?P<var>PYTORCH_(?:CUDA_|HIP_)?ALLOC_CONF)['\"]?\s*[:=]\s*['\"]?(?P<value>[\w:,.\[\]>]+)"
)
ROOT_CAUSE_TEXT = "Root Cause (first observed failure)"
ROOT_CAUSE = lazy(regex.escape(ROOT_CAUSE_TEXT))
ROOT_RANK = lazy(r"^\s*rank\s*:\s*(?P<rank>\d{1,20})")
NCCL_CALLOC = lazy(r"Failed to CUDA (?:calloc|malloc|host alloc) (?P<requested>\d{1,20}) bytes")
