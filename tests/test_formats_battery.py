"""Out-of-memory messages from the libraries users run, each reconstructed from its upstream format and a public report.

Every example keeps the library's exact wording, prefixes and figures; the rest is written anew. The comment beside
it names where the wording and the figures come from (owner/repo#N, or the upstream file whose format string it is).
"""

from decimal import Decimal

import pytest

from oomdoctor.parse import parse_text

GIB, MIB = 1024**3, 1024**2


def b(number: str, power: int) -> int:
    """Exact bytes of a printed figure, computed independently of oomdoctor.units."""
    return int((Decimal(number) * 1024**power).to_integral_value())


BATTERY = [
    # (library, text, kind, fatal, figures)
    # --- PyTorch and its device backends ---
    ("torch xpu", "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 4.66 GiB. GPU 0 has a total capacity of "
     "5.65 GiB of which 5.65 GiB is free. Of the allocated memory 195.50 KiB is allocated by PyTorch, and 1.81 MiB is "
     "reserved by PyTorch but unallocated. Please use `empty_cache` to release all unoccupied cached memory.",
     "xpu_oom", True, {"requested_bytes": b("4.66", 3), "total_bytes": b("5.65", 3), "free_bytes": b("5.65", 3),
                       "allocated_bytes": b("195.50", 1), "gpu_index": 0}),  # intel/torch-xpu-ops#3011
    ("ipex xpu", "RuntimeError: XPU out of memory. Tried to allocate 1.00 GiB (GPU 0; 15.56 GiB total capacity; 990.00 "
     "MiB already allocated; 990.00 MiB reserved in total by PyTorch)", "xpu_oom", True,
     {"requested_bytes": GIB, "total_bytes": b("15.56", 3), "reserved_bytes": 990 * MIB,
      "free_bytes": None}),  # intel/intel-extension-for-pytorch#629
    ("sycl level zero", "terminate called after throwing an instance of 'sycl::_V1::exception'\n  what():  Enqueue process "
     "failed.\nlevel_zero backend failed with error: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)", "xpu_oom", True,
     {}),  # open-edge-platform/physical-ai-studio#440
    ("torch rocm", "RuntimeError: HIP error: out of memory\nHIP kernel errors might be asynchronously reported at some "
     "other API call, so the stacktrace below might be incorrect.", "hip_oom", True,
     {}),  # c10/cuda/CUDAException.h hipified: C10_CUDA_CHECK's "CUDA error: " prints "HIP error: "
    ("torch_npu", "RuntimeError: NPU out of memory. Tried to allocate 5.03 GiB (NPU 3; 60.96 GiB total capacity; 49.47 "
     "GiB already allocated; 49.47 GiB current active; 1.32 GiB free; 57.55 GiB reserved in total by PyTorch) If "
     "reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.", "cuda_oom", True,
     {"requested_bytes": b("5.03", 3), "free_bytes": b("1.32", 3), "reserved_bytes": b("57.55", 3),
      "gpu_index": 3}),  # xingchensong/TouchNet#100
    ("torch_npu", "torch.OutOfMemoryError: NPU out of memory. Tried to allocate 72.00 MiB (NPU 0; 61.27 GiB total "
     "capacity; 56.05 GiB already allocated; 56.05 GiB current active; 5.04 MiB free; 58.39 GiB reserved in total by "
     "PyTorch).If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.",
     "cuda_oom", True, {"requested_bytes": 72 * MIB, "free_bytes": b("5.04", 2)}),  # sgl-project/sglang#29838
    # torch_mlu's two eras (MLUCachingAllocator format strings; no public report with figures found: these are ours)
    ("torch_mlu", "torch.OutOfMemoryError: MLU out of memory. Tried to allocate 2.00 GiB (MLU 0; 31.48 GiB total "
     "capacity; 28.91 GiB already allocated; 1.03 GiB free; 29.02 GiB reserved in total by PyTorch)", "cuda_oom", True,
     {"requested_bytes": 2 * GIB, "total_bytes": b("31.48", 3), "free_bytes": b("1.03", 3), "gpu_index": 0}),
    ("torch_mlu", "torch.OutOfMemoryError: MLU out of memory. Tried to allocate 2.00 GiB. MLU 1 has a total capacity of "
     "31.48 GiB of which 1.03 GiBis free. Of the allocated memory 28.91 GiB is allocated by PyTorch, and 110.00 MiB is "
     "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
     "PYTORCH_MLU_ALLOC_CONF=expandable_segments:True to avoid fragmentation.", "cuda_oom", True,
     {"free_bytes": b("1.03", 3), "allocated_bytes": b("28.91", 3), "reserved_unallocated_bytes": 110 * MIB,
      "gpu_index": 1}),
    # torch_musa (Moore Threads): the 1.4-2.0 wording under its own device name (MUSACachingAllocator's format
    # string; the cut line is as an engine test keeps it, the full one's figures are ours)
    ("torch_musa", "torch.OutOfMemoryError: MUSA out of memory. Tried to allocate 896.00 MiB (GPU 0; 79.59 GiB total "
     "capacity; 77.31 GiB already allocated; 512.00 MiB free; 78.02 GiB reserved in total by PyTorch) If reserved memory "
     "is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory "
     "Management and PYTORCH_MUSA_ALLOC_CONF", "cuda_oom", True,
     {"requested_bytes": 896 * MIB, "free_bytes": 512 * MIB, "reserved_bytes": b("78.02", 3), "gpu_index": 0}),
    ("torch_musa", "torch.OutOfMemoryError: MUSA out of memory. Tried to allocate 896.00 MiB.", "cuda_oom", True,
     {"requested_bytes": 896 * MIB}),
    # the cudaMallocAsync backend's message inside ComfyUI's execution_error JSON, its line breaks escaped
    ("torch cudaMallocAsync", 'RuntimeError: ComfyUI execution error: {"exception_type": "torch.OutOfMemoryError", '
     '"exception_message": "Allocation on device 0 would exceed allowed memory. (out of memory)\\nCurrently allocated  '
     '   : 9.43 GiB\\nRequested               : 640.00 MiB\\nDevice limit            : 11.59 GiB\\nFree (according '
     'to CUDA): 7.12 MiB\\nPyTorch limit (set by user-supplied memory fraction)\\n                        : '
     '17179869184.00 GiB"}', "cuda_oom", True,
     {"requested_bytes": 640 * MIB, "total_bytes": b("11.59", 3), "free_bytes": b("7.12", 2),
      "allowed_bytes": None}),  # c10/cuda/CUDAMallocAsyncAllocator.cpp; ComfyUI's execution.py execution_error fields
    ("torch cpu 1.0", "RuntimeError: [enforce fail at CPUAllocator.cpp:56] posix_memalign(&data, gAlignment, nbytes) == "
     "0. 12 vs 0", "host_oom", True, {}),  # c10/core/CPUAllocator.cpp (1.0-1.2): CAFFE_ENFORCE_EQ(posix_memalign(...), 0)
    ("torch cpu windows", "RuntimeError: [enforce fail at C:\\actions-runner\\_work\\pytorch\\pytorch\\builder\\windows\\"
     "pytorch\\c10\\core\\impl\\alloc_cpu.cpp:72] data. DefaultCPUAllocator: not enough memory: you tried to allocate "
     "274877906944 bytes.", "host_oom", True, {"requested_bytes": 274877906944}),  # ristea/sspcab#11
    ("torch cpu windows", "RuntimeError: [enforce fail at ..\\c10\\core\\CPUAllocator.cpp:72] data. DefaultCPUAllocator: "
     "not enough memory: you tried to allocate 16777216000 bytes. Buy new RAM!", "host_oom", True,
     {"requested_bytes": 16777216000}),  # LeapMind/MLF-SC#41
    ("torch mps", "RuntimeError: Invalid buffer size: 19.45 GB", "mps_oom", True,
     {"requested_bytes": b("19.45", 3)}),  # pytorch/pytorch#141909 (MPSAllocator: one buffer over Metal's limit)
    # --- CUDA math libraries ---
    ("cufft", "RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED", "cublas", True,
     {"detail": {"library": "CUFFT"}}),  # aten/src/ATen/native/cuda/CuFFTUtils.h: "cuFFT error: " + enum name
    ("cusparse", "CuSparseError: CUSPARSE_STATUS_ALLOC_FAILED", "cublas", True,
     {"detail": {"library": "CUSPARSE"}}),  # NVIDIA-Genomics-Research/rapids-single-cell-examples#11 (CuPy)
    ("cusolver", "RuntimeError: cusolver error: CUSOLVER_STATUS_ALLOC_FAILED, when calling `cusolverDnCreate(handle)`",
     "cublas", True, {"detail": {"library": "CUSOLVER"}}),  # TORCH_CUSOLVER_CHECK's wording, JingwenWang95/KinectFusion#4
    ("cudnn", "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", "cublas", True,
     {"detail": {"library": "CUDNN"}}),  # aten/src/ATen/cudnn/Exceptions.h: "cuDNN error: " + status string
    # --- NCCL ---
    ("nccl", "[rank7]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
     "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n[rank7]: ncclUnhandledCudaError: "
     "Call to CUDA function failed.\n[rank7]: Last error:\n[rank7]: Cuda failure 2 'out of memory'", "nccl", True,
     {}),  # NVIDIA/nccl#1410 (the same report with error 2: NCCL's CUDACHECK "Cuda failure %d '%s'")
    ("nccl shm", "node0:1:1 [0] misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-H1dBqY to 9637892 "
     "bytes", "host_oom", True, {"detail": {"message_says": "shared_memory"}}),  # kserve/kserve#3791
    # --- libraries on top of PyTorch ---
    ("bitsandbytes", "Error out of memory at line 351 in file csrc/pythonInterface.c", "cuda_error", True,
     {}),  # bitsandbytes-foundation/bitsandbytes#464 (CUDA_CHECK_RETURN, paged optimizer's cudaMallocManaged)
    ("deepspeed inference", "Requested:\t104873984\nFree:\t49217536\nTotal:\t4294443008\nRuntimeError: Workspace can't be "
     "allocated, no enough memory.", "cuda_error", True,
     {"detail": {"library": "deepspeed", "message_says": "inference_workspace"}}),  # daswer123/xtts-webui#25
    # --- JAX / XLA ---
    ("jax gpu", "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
     "285212672 bytes.", "xla_oom", True, {"requested_bytes": 285212672}),  # google-deepmind/jaxline#11
    ("tpu reserve", "E tensorflow/compiler/xla/xla_client/xla_util.cc:88]   OP_REQUIRES failed at tpu_execute_op.cc:266 "
     ": RESOURCE_EXHAUSTED: Attempting to reserve 6.48G at the bottom of memory. That was not possible. There are 6.78G "
     "free, 0B reserved, and 3.33G reservable.", "xla_oom", True,
     {"requested_bytes": b("6.48", 3), "free_bytes": b("6.78", 3)}),  # pytorch/xla#3470
    ("tpu buffer", "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting "
     "to allocate 15.65G. That was not possible. There are 11.08G free.; (0x0x0_HBM0)", "xla_oom", True,
     {"requested_bytes": b("15.65", 3), "free_bytes": b("11.08", 3)}),  # google-deepmind/gemma#85
    ("tpu fragmented", "UnfilteredStackTrace: RuntimeError: RESOURCE_EXHAUSTED: Attempting to allocate 31.06M. That was "
     "not possible. There are 58.64M free. Due to fragmentation, the largest contiguous region of free memory is "
     "30.56M.; (0x0x0_HBM0)", "xla_oom", True,
     {"requested_bytes": b("31.06", 2), "free_bytes": b("58.64", 2)}),  # google/trax#431
    ("tpu compile", "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out "
     "of memory in memory space hbm. Used 21.95G of 15.48G hbm. Exceeded hbm capacity by 6.47G.\n\nTotal hbm usage >= "
     "22.47G:\n    reserved        530.00M\n    program          21.95G\n    arguments            0B", "xla_oom", True,
     {"total_bytes": b("15.48", 3)}),  # LargeWorldModel/LWM#60
    # --- TensorFlow ---
    ("tensorflow directml", "W tensorflow/core/framework/op_kernel.cc:1651] OP_REQUIRES failed at "
     "dml_kernel_context.cc:167 : Resource exhausted: OOM when allocating tensor with shape[1,64,150,150] and type float "
     "on /job:localhost/replica:0/task:0/device:DML:0 by allocator DmlAllocator", "tf_oom", True,
     {"requested_bytes": 64 * 150 * 150 * 4}),  # microsoft/tensorflow-directml#294
    # --- PaddlePaddle ---
    ("paddle 2.x", "ResourceExhaustedError: \n\nOut of memory error on GPU 0. Cannot allocate 1.000244GB memory on GPU "
     "0, 14.687500GB memory has been allocated and available memory is only 512.000000MB.\n\nPlease check whether there "
     "is any other process using GPU 0.", "cuda_oom", True,
     {"requested_bytes": b("1.000244", 3), "free_bytes": 512 * MIB}),  # paddle/fluid/memory/allocation (2.x wording)
    ("paddle 2.x external", "OSError: (External) CUDA error(2), out of memory.", "cuda_error", True,
     {}),  # paddle/phi/core/enforce.h's external-error wording, as PaddleOCR users report it
    ("paddle 1.x", "paddle.fluid.core.EnforceNotMet: Enforce failed. Expected allocating <= available, but received "
     "allocating:1073741824 > available:402653184.\nInsufficient GPU memory to allocation. at "
     "[/paddle/paddle/fluid/platform/gpu_info.cc:262]", "cuda_oom", True,
     {"requested_bytes": 1073741824, "free_bytes": 402653184}),  # PaddlePaddle/models#1543 (its figures cut; ours)
    ("paddle 0.x", "paddle.fluid.core.EnforceNotMet: enforce allocating <= available failed, 10513462067 > 1369702144\n"
     "at [/paddle/paddle/fluid/platform/gpu_info.cc:89]", "cuda_oom", True,
     {"requested_bytes": 10513462067, "free_bytes": 1369702144}),  # PaddlePaddle/Paddle#8992
    # --- MXNet, Caffe2 ---
    ("mxnet cpu", "mxnet.base.MXNetError: [07:41:06] src/storage/./cpu_device_storage.h:75: Failed to allocate CPU "
     "Memory", "host_oom", True, {}),  # deepinsight/insightface#1262
    ("mxnet 0.x", "[19:03:47] src/storage/./pooled_storage_manager.h:62: Memory allocation failed.", "cuda_error", True,
     {}),  # apache/mxnet#2913
    ("caffe2", "RuntimeError: [enforce fail at context_gpu.cu:415] error == cudaSuccess. 2 vs 0. Error at: "
     "/pytorch/caffe2/core/context_gpu.cu:415: out of memory Error from operator:", "cuda_error", True,
     {}),  # facebookresearch/DensePose#171
    # --- RAPIDS, XGBoost, LightGBM, CatBoost, Thrust ---
    ("rmm pool", "MemoryError: std::bad_alloc: out_of_memory: RMM failure at:/opt/conda/include/rmm/mr/device/"
     "pool_memory_resource.hpp:196: Maximum pool size exceeded", "cuda_oom", True, {}),  # rapidsai/rmm#1421
    ("rmm pool", "MemoryError: std::bad_alloc: RMM failure at:/src/third_party/rmm/include/rmm/mr/device/"
     "pool_memory_resource.hpp:179: Maximum pool size exceeded", "cuda_oom", True, {}),  # neka-nat/cupoch#98
    ("rmm cuda", "MemoryError: std::bad_alloc: CUDA error at: ../include/rmm/mr/device/cuda_memory_resource.hpp68: "
     "cudaErrorMemoryAllocation out of memory", "cuda_error", True, {}),  # rapidsai/rmm#496
    ("xgboost", "xgboost.core.XGBoostError: [13:55:26] /workspace/xgboost/src/c_api/../data/../common/"
     "device_helpers.cuh:414: Memory allocation error on worker 0: std::bad_alloc: cudaErrorMemoryAllocation: out of "
     "memory\n- Free memory: 11310923776\n- Requested memory: 47996", "cuda_error", True,
     {"requested_bytes": 47996, "free_bytes": 11310923776}),  # dmlc/xgboost#7140
    ("thrust", "terminate called after throwing an instance of 'thrust::system::detail::bad_alloc'\n  what():  "
     "std::bad_alloc: out of memory", "cuda_error", True, {}),  # OrangeOwlSolutions/Thrust#1
    ("lightgbm", "[LightGBM] [Fatal] [CUDA] out of memory /LightGBM/src/io/cuda/cuda_column_data.cpp 67", "cuda_error",
     True, {}),  # LightGBM cuda_utils gpuAssert "[CUDA] %s %s %d" (shape of lightgbm-org/LightGBM#4082)
    ("catboost", "catboost/cuda/cuda_lib/cuda_base.h:281: CUDA error 2: out of memory", "cuda_error", True,
     {}),  # catboost/cuda/cuda_lib/cuda_base.h CUDA_SAFE_CALL: "CUDA error " << code << ": " << cudaGetErrorString
    ("physx", "PxgCudaDeviceMemoryAllocator fail to allocate memory 339738624 bytes!! Result = 2", "cuda_error", True,
     {"requested_bytes": 339738624}),  # NVIDIA PhysX GPU simulation under Isaac Gym (Improbable-AI/walk-these-ways#20)
    ("nvidia warp", "Warp CUDA error 2: out of memory (in function alloc_device_async, "
     "/builds/omniverse/warp/warp/native/warp.cu:588)", "cuda_error", True, {}),  # NVIDIA/warp#611
    # --- CuPy, numba, PyCUDA ---
    ("numba", "numba.cuda.cudadrv.driver.CudaAPIError: [2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY",
     "cuda_error", True, {}),  # rapidsai/dask-cuda#225
    ("pycuda", "MemoryError: cuMemAlloc failed: out of memory", "cuda_error", True,
     {}),  # cryoem-uoft/cryosparc-issues#124 (pycuda._driver.MemoryError)
    # --- ONNX Runtime, CNTK, TensorRT, TensorRT-LLM ---
    ("onnxruntime cuda", "[ONNXRuntimeError] : 1 : FAIL : onnxruntime::CudaCall CUDA failure 2: out of memory ; GPU=0 ; "
     "hostname=node0 ; file=/onnxruntime_src/onnxruntime/core/providers/cuda/cuda_stream_handle.cc ; line=175 ; "
     "expr=cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);", "cuda_error", True,
     {"gpu_index": 0}),  # hacksider/Deep-Live-Cam#584
    ("onnxruntime cublas", "Error in execution: onnxruntime::CudaCall CUBLAS failure 3: CUBLAS_STATUS_ALLOC_FAILED ; "
     "GPU=1 ; hostname=node0 ; file=/onnxruntime_src/onnxruntime/core/providers/cuda/cuda_stream_handle.cc ; line=51 ; "
     "expr=cublasCreate(&cublas_handle_);", "cublas", True, {"gpu_index": 1}),  # C0untFloyd/roop-unleashed#425
    ("cntk", "RuntimeError: CUDA failure 2: out of memory ; GPU=0 ; hostname=node0 ; expr=cudaMalloc((void**) "
     "&deviceBufferPtr, sizeof(AllocatedElemType) * numElements)", "cuda_error", True,
     {"gpu_index": 0}),  # microsoft/CNTK#1591
    ("tensorrt 8", "[09/04/2023-22:30:21] [TRT] [E] 2: [virtualMemoryBuffer.cpp::nvinfer1::StdVirtualMemoryBufferImpl::"
     "resizePhysical::145] Error Code 2: OutOfMemory (no further information)", "cuda_error", True,
     {}),  # Kiteretsu77/FAST_Anime_VSR#9
    ("tensorrt 8 builder", "ERROR: [TRT]: 2: [virtualMemoryBuffer.cpp::resizePhysical::160] Error Code 2: OutOfMemory "
     "(no further information)\nERROR: [TRT]: 2: [virtualMemoryBuffer.cpp::resizePhysical::145] Error Code 2: "
     "OutOfMemory (no further information)\nWARNING: [TRT]: Requested amount of GPU memory (4294967296 bytes) could not "
     "be allocated. There may not be enough free memory for allocation to succeed.\nWARNING: [TRT]: Skipping tactic 3 "
     "due to insufficient memory on requested size of 4294967296 detected for tactic 0x0000000000000004.",
     "cuda_error", False, {}),  # marcoslucianops/DeepStream-Yolo#366: the builder skipped the tactic and went on
    ("tensorrt 7", "[TensorRT] ERROR: ../rtSafe/safeRuntime.cpp (25) - Cuda Error in allocate: 2 (out of memory)",
     "cuda_error", True, {}),  # Star-Clouds/CenterFace#107
    ("tensorrt-llm", "RuntimeError: [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, "
     "mCudaStream->get()): out of memory (/app/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:112)", "cuda_error",
     True, {}),  # triton-inference-server/tensorrtllm_backend#281
    # --- serving engines ---
    ("vllm start-up", "ValueError: Free memory on device (59.32/79.15 GiB) on startup is less than desired GPU memory "
     "utilization (0.9, 71.24 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
     "cuda_oom", True, {"free_bytes": b("59.32", 3), "total_bytes": b("79.15", 3),
                        "requested_bytes": b("71.24", 3)}),  # ovg-project/kvcached#29
    ("vllm start-up", "ValueError: Free memory on device cuda:0 (19.77/22.05 GiB) on startup is less than desired GPU "
     "memory utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
     "processes.", "cuda_oom", True, {"free_bytes": b("19.77", 3)}),  # pytorch/pytorch#175666
    # --- llama.cpp / ggml, Ollama, MLX, Metal, DirectML ---
    ("ggml", "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144817.04 MiB on device 0: cudaMalloc failed: out "
     "of memory\nalloc_tensor_range: failed to allocate CUDA0 buffer of size 151851674624\nllama_model_load: error "
     "loading model: unable to allocate CUDA0 buffer", "cuda_error", True,
     {"requested_bytes": 151851674624, "gpu_index": 0}),  # ggml-org/llama.cpp#20431
    ("ggml", "ggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 10345253120\n"
     "llama_kv_cache_update_impl: failed to allocate compute buffers", "cuda_error", True,
     {"requested_bytes": 10345253120, "gpu_index": 1}),  # ggml-org/llama.cpp#11476 (its allocator line lost)
    ("ggml metal", "ggml_metal_graph_compute: command buffer 3 failed with status 5\nerror: Insufficient Memory "
     "(00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)", "mps_oom", True, {}),  # ollama/ollama#6257
    ("mlx metal", "libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] Command buffer "
     "execution failed: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)", "mps_oom", True,
     {}),  # youssofal/MTPLX#194
    ("mlx", "RuntimeError: [metal::malloc] Attempting to allocate 1691143372800 bytes which is greater than the maximum "
     "allowed buffer size of 77309411328 bytes.", "mps_oom", True,
     {"requested_bytes": 1691143372800}),  # ml-explore/mlx#2218
    ("ollama", "Error: model requires more system memory (164.8 GiB) than is available (13.4 GiB)", "host_oom", True,
     {"requested_bytes": b("164.8", 3), "free_bytes": b("13.4", 3)}),  # ollama/ollama#10920
    ("ollama", "Error: llama runner process has terminated: signal: killed", "host_oom", True,
     {}),  # ollama/ollama#788 (the runner killed as the host's memory ran out)
    ("directml", "RuntimeError: Could not allocate tensor with 234881024 bytes. There is not enough GPU video memory "
     "available!", "cuda_error", True, {"requested_bytes": 234881024,
                                        "detail": {"backend": "directml"}}),  # microsoft/DirectML#579
    # --- host kills ---
    ("kernel < 4.19", "[1880957.563400] Out of memory: Kill process 18694 (python) score 246 or sacrifice child\n"
     "[1880957.563408] Killed process 18694 (python) total-vm:1972392kB, anon-rss:1953348kB, file-rss:0kB", "host_oom",
     True, {}),  # mm/oom_kill.c before 4.19: "%s: Kill process %d (%s) score %u or sacrifice child"
    ("kernel memcg", "Memory cgroup out of memory: Killed process 28512 (python) total-vm:98765432kB, "
     "anon-rss:65432100kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:130000kB oom_score_adj:0", "host_oom", True,
     {}),  # mm/oom_kill.c __oom_kill_process: "%s: Killed process %d (%s) total-vm:..." with the memcg message
    ("kubernetes", "    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137", "host_oom",
     True, {}),  # kubectl describe pod
    ("kubelet eviction", "Warning   Evicted   pod/trainer-0   The node was low on resource: memory. Container trainer "
     "was using 1924152Ki, which exceeds its request of 0.", "host_oom", True,
     {}),  # pkg/kubelet/eviction/helpers.go: "The node was low on resource: %v. " + the container clause
    ("systemd-oomd", "systemd-oomd[840]: Killed /user.slice/user-1001.slice/user@1001.service/app.slice/"
     "app-org.gnome.Terminal.slice/vte-spawn-1.scope due to memory pressure for /user.slice/user-1001.slice/"
     "user@1001.service being 51.07% > 50.00% for > 20s with reclaim activity", "host_oom", True,
     {}),  # systemd/systemd#23606
    ("ray", "(raylet) [2025-04-02 15:02:00,117 E 135782 135782] (raylet) node_manager.cc:3069: 1 Workers (tasks / "
     "actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 351e406b, IP: "
     "10.0.0.2) over the last time period.", "host_oom", True, {}),  # hiyouga/EasyR1#185
    ("torch shm", "RuntimeError: unable to write to file </torch_722_783672312_1>: No space left on device (28)",
     "host_oom", True, {"detail": {"message_says": "shared_memory"}}),  # ultralytics/ultralytics#1238
    ("torch shm 0.4", "RuntimeError: unable to write to file </torch_76_3625483894> at "
     "/pytorch/aten/src/TH/THAllocator.c:383", "host_oom", True,
     {"detail": {"message_says": "shared_memory"}}),  # pytorch/pytorch#10396
    ("windows paging", "ImportError: DLL load failed: The paging file is too small for this operation to complete.",
     "host_oom", True, {"detail": {"message_says": "paging_file"}}),  # daigo0927/pwcnet#4
]


@pytest.mark.parametrize("library,text,kind,fatal,figures", BATTERY, ids=[f"{e[0]}-{i}" for i, e in enumerate(BATTERY)])
def test_library_message(library, text, kind, fatal, figures):
    (e,) = parse_text(text + "\n").events
    assert (e.kind, e.fatal) == (kind, fatal)
    for key, value in figures.items():
        if key == "detail":
            assert value.items() <= e.detail.items(), e.detail
        else:
            assert getattr(e, key) == value, key


# Texts that name memory without an allocation having failed: retried and recovered, a limit on something else,
# a configuration value, a state dump. They matter as much as detections.
SILENT = [
    ('        "OOMKilled": false,\n        "Dead": false,', "docker inspect of a healthy container"),
    ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 212992, Hardware limit: 101376. "
     "Reducing block sizes or `num_stages` may help.", "a kernel's per-block shared memory, not an allocation"),
    ("WARNING: [TRT]: Requested amount of GPU memory (4294967296 bytes) could not be allocated. There may not be enough "
     "free memory for allocation to succeed.\nWARNING: [TRT]: Skipping tactic 3 due to insufficient memory on requested "
     "size of 4294967296 detected for tactic 0x0000000000000004.", "TensorRT's builder skipping a tactic"),
    ("[2026-09-13 16:06:07] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 646, "
     "#new_token_ratio: 0.0980 -> 0.3487", "SGLang retracting a request and going on"),
    ("WARNING 05-09 00:49:33 scheduler.py:1057 Sequence group 0 is preempted by PreemptionMode.RECOMPUTE mode because "
     "there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization "
     "or tensor_parallel_size to provide more KV cache memory. total_cumulative_preemption_cnt=1",
     "vLLM preempting a sequence"),
    ("Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom to "
     "RunOptions for current allocation info.", "TensorFlow's hint alone"),
    ("W external/xla/xla/tsl/framework/bfc_allocator.cc:291] Allocator (GPU_0_bfc) ran out of memory trying to allocate "
     "8.00GiB with freed_by_count=0. The caller indicates that this is not a failure, but this may mean that there could "
     "be performance gains if more memory were available.", "XLA's BFC allocator retried and succeeded"),
    ("See https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory",
     "a URL holding the words"),
    ("docker run --oom-kill-disable --shm-size=64g -v /dev/shm:/dev/shm trainer", "a command line"),
    ("memory_monitor_refresh_ms: 250, memory_usage_threshold: 0.95", "Ray's memory monitor settings"),
    ("rmm.reinitialize(pool_allocator=True, initial_pool_size=2**30, maximum_pool_size=2**32)", "an RMM pool set-up"),
    ("we catch std::bad_alloc: out of memory in the tokenizer and fall back", "a C++ what() string in prose"),
    ("RuntimeError: Invalid buffer size: 8 KB requested by the audio ring", "another program's buffer check"),
    ("PxgCudaDeviceMemoryAllocator fail to allocate memory 4096 bytes!! Result = 700",
     "PhysX's allocator failing on another CUDA error (700: an illegal address), not memory"),
]


@pytest.mark.parametrize("text,why", SILENT, ids=[w for _, w in SILENT])
def test_text_that_is_no_failure_stays_silent(text, why):
    assert parse_text(text + "\n").events == ()
