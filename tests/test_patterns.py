"""One literal example line per message era and kind, parsed to exact figures."""

from decimal import Decimal

import pytest

from oomdoctor.parse import parse_text

GIB, MIB = 1024**3, 1024**2


def b(number: str, power: int) -> int:
    """Exact bytes of a printed figure, computed independently of oomdoctor.units."""
    return int((Decimal(number) * 1024**power).to_integral_value())


EXAMPLES = [
    # (line, kind, era, figures)
    ("RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/generic/THCStorage.cu:58",
     "cuda_oom", "pre-1.0", {}),
    ("RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; 8.57 MiB already "
     "allocated; 9.28 GiB free; 4.68 MiB cached)", "cuda_oom", "1.0-1.3",
     {"requested_bytes": b("12.50", 2), "allocated_bytes": b("8.57", 2), "reserved_unallocated_bytes": b("4.68", 2),
      "reserved_bytes": b("8.57", 2) + b("4.68", 2), "gpu_index": 0}),
    ("RuntimeError: CUDA out of memory. Tried to allocate 2.26 GiB (GPU 0; 6.00 GiB total capacity; 781.59 MiB already "
     "allocated; 3.03 GiB free; 1.24 GiB reserved in total by PyTorch)", "cuda_oom", "1.4-2.0",
     {"requested_bytes": b("2.26", 3), "total_bytes": 6 * GIB, "reserved_bytes": b("1.24", 3),
      "reserved_unallocated_bytes": b("1.24", 3) - b("781.59", 2)}),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 38.00 MiB (GPU 0; 4.00 GiB total capacity; "
     "3.41 GiB already allocated; 0 bytes free; 3.44 GiB reserved in total by PyTorch) If reserved memory is >> "
     "allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management "
     "and PYTORCH_CUDA_ALLOC_CONF", "cuda_oom", "1.10-2.0", {"free_bytes": 0, "requested_bytes": 38 * MIB}),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 496.00 MiB. GPU 0 has a total capacty of "
     "14.75 GiB of which 235.06 MiB is free. Process 20398 has 14.52 GiB memory in use. Of the allocated memory 14.06 "
     "GiB is allocated by PyTorch, and 330.42 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
     "memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management "
     "and PYTORCH_CUDA_ALLOC_CONF", "cuda_oom", "2.1",
     {"process_in_use_bytes": b("14.52", 3), "other_processes": ()}),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity of 23.65 GiB "
     "of which 11.06 MiB is free. Including non-PyTorch memory, this process has 23.60 GiB memory in use. Of the "
     "allocated memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but unallocated. If "
     "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
     "fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#"
     "environment-variables)", "cuda_oom", "2.2-2.8", {"process_in_use_bytes": b("23.60", 3)}),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of 28.00 GiB "
     "of which 616.00 MiB is free. Including non-PyTorch memory, this process has 27.40 GiB memory in use. Of the "
     "allocated memory 26.00 GiB is allocated by PyTorch, and 920.76 MiB is reserved by PyTorch but unallocated. If "
     "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
     "fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html"
     "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)", "cuda_oom", "2.11+", {"total_bytes": 28 * GIB}),
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 76.00 MiB. GPU 0 has a total capacity of 255.69 GiB "
     "of which 252.82 GiB is free. 1.20 GiB allowed; Of the allocated memory 1.14 GiB is allocated by PyTorch, with "
     "17.00 MiB allocated in private pools (e.g., HIP Graphs), and 18.63 MiB is reserved by PyTorch but unallocated.",
     "hip_oom", "2.2-2.8", {"allowed_bytes": b("1.20", 3), "private_pools_bytes": 17 * MIB}),
    ("RuntimeError: MPS backend out of memory (MPS allocated: 1024.00 MiB, other allocations: 384.00 KiB, max allowed: "
     "511.18 MiB). Tried to allocate 256.00 MiB on shared pool.", "mps_oom", None,
     {"requested_bytes": 256 * MIB, "allocated_bytes": 1024 * MIB}),
    ("RuntimeError: CUDA error: out of memory", "cuda_error", None, {}),
    ("RuntimeError: CUDA error:out of memory", "cuda_error", None, {}),  # retyped with the space lost
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "cublas", None, {}),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6291456 bytes.",
     "xla_oom", None, {"requested_bytes": 6291456}),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating 20029400304 bytes.",
     "xla_oom", None, {"requested_bytes": 20029400304}),
    ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
     "shape[8,1024,4096] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
     "tf_oom", None, {"requested_bytes": 8 * 1024 * 4096 * 4, "gpu_index": 0}),
    ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node __wrapped__Mul_device_/job:"
     "localhost/replica:0/task:0/device:GPU:0}} failed to allocate memory [Op:Mul]", "tf_oom", None,
     {"gpu_index": 0, "requested_bytes": None}),  # TF 2 eager ops: the op, no size
    ("ResourceExhaustedError: failed to allocate memory", "tf_oom", None,
     {"gpu_index": None, "requested_bytes": None}),  # TF 1.15 graph mode (a Colab session.run): no op, size or device
    ("MemoryError: std::bad_alloc: out_of_memory: CUDA error (failed to allocate 88577278284 bytes) at: /opt/rmm/"
     "cuda_memory_resource.hpp", "cuda_error", None, {"requested_bytes": 88577278284}),  # RMM without a pool
    ("W tensorflow/core/framework/op_kernel.cc:1158] Resource exhausted: OOM when allocating tensor with "
     "shape[1,1,100000,512]", "tf_oom", None, {"requested_bytes": None}),  # TF 1.x: the shape without its type
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
     "the engine.", "kv_cache", None, {}),
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
     "to allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)", "host_oom", None,
     {"requested_bytes": 68719476736}),
    ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 315. GiB for an array with shape (10000, 100, 84480) "
     "and data type float32", "host_oom", None, {"requested_bytes": 10000 * 100 * 84480 * 4}),  # NumPy 1.17+
    ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 2.73 TiB for an array with shape (124994103978,) "
     "and data type [('sample_id', '<u8'), ('ptr', '<u8'), ('size', '<u8')]", "host_oom", None,
     {"requested_bytes": 124994103978 * 24}),  # a structured data type: its fields' sizes
    ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 2.73 TiB for an array with shape (124994103978,) "
     "and data type [('xyz', '<f4', (3,)), ('ptr', '<u8')]", "host_oom", None,
     {"requested_bytes": round(2.73 * 2**40)}),  # a field with a shape of its own: the printed size
    ("RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62", "cuda_error", None, {}),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGKILL", "host_oom",
     None, {}),
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=1234.0. Some of the step tasks have been OOM Killed.",
     "host_oom", None, {}),
    # fallbacks and the other libraries' wordings
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3725.29 GiB. GPU ", "cuda_oom", None,
     {"requested_bytes": b("3725.29", 3)}),  # cut at the device index
    ("!!! Exception during processing !!! Allocation on device ", "cuda_oom", None, {"requested_bytes": None}),
    ("2025-07-08 10:39:40 ERROR    !!! Exception during processing !!! Allocation on device                   "
     "execution.py:430", "cuda_oom", None, {"requested_bytes": None}),  # rich's logger: its source on the right
    # ^ the same, its 8-bit device index streamed as a character: device 0's NUL ended the print (ComfyUI)
    ("torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\n"
     "Currently allocated     : 9.43 GiB\nRequested               : 640.00 MiB\nDevice limit            : 11.59 GiB\n"
     "Free (according to CUDA): 7.12 MiB\nPyTorch limit (set by user-supplied memory fraction)\n"
     "                        : 17179869184.00 GiB", "cuda_oom", None,  # the cudaMallocAsync backend, one per line
     {"requested_bytes": 640 * MIB, "allocated_bytes": b("9.43", 3), "total_bytes": b("11.59", 3),
      "free_bytes": b("7.12", 2), "gpu_index": 0, "allowed_bytes": None}),
    ("RuntimeError: MPS backend out of memory", "mps_oom", None, {}),
    ("Error in void faiss::gpu::allocMemorySpaceV(faiss::gpu::MemorySpace, void**, size_t) at "
     "gpu/utils/MemorySpace.cpp:26: Error: 'err == cudaSuccess' failed: failed to cudaMalloc 2150400000 bytes (error 2 "
     "out of memory)", "cuda_error", None, {"requested_bytes": 2150400000}),  # faiss before 1.6.x
    ("RuntimeError: [metal::malloc] Attempting to allocate 17179869184 bytes which is greater than the maximum allowed "
     "buffer size of 14302248960 bytes.", "mps_oom", None, {"requested_bytes": 17179869184, "total_bytes": None}),
    # ^ Apple MLX: one buffer over Metal's per-buffer limit (the limit is not the device's memory)
    ("torch.cuda.OutOfMemoryError: CUDA out of memory.", "cuda_oom", None, {}),  # a paste cut after its first sentence
    ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 214.00", "cuda_oom", None,
     {"requested_bytes": None}),  # cut inside its request, before the unit: no size
    ("[rank6]: torch.OutOfMemoryError: CUDA out of memory. Tried", "cuda_oom", None, {}),  # cut after its first word
    ("RuntimeError: CUDA Error 2, out of memory", "cuda_error", None, {}),  # tinygrad's runtime/ops_cuda.py check()
    ("  what():  Error while calling cudaMalloc(&data, new_size*sizeof(float)) in file /src/dlib/dnn/gpu_data.cpp:190. "
     "code: 2, reason: out of memory", "cuda_error", None, {}),  # dlib::cuda_error (dlib/cuda/cuda_errors.h)
    ("Failed to allocate memory of size 2.50 GiB (Device: 1, Capacity: 15.75 GiB, Allocated: 14.20 GiB, Cached: 310.00 "
     "MiB) with error 'ArrayFire Exception (Device out of memory:101):", "cuda_error", None,
     {"requested_bytes": b("2.50", 3), "gpu_index": 1, "total_bytes": b("15.75", 3), "allocated_bytes": b("14.20", 3)}),
    # ^ flashlight's CachingMemoryManager over ArrayFire (fl/memory/managers/CachingMemoryManager.cpp)
    ("  what():  ArrayFire Exception (Device out of memory:101):", "cuda_error", None, {}),  # ArrayFire's af::exception
    ("ResourceExhaustedError: OOM when allocating tensor with shape[32,35,35,320]\n\t [[Node: block/add = Add[T=DT_FLOAT, "
     '_device="/job:localhost/replica:0/task:0/gpu:1"](block/mul, block/relu)]]', "tf_oom", None, {"gpu_index": 1}),
    # ^ TensorFlow before 1.4 spelled the device ".../task:0/gpu:1"
    ("torch.OutOfMemoryError: CUDA out of memory. See documentation for Memory Management  (https://pytorch.org/docs/"
     "stable/notes/cuda.html#environment-variables)", "cuda_oom", None, {}),  # ... its figures cut out, the link kept
    ("terminate called after throwing an instance of 'std::bad_alloc'", "host_oom", None, {}),
    ("MemoryError", "host_oom", None, {}),
    ("std::bad_alloc", "host_oom", None, {}),
    ("gpu_memory.h:523 cuMemCreate(&m_handles.back(), n_bytes_to_allocate, &prop, 0) failed with error "
     "CUDA_ERROR_OUT_OF_MEMORY", "cuda_error", None, {}),  # tiny-cuda-nn through the driver API
    ("ray.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node node01 is used (59.62 / 62.75 GB).",
     "host_oom", None, {}),
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", "host_oom", None, {}),
    ("Process finished with exit code 137 (interrupted by signal 9: SIGKILL)", "host_oom", None, {}),  # PyCharm
    ("trainer exited with code 137", "host_oom", None, {}),  # Docker compose
    ("2019-01-08 19:06:11.303639: E tensorflow/stream_executor/rocm/rocm_driver.cc:601] failed to allocate 7.35G "
     "(7889485824 bytes) from device: hipError_t(1002)", "tf_oom", None, {"requested_bytes": 7889485824}),  # ROCm  # a C++ tool's handler printing what() on its own line  # Python's own, closing a traceback (pickling a dataset, a list of arrays)
    ("THCudaCheck FAIL file=/pytorch/aten/src/THC/THCCachingHostAllocator.cpp line=278 error=2 : out of memory",
     "host_oom", "pre-1.0", {}),  # cudaHostAlloc: pinned host memory
    ("THCudaCheck FAIL file=/pytorch/aten/src/THC/generic/THCStorage.cu line=58 error=2 : out of memory",
     "cuda_oom", "pre-1.0", {}),
    ("gpu-node07:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'", "nccl", None,
     {"gpu_index": 3}),
    ("ResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate 1.000244GB memory on GPU 0, 14.687500GB "
     "memory has been allocated and available memory is only 512.000000MB.", "cuda_oom", None,
     {"requested_bytes": b("1.000244", 3), "free_bytes": 512 * MIB}),  # PaddlePaddle
    ("E tensorflow/stream_executor/cuda/cuda_driver.cc:806] failed to allocate 3.95G (4240965888 bytes) from device: "
     "CUDA_ERROR_OUT_OF_MEMORY: out of memory", "tf_oom", None, {"requested_bytes": 4240965888}),
    ("W tensorflow/core/common_runtime/bfc_allocator.cc:424] Allocator (GPU_0_bfc) ran out of memory trying to "
     "allocate 2.19GiB (rounded to 2348810240)requested by op Conv2D", "tf_oom", None,
     {"requested_bytes": 2348810240, "gpu_index": 0}),
    ("W external/org_tensorflow/tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (GPU_0_bfc) ran out of "
     "memory trying to allocate 18.44GiB (rounded to 19805393664)requested by op ", "xla_oom", None,  # jaxlib's copy
     {"requested_bytes": 19805393664}),
    ("W tensorflow/core/common_runtime/bfc_allocator.cc:275] Ran out of memory trying to allocate 193.0KiB.  See "
     "logs for memory state.", "tf_oom", None, {"requested_bytes": 197632}),  # TF 1.x, before allocators were named
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in "
     "memory space hbm. Used 21.90G of 7.48G hbm. Exceeded hbm capacity by 14.42G.", "xla_oom", None,
     {"total_bytes": b("7.48", 3)}),
    ("2020-10-22 02:48:58 10.0.0.2 [3]   (1) Resource exhausted: Attempting to allocate 180.59M. That was not possible. "
     "There are 142.58M free.; (0x3x0_HBM1)", "xla_oom", None,  # TPU runtime (XRT)
     {"requested_bytes": b("180.59", 2), "free_bytes": b("142.58", 2)}),
    ("Predicting DataLoader 0:   0%|   | 0/1 [00:00<?, ?it/s]| WARNING: ran out of memory, skipping batch", "cuda_oom",
     None, {}),  # fairseq's caught OOM (copied by Boltz), glued to a bar
    ("Execution of replica 0 failed: RESOURCE_EXHAUSTED: Failed to allocate request for 256.00MiB (268435456B) on "
     "device ordinal 0", "xla_oom", None, {"requested_bytes": 268435456}),  # PJRT's device allocator (JAX)
    ("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to allocate 98697216 bytes for new constant", "xla_oom",
     None, {"requested_bytes": 98697216}),  # XLA's GPU executable placing a program's constant
    ("[1]    16261 killed     python3 train.py --model_size 65B", "host_oom", None, {}),  # zsh job notice
    ("[1]+  Killed                  python train.py", "host_oom", None, {}),  # bash job notice
    ("165376/296960 [===============>..............] - ETA: 365s - loss: 2.1371Killed", "host_oom", None, {}),  # glued
    ("fish: Job 1, 'python train.py' terminated by signal SIGKILL (Forced quit)", "host_oom", None, {}),
    ("  what():  [TM][ERROR] CUDA runtime error: out of memory /opt/lmdeploy/src/turbomind/utils/allocator.h:223 ",
     "cuda_error", None, {}),  # FasterTransformer / TurboMind check_cuda_error
    ("OutOfMemoryError                          Traceback (most recent call last)", "cuda_oom", None, {}),  # notebook
    ("GPUassert: out of memory pcdet/ops/iou3d_nms/src/iou3d_nms.cpp 103", "cuda_error", None, {}),  # gpuAssert macro
    ("CUDA Runtime Error at: src/data_struct_cuda.cu:83\nout of memory cudaMalloc(&d_jcb, n * sizeof(float))",
     "cuda_error", None, {}),  # a check macro: the place, then cudaGetErrorString and the call on the next line
    ('CUDA error at src/kernel.cu:42 code=2(cudaErrorMemoryAllocation) "cudaMalloc(&d_buf, bytes)"', "cuda_error",
     None, {}),  # the CUDA samples' helper_cuda.h checkCudaErrors
    ("RuntimeError: CUDA failed with error out of memory", "cuda_error", None, {}),  # CTranslate2
    ("Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/en/latest/ray-core/"
     "scheduling/ray-oom-prevention.html.", "host_oom", None, {}),  # Ray's memory-monitor kill, its advice alone
    ("ggml/src/ggml-cuda/ggml-cuda.cu:444: HipVMM Failure: out of memory", "hip_oom", None, {}),  # ggml's HIP pool
    ("RuntimeError: mmdet3d/ops/spconv/src/indice_cuda.cu 124\ncuda execution failed with error 2", "cuda_error", None,
     {}),  # spconv's check: the location, then CUDA's error 2 (cudaErrorMemoryAllocation)
    ("F0228 17:38:20.483613  4104 syncedmem.cpp:64] Check failed: error == cudaSuccess (2 vs. 0)  out of memory",
     "cuda_error", None, {}),  # Caffe's glog check
    ("  what():  [17:54:40] /src/mxnet/3rdparty/mshadow/mshadow/./stream_gpu-inl.h:198: Check failed: e == cudaSuccess "
     "CUDA: out of memory", "cuda_error", None, {}),  # MXNet's mshadow check (GluonCV)
    ("[09:12:44] src/engine/threaded_engine.cc:320: Check failed: e == cudaSuccess (2 vs. 0) : CUDA: out of memory",
     "cuda_error", None, {}),  # MXNet 1.x's CHECK_EQ wording
    ("Check failed: error == cudaSuccess CUDA error out of memory at /opt/build/include/base/memory.h:131",
     "cuda_error", None, {}),  # GraphVite's CudaCheck
    ("RuntimeError: :0: cudaFuncSetAttribute(kernel_entry, cudaFuncAttributeMaxDynamicSharedMemorySize, "
     "integer_cast<int32_t>(launch_configs[0].smemSizeInBytes)): out of memory", "cuda_error", None, {}),  # XLA's check
    ("CUDA error 2 at /src/llama.cpp/ggml-cuda.cu:5509: out of memory", "cuda_error", None, {}),  # ggml, 2023
    ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 279356.51 MiB on device 0: cudaMalloc failed: out of memory",
     "cuda_error", None, {"requested_bytes": b("279356.51", 2), "gpu_index": 0}),  # ggml (llama.cpp)
    ("Exception in main training loop: out of memory to allocate 205520896 bytes (total 16068929536 bytes)", "cuda_oom",
     None, {"requested_bytes": 205520896}),  # CuPy's memory pool (Chainer)
    ("cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 205,520,896 bytes (allocated so far: 16,068,929,536 "
     "bytes).", "cuda_oom", None, {"requested_bytes": 205520896}),  # CuPy >= 7
    ("Error: 'err == cudaSuccess' failed: StandardGpuResources: alloc fail type IVFLists dev 0 space Device stream "
     "0x5633af889030 size 606208 bytes (cudaMalloc error out of memory [2])", "cuda_error", None,
     {"requested_bytes": 606208, "gpu_index": 0}),  # faiss GPU resources
    ("  what():  [10:44:35] src/storage/./pooled_storage_manager.h:107: cudaMalloc failed: out of memory", "cuda_error",
     None, {}),  # MXNet's pooled storage manager
    ("[E] 1: [defaultAllocator.cpp::allocate::21] Error Code 1: Cuda Runtime (out of memory)\n[W] Requested amount of "
     "GPU memory (20401098752 bytes) could not be allocated.", "cuda_error", None,
     {"requested_bytes": 20401098752}),  # TensorRT
    ("F0729 21:37:01.823541 108811 legacy_allocator.cc:201] Cannot allocate 112.500000MB in GPU 0, available "
     "632.937500MBtotal 7981694976GpuMinChunkSize 256.000000BGpuMaxChunkSize 6.496908GBGPU memory used: 6.412701GB",
     "cuda_oom", None, {"requested_bytes": b("112.5", 2), "free_bytes": b("632.9375", 2), "total_bytes": 7981694976,
                        "allocated_bytes": b("6.412701", 3), "gpu_index": 0}),  # PaddlePaddle 1.x legacy allocator
    ("catboost/cuda/cuda_lib/memory_pool/stack_like_memory_pool.h:294: Error: Out of memory. Requested 1070.546387; "
     "Free 1010.952393", "cuda_oom", None, {"requested_bytes": b("1070.546387", 2),
                                            "free_bytes": b("1010.952393", 2)}),  # CatBoost's GPU pool
    ("ResourceExhaustedError: Fail to alloc memory of 564023296 size, error code is 12.", "host_oom", None,
     {"requested_bytes": 564023296}),  # PaddlePaddle's host allocator (ENOMEM)
    ("RuntimeError: DataLoader worker (pid(s) 8260) exited unexpectedly", "host_oom", None, {}),
    ("MemoryError: Error assigning 1073741824 bytes", "host_oom", None,
     {"requested_bytes": 1073741824}),  # cymem's pool (spaCy, thinc)
    ("Tried to allocate 4.00 GiB. GPU 2 has a total capacity of 21.99 GiB of which 1.21 GiB is free. Including "
     "non-PyTorch memory, this process has 20.77 GiB memory in use.", "cuda_oom", None,
     {"requested_bytes": 4 * 2**30, "gpu_index": 2, "process_in_use_bytes": round(20.77 * 2**30)}),  # 2.1+, head cut
    ("MemoryError                               Traceback (most recent call last)", "host_oom", None,
     {}),  # a notebook's traceback header, the paste ending before the exception line
    ("ResourceExhaustedError                    Traceback (most recent call last)", "tf_oom", None,
     {}),  # the same header for TensorFlow's OOM exception (Keras fit() in a notebook)
    ("Killedg in train batch: 127687 / 263115", "host_oom", None,
     {}),  # the shell's notice printed over the head of a counter redrawn with "\r"
    ("memory allocation of 150994960 bytes failedAborted (core dumped)", "host_oom", None,
     {"requested_bytes": 150994960}),  # Rust's global allocator (tokenizers, polars), the shell's notice glued
    ("2020-11-24 11:32:25.434730: E tensorflow/stream_executor/cuda/cuda_driver.cc:868] failed to alloc 4294967296 "
     "bytes on host: CUDA_ERROR_OUT_OF_MEMORY: out of memory", "tf_oom", None,
     {"requested_bytes": 4294967296}),  # TensorFlow pinning host memory through the driver
    ("ERROR (train-ctc-parallel:MallocInternal():cuda-device.cc:668) Memory allocation failure", "cuda_error", None,
     {}),  # Kaldi's CUDA allocator after its release-and-retry
    ("ds4: CUDA q8 fp16 cache alloc failed (64.00 MiB): out of memory", "cuda_error", None,
     {"requested_bytes": 64 * MIB}),  # a native engine's own allocation, one line
    ("[07/09 16:09:19 d2.utils.memory]: Attempting to copy inputs of <function paste_masks_in_image at 0x7f3a> to CPU "
     "due to CUDA OOM", "cuda_oom", None, {"fatal": False}),  # detectron2's retry_if_cuda_oom, caught
    ("ERROR (nnet3-train[5.5]:AllocateNewRegion():cu-allocator.cc:519) Failed to allocate a memory region of 8088715264 "
     "bytes.  Possibly this is due to sharing the GPU.  Memory info: free:15426M, used:17053M, total:32480M, "
     "free/total:0.474948 CUDA error: 'out of memory'", "cuda_error", None,
     {"requested_bytes": 8088715264, "free_bytes": 15426 * MIB, "total_bytes": 32480 * MIB}),  # Kaldi 5.5's pool
    ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`", "cublas", None,
     {"detail": {"library": "CUBLAS", "message_says": "cublas_handle"}}),
    ("RuntimeError: Unable to find a valid cuDNN algorithm to run convolution", "cublas", None,
     {"detail": {"library": "CUDNN", "message_says": "cudnn_no_algorithm"}}),
    ("onnxruntime.capi.onnxruntime_pybind11_state.RuntimeException: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : "
     "Non-zero status code returned while running Mul node. Name:'Mul_8702' Status Message: /onnxruntime_src/"
     "onnxruntime/core/framework/bfc_arena.cc:368 void* onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, "
     "onnxruntime::Stream*, bool, onnxruntime::WaitNotificationFn) Failed to allocate memory for requested buffer of "
     "size 2830172160", "cuda_error", None, {"requested_bytes": 2830172160}),  # ONNX Runtime's CUDA arena
    ("[E:onnxruntime:, sequential_executor.cc:339 Execute] Non-zero status code returned while running Conv node. "
     "Name:'347_nchwc' Status Message: bfc_arena.cc:330 onnxruntime::BFCArena::AllocateRawInternal Failed to allocate "
     "memory for requested buffer of size 285081600", "host_oom", None,
     {"requested_bytes": 285081600}),  # the CPU provider's arena (NCHWc is its layout)
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "kv_cache", None,
     {"detail": {"engine": "sglang", "message_says": "kv_pool_no_room"}}),
    ("Error: WebServer(Warmup(Generation(\"Not enough memory to handle 4096 prefill tokens. You need to decrease "
     "`--max-batch-prefill-tokens`\")))", "kv_cache", None,
     {"detail": {"engine": "text-generation-inference", "message_says": "prefill_warmup", "prefill_tokens": 4096}}),
    ("RuntimeError: No executable batch size found, reached zero.", "cuda_oom", None,
     {"detail": {"message_says": "batch_halved_to_zero"}}),  # accelerate's find_executable_batch_size
    ("RuntimeError: DataLoader worker (pid 4121) is killed by signal: Bus error. It is possible that dataloader's "
     "workers are out of shared memory. Please try to raise your shared memory limit.", "host_oom", None,
     {"detail": {"message_says": "shared_memory"}}),
    ("OSError: [Errno 12] Cannot allocate memory", "host_oom", None, {"detail": {"message_says": "enomem"}}),
    ("OSError: [WinError 1455] The paging file is too small for this operation to complete. Error loading "
     "\"C:\\Python310\\lib\\site-packages\\torch\\lib\\cudnn_cnn_infer64_8.dll\" or one of its dependencies.",
     "host_oom", None, {"detail": {"message_says": "paging_file"}}),
]


@pytest.mark.parametrize("line,kind,era,figures", EXAMPLES, ids=[f"{e[1]}-{e[2]}-{i}" for i, e in enumerate(EXAMPLES)])
def test_example_line(line, kind, era, figures):
    facts = parse_text(line + "\n")
    assert len(facts.events) == 1
    e = facts.events[0]
    assert e.kind == kind
    assert e.era == era
    for key, value in figures.items():
        assert getattr(e, key) == value, key


# Fallbacks for wordings that print no figures; no public example line of them has been checked yet.
WITHOUT_EXAMPLE = {"XLA_ANY", "XLA_TF_RESOURCE"}


def test_every_message_format_has_an_example_line():
    """The table of formats and the examples grow together: a new era is one entry plus one line above."""
    from test_formats_battery import BATTERY  # the other libraries' messages, one test file of their own

    from oomdoctor.parse.messages import MESSAGE_FORMATS, classify

    lines = [line for line, *_ in EXAMPLES] + [text for _, text, *_ in BATTERY]
    covered = {c.fmt.name for line in lines if (c := classify(line)) is not None}
    missing = {f.name for f in MESSAGE_FORMATS} - covered - WITHOUT_EXAMPLE
    assert not missing, f"formats without an example line in EXAMPLES or BATTERY: {sorted(missing)}"
    assert not WITHOUT_EXAMPLE & covered, "an example now exists: remove it from WITHOUT_EXAMPLE"


def test_nvml_placeholder_is_kept_but_flagged():
    line = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
            "7.78 GiB of which 6.25 MiB is free. Process 1 has 17179869184.00 GiB memory in use. Of the allocated "
            "memory 7.01 GiB is allocated by PyTorch, and 98.66 MiB is reserved by PyTorch but unallocated.")
    e = parse_text(line).events[0]
    assert e.other_processes[0].bytes == 2**64
    assert "other_processes" in e.implausible


def test_nul_device_index_truncated_message_still_gives_the_request():
    e = parse_text("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU \n").events[0]
    assert e.requested_bytes == 2 * MIB and e.gpu_index is None


def test_hostile_text_is_linear():
    import time

    hostile = "CUDA out of memory. Tried to allocate " + "1" * 200_000 + " (GPU 0; " + "9 " * 100_000
    t = time.perf_counter()
    parse_text(hostile)
    assert time.perf_counter() - t < 5


def test_job_notices_that_are_not_kills_stay_silent():
    assert parse_text("[1]+  Done                    python train.py\nworker killed 3 stale tasks\n").events == ()


def test_two_writers_on_one_line_give_two_events():
    one = ("CUDA out of memory. Tried to allocate 2.00 GiB (GPU {g}; 79.15 GiB total capacity; 77.13 GiB already "
           "allocated; 307.31 MiB free; 78.21 GiB reserved in total by PyTorch) If reserved memory is >> allocated "
           "memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management "
           "and PYTORCH_CUDA_ALLOC_CONF")
    events = parse_text(one.format(g=0) + one.format(g=3) + "\n").events
    assert [e.gpu_index for e in events] == [0, 3]


def test_a_message_cut_by_a_hard_wrap_before_its_trigger_is_read_from_the_line_above():
    """'cudaMalloc fail' / 'ed: out of memory': the trigger is on the tail; the head is the full-width line above."""
    head = "  what():  [10:44:35] src/engine/./threaded_engine.h:359: [10:44:35] src/storage/./pooled_storage_manager.h:107"
    facts = parse_text("terminate called after throwing an instance of 'dmlc::Error'\n" + head + ": cudaMalloc fail\n"
                       "ed: out of memory\n")
    assert [(e.kind, e.line) for e in facts.events] == [("cuda_error", 2)]
    # a short line above is not a wrapped head: the tail alone stays unrecognised
    assert parse_text("cudaMalloc fail\ned: out of memory\n").events == ()


def test_a_code_line_quoting_the_phrase_is_not_an_oom_but_a_pasted_message_after_it_is():
    assert parse_text('    return "CUDA out of memory" in str(e)\n').events == ()
    line = ("  return torch._C._nn.cross_entropy_loss(input, target)          torch.cuda.OutOfMemoryError: CUDA out of "
            "memory. Tried to allocate 250.00 MiB (GPU 1; 31.75 GiB total capacity; 30.35 GiB already allocated; "
            "209.75 MiB free; 30.55 GiB reserved in total by PyTorch)")
    assert [e.gpu_index for e in parse_text(line + "\n").events] == [1]


TOLERANT = [
    # a cut head, runs of whitespace, markdown emphasis and quote markers: the figures still come through
    ("Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.50 GiB already allocated; 3.00 MiB free; "
     "14.80 GiB reserved in total by PyTorch)", "cuda_oom", {"requested_bytes": 20 * MIB, "gpu_index": 0}),
    ("RuntimeError: CUDA out of memory.   Tried to allocate  20.00 MiB (GPU 0;  15.78 GiB total capacity; 14.50 GiB "
     "already allocated; 3.00 MiB free; 14.80 GiB reserved in total by PyTorch)", "cuda_oom", {"requested_bytes": 20 * MIB}),
    ("> RuntimeError: CUDA out of memory. Tried to allocate **20.00 MiB** (GPU 0; 15.78 GiB total capacity; 14.50 GiB "
     "already allocated; 3.00 MiB free; 14.80 GiB reserved in total by PyTorch)", "cuda_oom",
     {"requested_bytes": 20 * MIB, "total_bytes": b("15.78", 3)}),
    ("ResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate 1.000244GB memory on GPU 0, 14.687500GB "
     "memory has been allocated and available memory is only 512.000000MB.", "cuda_oom",
     {"requested_bytes": b("1.000244", 3), "allocated_bytes": b("14.6875", 3), "free_bytes": 512 * MIB, "gpu_index": 0}),
    ("Out of memory error on GPU 0. Cannot allocate 1.531250GB memory on GPU 0, available memory is only \n"
     "                   416.625000MB.", "cuda_oom",  # PaddlePaddle before the allocated clause, hard-wrapped
     {"requested_bytes": b("1.53125", 3), "free_bytes": b("416.625", 2), "allocated_bytes": None}),
    ("[2024-01-01 10:00:00,000] [ERROR] [launch.py:321:sigkill_handler] ['python', 'train.py'] exits with return code = -9",
     "host_oom", {}),
    ("zsh: killed: 9  python train.py", "host_oom", {}),
    # pasted all in lower case, units included; and the parentheses lost in a paste
    ("cuda out of memory. tried to allocate 78.88 mib (gpu 0; 3.95 gib total capacity; 2.99 gib already allocated; "
     "74.44 mib free; 557.82 mib cached)", "cuda_oom",
     {"requested_bytes": b("78.88", 2), "total_bytes": b("3.95", 3), "free_bytes": b("74.44", 2), "gpu_index": 0}),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB GPU 0; 8.00 GiB total capacity; "
     "7.20 GiB already allocated; 0 bytes free; 7.30 GiB reserved in total by PyTorch", "cuda_oom",
     {"requested_bytes": 20 * MIB, "reserved_bytes": b("7.30", 3), "free_bytes": 0}),
    # cut short: the figures printed before the cut are kept, in either era's wording
    ("RuntimeError: CUDA out of memory. Tried to allocate 57.83 GiB (GPU 0; 8.00 GiB total capacity", "cuda_oom",
     {"requested_bytes": b("57.83", 3), "total_bytes": 8 * GIB, "free_bytes": None}),
    ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 7.78 GiB total capacity; 1.83 GiB already "
     "allocated; 8.38 MiB free; ...", "cuda_oom",
     {"total_bytes": b("7.78", 3), "allocated_bytes": b("1.83", 3), "free_bytes": b("8.38", 2), "reserved_bytes": None}),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 4 has a total capacity of 79.11 GiB "
     "of which 1.07 GiB is free. ...", "cuda_oom",
     {"total_bytes": b("79.11", 3), "free_bytes": b("1.07", 3), "gpu_index": 4, "allocated_bytes": None}),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.22 GiB.\nGPU 0 has a total capacity of 23.56 GiB "
     "of which 1.61 GiB is free.\nIncluding non-PyTorch memory, this process has 21.67 GiB memory in use.", "cuda_oom",
     {"free_bytes": b("1.61", 3), "process_in_use_bytes": b("21.67", 3), "allocated_bytes": None}),
    # a line continued with a backslash in mid-word, and "totalcapacity" run together
    ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 MiB (GPU 1; 11.17 GiB total capacity; 10.68 GiB alread\\\n"
     "y allocated; 64.00 KiB free; 188.49 MiB cached)", "cuda_oom",
     {"allocated_bytes": b("10.68", 3), "free_bytes": 64 * 1024, "gpu_index": 1}),
    ("RuntimeError: CUDA out of memory. Tried to allocate 88.00 MiB (GPU 0; 4.00 GiB totalcapacity; 2.68 GiB already "
     "allocated; 0 bytes free; 2.85 GiB reserved in total by PyTorch)", "cuda_oom",
     {"total_bytes": 4 * GIB, "free_bytes": 0, "reserved_bytes": b("2.85", 3)}),
    # a logger's line saying the program caught the failure and goes on (hivemind's runtime, Dorado's basecaller)
    ("Jul 23 14:53:46.280 [ERROR] [hivemind.moe.server.runtime.run:104] Caught CUDA out of memory. Tried to allocate "
     "128.00 MiB (GPU 0; 7.78 GiB total capacity; 4.46 GiB already allocated; 71.50 MiB free; 4.61 GiB reserved in "
     "total by PyTorch), attempting to recover", "cuda_oom", {"requested_bytes": 128 * MIB, "fatal": False}),
    ("[warning] Caught Torch error 'CUDA out of memory. Tried to allocate 1.02 GiB (GPU 0; 11.76 GiB total capacity; "
     "89.90 MiB already allocated; 612.12 MiB free; 132.00 MiB reserved in total by PyTorch)', clearing CUDA cache and "
     "retrying.", "cuda_oom", {"fatal": False}),
    ("Caught CUDA out of memory. Tried to allocate 128.00 MiB (GPU 0; 7.78 GiB total capacity; 4.46 GiB already "
     "allocated; 71.50 MiB free; 4.61 GiB reserved in total by PyTorch)", "cuda_oom", {"fatal": True}),  # and re-raised
    # retyped without its full stops: the request, device, total and free before the first missing stop are read
    ("torch.cuda.OutOfMemoryError: CUDA out of memory Tried to allocate 20.00 MiB GPU 0 has a total capacity of "
     "7.75 GiB of which 13.31 MiB is free Process 4048 has 2.31 GiB memory in use", "cuda_oom",
     {"requested_bytes": 20 * MIB, "gpu_index": 0, "total_bytes": b("7.75", 3), "free_bytes": b("13.31", 2)}),
]


@pytest.mark.parametrize("line,kind,figures", TOLERANT)
def test_tolerant_recognition(line, kind, figures):
    (e,) = parse_text(line + "\n").events
    assert e.kind == kind
    for name, value in figures.items():
        assert getattr(e, name) == value, name


def test_another_errors_tried_to_allocate_clause_is_not_an_oom():
    line = ("RuntimeError: Current platform can NOT allocate memory block with size larger than 4GB! Tried to allocate "
            "6.85 GiB (GPU  0; 15.56 GiB total capacity; 0 bytes already allocated; 0 bytes reserved in total by PyTorch)")
    assert parse_text(line + "\n").events == ()


def test_tensorflow_not_a_failure_warning_stays_silent_and_bfc_stats_give_the_budget():
    warn = ("W tensorflow/core/common_runtime/bfc_allocator.cc:275] Allocator (GPU_0_bfc) ran out of memory trying to "
            "allocate 2.19GiB with freed_by_count=0. The caller indicates that this is not a failure, but may mean that "
            "there could be performance gains if more memory were available.\n")
    assert parse_text(warn).events == ()
    fatal = ("W tensorflow/core/common_runtime/bfc_allocator.cc:424] Allocator (GPU_0_bfc) ran out of memory trying to "
             "allocate 2.19GiB (rounded to 2348810240)requested by op Conv2D\n"
             "I tensorflow/core/common_runtime/bfc_allocator.cc:1040] Stats:\n"
             "Limit:                     10711446324\nInUse:                      9663676416\n")
    (e,) = parse_text(fatal).events
    assert (e.requested_bytes, e.total_bytes, e.allocated_bytes) == (2348810240, 10711446324, 9663676416)


def test_malloc_async_with_a_memory_fraction_and_cut_short():
    capped = ("Allocation on device 1 would exceed allowed memory. (out of memory)\nCurrently allocated     : 19.50 GiB\n"
              "Requested               : 1.00 GiB\nDevice limit            : 79.15 GiB\nFree (according to CUDA): 58.00 GiB\n"
              "PyTorch limit (set by user-supplied memory fraction)\n                        : 20.00 GiB\n")
    (e,) = parse_text(capped).events
    assert e.gpu_index == 1 and e.allowed_bytes == 20 * 2**30 and e.free_bytes == 58 * 2**30
    cut = "!!! Exception during processing !!! Allocation on device 0 would exceed allowed memory. (out of memory)\n"
    (e,) = parse_text(cut + "Currently allocated     : 23.\n").events
    assert e.kind == "cuda_oom" and e.gpu_index == 0 and e.requested_bytes is None



def test_malloc_async_whose_device_index_printed_as_a_character():
    # c10::DeviceIndex is 8-bit: streamed as a char, device 0 is a NUL that ends the print right after "device "
    (e,) = parse_text("Sampling 81 frames\n!!! Exception during processing !!! Allocation on device \nTraceback\n").events
    assert (e.kind, e.line, e.gpu_index, e.requested_bytes) == ("cuda_oom", 2, None, None)
    (e,) = parse_text("torch.OutOfMemoryError: Allocation on device \x01 would exceed allowed memory. (out of memory)\n").events
    assert (e.kind, e.gpu_index) == ("cuda_oom", 1)
    # the words in a sentence of their own are not the message
    assert not parse_text("INFO: Allocation on device 0 succeeded for 12 tensors\n").events


def test_a_notebook_header_stands_for_the_failure_only_when_its_message_was_cut():
    header = "OutOfMemoryError                          Traceback (most recent call last)\n"
    frames = "Cell In[9], line 22\n---> 22 trainer.train()\n"
    message = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 14.75 GiB total capacity; "
               "13.90 GiB already allocated; 6.81 MiB free; 14.20 GiB reserved in total by PyTorch)\n")
    cut = parse_text(header + frames).events
    assert [(e.kind, e.line) for e in cut] == [("cuda_oom", 1)]
    whole = parse_text(header + frames + message).events
    assert [(e.kind, e.line, e.requested_bytes) for e in whole] == [("cuda_oom", 4, 20 * MIB)]


def test_tensorflows_notebook_header_gives_way_to_its_message():
    header = "ResourceExhaustedError                    Traceback (most recent call last)\n"
    frames = "<ipython-input-17-44e10be293f6> in <module>\n----> 5 model.fit(x, y)\n"
    message = ("ResourceExhaustedError:  OOM when allocating tensor with shape[8,64,112,112] and type float on "
               "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n")
    assert [(e.kind, e.line) for e in parse_text(header + frames).events] == [("tf_oom", 1)]
    assert [(e.kind, e.line) for e in parse_text(header + frames + message).events] == [("tf_oom", 4)]


def test_a_trigger_word_in_the_frames_above_is_not_part_of_the_message():
    frames = ('  File "/workspace/run/train.py", line 60, in <lambda>\n'
              '    model.transformer.h[1].attn.register_forward_hook(lambda *a: oom())\n'
              '                                                                 ^^^^^\n'
              '  File "/workspace/run/train.py", line 12, in oom\n    raise torch.OutOfMemoryError(MSG)\n')
    message = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of "
               "79.15 GiB of which 0.40 GiB is free. Including non-PyTorch memory, this process has 78.70 GiB memory in "
               "use. Of the allocated memory 77.10 GiB is allocated by PyTorch, and 0.90 GiB is reserved by PyTorch but "
               "unallocated. If reserved but unallocated memory is large try setting "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n")
    (e,) = parse_text(frames + message).events
    assert (e.line, e.requested_bytes) == (6, 1536 * MIB)
    assert e.message.startswith("torch.OutOfMemoryError: CUDA out of memory.")  # not "oom()) ^^^^^ File ..."


def test_a_notebooks_memoryerror_header_gives_way_to_the_host_message_after_it():
    header = "MemoryError                               Traceback (most recent call last)\n"
    frames = "Cell In[4], line 3\n----> 3 x = np.zeros((1000000, 1000000))\n\n"
    numpy = "MemoryError: Unable to allocate 7.28 TiB for an array with shape (1000000, 1000000) and data type float64\n"
    assert [(e.kind, e.line) for e in parse_text(header + frames).events] == [("host_oom", 1)]
    (e,) = parse_text(header + frames + numpy).events
    assert (e.kind, e.line, e.requested_bytes) == ("host_oom", 5, 8 * 10**12)
    (e,) = parse_text(header + frames + "MemoryError: \n").events  # the exception line with its detail cut
    assert (e.kind, e.line) == ("host_oom", 5)
    # a GPU header does not give way to a longer name in prose, and a MemoryError header stays when nothing follows
    cuda_header = "OutOfMemoryError                          Traceback (most recent call last)\n"
    assert [e.line for e in parse_text(cuda_header + frames + "see the OutOfMemoryError docs\n").events] == [1]


def test_killed_over_a_redrawn_counter_but_not_words_that_begin_with_killed():
    assert [e.kind for e in parse_text("Killedng batch 12 of 400\n").events] == ["host_oom"]
    for benign in ("Killedar is a village\n", "Killed 3 / 4 stale workers\n"):
        assert not parse_text(benign).events, benign


def test_a_worker_that_a_segfault_killed_is_not_an_oom_kill():
    exit_line = "RuntimeError: DataLoader worker (pid(s) 8260) exited unexpectedly\n"
    assert [e.kind for e in parse_text(exit_line).events] == ["host_oom"]
    for report in ("ERROR: Unexpected segmentation fault encountered in worker.\n",
                   "RuntimeError: DataLoader worker (pid 8260) is killed by signal: Aborted.\n"):
        assert not parse_text(report + exit_line).events, report
    # a bus error with PyTorch's shared-memory reading is a failure of its own (shm full), not an OOM kill
    shm = ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory "
           "(shm).\n")
    assert [(e.kind, e.line, e.detail.get("message_says")) for e in parse_text(shm + exit_line).events] == [
        ("host_oom", 1, "shared_memory")]
    killed = "RuntimeError: DataLoader worker (pid 8260) is killed by signal: Killed.\n"
    assert [e.kind for e in parse_text(killed + exit_line).events] == ["host_oom"]  # one kill, reported twice


def test_process_figure_equal_to_the_reserve_up_to_rounding_is_plausible():
    msg = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of "
           "2.00 GiB of which 510.00 MiB is free. Including non-PyTorch memory, this process has {} memory in use. "
           "Of the allocated memory 1.50 GiB is allocated by PyTorch, and 1.86 MiB is reserved by PyTorch but "
           "unallocated.")
    (kept,) = parse_text(msg.format("1.50 GiB")).events  # 1.5018 GiB reserved, printed as 1.50
    assert "process_in_use_bytes" not in kept.implausible
    (nvml_blind,) = parse_text(msg.format("0 bytes")).events  # a container: NVML sees no process
    assert "process_in_use_bytes" in nvml_blind.implausible


@pytest.mark.parametrize("line,shape", [
    ("Resource exhausted: OOM when allocating tensor with shape[1,1,100000,512]", [1, 1, 100000, 512]),
    ("ResourceExhaustedError: OOM when allocating tensor with shape[32,256,35,35] and type float on "
     "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc", [32, 256, 35, 35]),
    ("ResourceExhaustedError (see above for traceback): OOM when allocating tensor of shape [563354,256] and type "
     "float", [563354, 256]),
])
def test_tensorflow_prints_the_failing_tensors_shape_with_or_without_its_type(line, shape):
    assert parse_text(line + "\n").events[0].detail["shape"] == shape


def test_tensorflows_allocator_line_and_kernel_line_are_one_failure_with_its_shape():
    log = ("W tensorflow/core/common_runtime/bfc_allocator.cc:271] Ran out of memory trying to allocate 320.00MiB.  See "
           "logs for memory state.\n"
           "W tensorflow/core/framework/op_kernel.cc:968] Resource exhausted: OOM when allocating tensor with "
           "shape[20,65536,64]\n")
    (event,) = parse_text(log).events
    assert (event.line, event.requested_bytes, event.detail["shape"]) == (1, 320 * MIB, [20, 65536, 64])


def test_xlas_allocator_and_its_runtime_report_one_failure_with_the_rounded_and_the_exact_size():
    log = ("2024-12-14 19:57:44.462633: W external/xla/xla/tsl/framework/bfc_allocator.cc:497] Allocator (GPU_0_bfc) ran "
           "out of memory trying to allocate 47.20GiB (rounded to 50677266944)requested by op \n"
           "2024-12-14 19:57:44.464119: W external/xla/xla/tsl/framework/bfc_allocator.cc:508] ************____________\n"
           "E1214 19:57:44.464390   17928 pjrt_stream_executor_client.cc:3084] Execution of replica 0 failed: "
           "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 50677266816 bytes.\n")
    (e,) = parse_text(log).events
    assert (e.kind, e.gpu_index, e.requested_bytes) == ("xla_oom", 0, 50677266944)
    # a different size is another failure
    (_, b) = parse_text(log.replace("50677266816 bytes", "50677266000 bytes")).events
    assert b.requested_bytes == 50677266000


def test_tensorflows_exception_after_the_traceback_restates_the_failure_it_does_not_add_one():
    kernel = ("W tensorflow/core/framework/op_kernel.cc:993] Resource exhausted: OOM when allocating tensor with "
              "shape[25088,4096]\n")
    frames = "".join(f'  File "session.py", line {n}, in _run\n    status, run_metadata)\n' for n in range(5))
    raised = "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[{}]\n"
    log = ("W tensorflow/core/common_runtime/bfc_allocator.cc:275] Ran out of memory trying to allocate 392.00MiB.  "
           "See logs for memory state.\n" + kernel + "Traceback (most recent call last):\n" + frames)
    (event,) = parse_text(log + raised.format("25088,4096")).events
    assert (event.line, event.requested_bytes, event.detail["shape"]) == (1, 392 * MIB, [25088, 4096])
    # another tensor's failure is its own
    assert [e.line for e in parse_text(log + raised.format("64,512,512")).events] == [1, 14]


def test_the_bare_first_sentence_needs_its_exception_and_the_end_of_the_line():
    from oomdoctor.parse import parse_text

    assert [e.kind for e in parse_text("RuntimeError: CUDA out of memory.\n").events] == ["cuda_oom"]
    # cut anywhere inside its request's words (a paste that stopped mid-word), or inside the size
    for cut in ("Tri", "Tried to alloc", "Tried to allocate 214.00"):
        (e,) = parse_text(f"torch.cuda.OutOfMemoryError: CUDA out of memory. {cut}\n").events
        assert (e.kind, e.requested_bytes) == ("cuda_oom", None)
    assert not parse_text("torch.cuda.OutOfMemoryError: CUDA out of memory. Trying again\n").events


def test_a_bare_python_memory_error_closing_its_traceback_is_a_host_oom():
    log = ("Traceback (most recent call last):\n"
           '  File "prepare.py", line 40, in <module>\n'
           "    write_cache(rows)\n"
           "MemoryError\n")
    (event,) = parse_text(log).events
    assert (event.kind, event.line) == ("host_oom", 4)
    assert [e.kind for e in parse_text("MemoryError: cannot allocate memory for the shared queue\n").events] == ["host_oom"]


# Lines that name a failure without being one: prose, retry notices, code, longer names.
NOT_A_FAILURE = (
    "Retrying after RuntimeError: CUDA out of memory. on batch 3, halving it",
    "warning: caught CUDA out of memory. and skipped the batch",
    "we guard against std::bad_alloc in the loader",
    "torch.cuda.OutOfMemoryError",
    "except MemoryError:",
    "    raise MemoryError",
    "we retry on MemoryError with a smaller chunk",
    "MemoryErrorHandler installed",
    "_pickle.PicklingError: Can't pickle <class 'MemoryError'>: it's not the same object",
    "Process finished with exit code 1370",
    "worker exited with code 1",
)


@pytest.mark.parametrize("line", NOT_A_FAILURE)
def test_a_line_that_only_names_a_failure_is_not_one(line):
    assert parse_text(line + "\n").events == ()


def test_tensorflow_2_eager_op_that_failed_to_allocate():
    text = ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node __wrapped__Mul_device_/job:"
            "localhost/replica:0/task:0/device:GPU:1}} failed to allocate memory [Op:Mul]\n")
    (e,) = parse_text("Epoch 1/5\n" + text).events
    assert (e.kind, e.line, e.gpu_index, e.requested_bytes) == ("tf_oom", 2, 1, None)
    # a host-side tensor that failed elsewhere with the same words, and no function node: not this message
    assert not parse_text("WARNING: failed to allocate memory for the image cache, retrying\n").events
    # a graph-mode session's: the class, the words, then the node and the hint on their own lines
    graph = ("ResourceExhaustedError: failed to allocate memory\n\t [[{{node model/h18/ln_2/add_1}}]]\n"
             "Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom\n")
    (e,) = parse_text(graph).events
    assert (e.kind, e.line) == ("tf_oom", 1)
    assert not parse_text("ResourceExhaustedError: failed to allocate memory for the host staging buffer\n").events



def test_tensorflow_0_x_names_the_gpu_in_its_failing_nodes_device_attribute():
    log = ("W tensorflow/core/common_runtime/executor.cc:1102] 0x8bcfce0 Compute status: Resource exhausted: OOM when "
           "allocating tensor with shape[50,450537]\n"
           '     [[Node: LSTM/Linear_34/MatMul = MatMul[T=DT_FLOAT, _device="/job:localhost/replica:0/task:0/gpu:1"](a, b)]]\n')
    (e,) = parse_text(log).events
    assert (e.kind, e.gpu_index) == ("tf_oom", 1)
    (e,) = parse_text(log.replace("/gpu:1", "/cpu:0")).events
    assert e.gpu_index is None


def test_the_shells_kill_notice_in_other_locales():
    # glibc translates strsignal(SIGKILL): the job notice and a notice glued to a progress bar, as "Killed" is read
    (e,) = parse_text("Load pretraining parameters.\nscript/run.sh: 行 30: 23195 已杀死\n").events
    assert (e.kind, e.line) == ("host_oom", 2)
    (e,) = parse_text("Processing training set: : 1444it [05:54,  1.38it/s]Getötet\n").events
    assert e.kind == "host_oom"
    # the notice with the command it killed after the pid, as bash prints "N Killed  command"
    (e,) = parse_text("[ ] 0/3, elapsed: 0s, ETA:./tools/dist_test.sh: 第 13 行： 114146 已杀死 PYTHONPATH=\"..\" "
                      "python3 tools/test.py cfg.py ckpt.pth\n").events
    assert e.kind == "host_oom"
    # the word inside a sentence is not the notice
    assert not parse_text("Der Prozess wurde nicht getötet, weiter mit Schritt 5\n").events


def test_a_2_1_message_cut_right_after_its_allocated_figure():
    # "...13.03 GiB is allocated by PyTorch..." - a paste cut before the reserved figure keeps what it printed
    (e,) = parse_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 11.50 GiB. GPU 0 has a total "
                      "capacity of 23.51 GiB of which 9.38 GiB is free. Including non-PyTorch memory, this process has "
                      "13.70 GiB memory in use. Of the allocated memory 13.03 GiB is allocated by PyTorch...\n").events
    assert (e.allocated_bytes, e.process_in_use_bytes, e.reserved_bytes) == (b("13.03", 3), b("13.70", 3), None)


@pytest.mark.parametrize("cut", ["is a", "is alloca", "is allocated by PyTo"])
def test_a_2_1_message_cut_inside_its_allocated_clause_keeps_the_figure_before_the_cut(cut):
    (e,) = parse_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 28.00 MiB. GPU 1 has a total "
                      "capacity of 8.00 GiB of which 0 bytes is free. Of the allocated memory 6.93 GiB " + cut + "\n").events
    assert (e.total_bytes, e.allocated_bytes) == (8 * GIB, b("6.93", 3))
    # a cut inside the number itself keeps none of it: "6.9" is not the figure
    (e,) = parse_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 28.00 MiB. GPU 1 has a total "
                      "capacity of 8.00 GiB of which 0 bytes is free. Of the allocated memory 6.9\n").events
    assert (e.total_bytes, e.allocated_bytes) == (8 * GIB, None)


@pytest.mark.parametrize("cut", ["", " i", " in us"])
def test_a_2_1_message_cut_inside_a_process_clause_keeps_its_whole_size(cut):
    head = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 243.00 GiB. GPU 0 has a total capacity of 47.53 GiB "
            "of which 594.62 MiB is free. Process 497175 has 258.00 MiB memory")
    (e,) = parse_text(head + cut + "\n").events
    assert [(p.pid, p.bytes) for p in e.other_processes] == [(497175, b("258.00", 2))]
    (e,) = parse_text(head.replace("258.00 MiB memory", "258.0") + "\n").events  # cut inside the size: none
    assert e.other_processes == ()


def test_a_message_a_terminal_wrapped_onto_the_row_after_its_loggers_words_starts_on_that_row():
    record = ("ERROR:app.pipeline.document_processor:Document OCR extraction failed: CUDA out of memory. Tried to "
              "allocate 122.64 GiB. GPU 0 has a total capacity of 14.74 GiB of which 8.54 GiB is free. Of the "
              "allocated memory 5.95 GiB is allocated by PyTorch, and 11.96 MiB is reserved by PyTorch but "
              "unallocated.")
    cut = record.index("CUDA")  # the terminal's width: the first row ends right before the message
    rows = [record[k : k + cut] for k in range(0, len(record), cut)]
    (e,) = parse_text("\n".join(rows) + "\n").events
    assert (e.line, e.requested_bytes, e.total_bytes) == (2, b("122.64", 3), b("14.74", 3))


def test_a_1_x_message_cut_inside_its_allocated_clause_keeps_the_figure_before_the_cut():
    (e,) = parse_text("RuntimeError: CUDA out of memory. Tried to allocate 64.00 MiB (GPU 0; 21.99 GiB total capacity; "
                      "20.68 GiB already allocate\n").events
    assert (e.total_bytes, e.allocated_bytes, e.free_bytes) == (b("21.99", 3), b("20.68", 3), None)
    # cut inside the reserved clause's closing words: the reserved figure is whole, and with it the cache's slack
    (e,) = parse_text("UserWarning: cuda device found but got the error CUDA out of memory. Tried to allocate 768.00 MiB "
                      "(GPU 3; 10.75 GiB total capacity; 1.95 GiB already allocated; 244.25 MiB free; 2.00 GiB reserved "
                      "in total by\n").events
    assert (e.gpu_index, e.free_bytes, e.reserved_bytes) == (3, b("244.25", 2), b("2.00", 3))
    assert e.reserved_unallocated_bytes == b("2.00", 3) - b("1.95", 3)
    # cut inside "total capacity": the total is whole once its word began
    (e,) = parse_text("RuntimeError: CUDA out of memory. Tried to allocate 6.25 GiB (GPU 0; 23.70 GiB total capacit\n").events
    assert (e.requested_bytes, e.total_bytes) == (b("6.25", 3), b("23.70", 3))
    # the figure before "reserved" cut inside its unit is not taken
    (e,) = parse_text("RuntimeError: CUDA out of memory. Tried to allocate 768.00 MiB (GPU 3; 10.75 GiB total capacity; "
                      "1.95 GiB already allocated; 244.25 MiB free; 2.00 Gi\n").events
    assert (e.free_bytes, e.reserved_bytes) == (b("244.25", 2), None)


def test_a_message_cut_after_a_space_is_not_continued_by_the_next_message():
    # a script printing each caught message cut after "GPU " (the next row is its own line, not the rest of the cut)
    log = ("CUDA out of memory. Tried to allocate 500.00 MiB. GPU \n"
           "Cannot produce results for sample2\n"
           "CUDA out of memory. Tried to allocate 172.00 MiB. GPU \n"
           "Cannot produce results for sample1\n")
    assert [(e.line, e.requested_bytes) for e in parse_text(log).events] == [(1, 500 * 2**20), (3, 172 * 2**20)]


def test_the_shells_crash_report_or_a_closing_code_fence_is_not_the_rest_of_a_message():
    thc = ("THCudaCheck FAIL file=/opt/conda/conda-bld/pytorch_1513368888240/work/torch/lib/THC/generic/THCStorage.c "
           "line=82 error=2 : out of memory\n")
    for after in ("Segmentation fault (core dumped)\n", "Aborted (core dumped)\n", "```\n"):
        (e,) = parse_text(thc + after).events
        assert (e.end_line, e.message.endswith("out of memory")) == (1, True), after


def test_a_glog_record_header_starts_a_new_failure_not_the_rest_of_the_last():
    log = ("2019-06-14 11:50:14.027064: E tensorflow/stream_executor/cuda/cuda_blas.cc:510] failed to create cublas "
           "handle: CUBLAS_STATUS_ALLOC_FAILED\n"
           "2019-06-14 11:50:17.380488: E tensorflow/stream_executor/cuda/cuda_dnn.cc:334] Could not create cudnn "
           "handle: CUDNN_STATUS_ALLOC_FAILED\n")
    assert [(e.line, e.detail["library"]) for e in parse_text(log).events] == [(1, "CUBLAS"), (2, "CUDNN")]
    # TensorFlow 1's allocator backing off a tenth at a time is one failure, named by its first size
    backoff = "".join(f"E tensorflow/stream_executor/cuda/cuda_driver.cc:924] failed to allocate {g:.2f}G ({int(g * 2**30)} "
                      "bytes) from device: CUDA_ERROR_OUT_OF_MEMORY\n" for g in (13.83, 12.45, 11.2))
    (event,) = parse_text(backoff).events
    assert event.requested_bytes == int(13.83 * 2**30)
    # Omniverse Kit's records (Isaac Sim) each under a date, then elapsed milliseconds, level and plugin: the
    # message ends at the next record, not six records later
    kit = ("2025-02-13 12:01:23 [10,436ms] [Error] [carb.cudainterop.plugin] CUDA error 2: cudaErrorMemoryAllocation - "
           "out of memory)\n"
           "2025-02-13 12:01:23 [10,476ms] [Error] [omni.physx.plugin] Unable to create PxCudaContextManager!\n")
    (event,) = parse_text(kit).events
    assert (event.kind, event.message, event.end_line) == (
        "cuda_error", "CUDA error 2: cudaErrorMemoryAllocation - out of memory)", 1)


def test_a_message_soft_wrapped_with_each_row_padded_to_the_terminal_reads_whole():
    pad = " " * 48
    msg = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1008.00 MiB. GPU 0 has a total capacity of "
           "79.15 GiB of which 769.81 MiB is free. Includi" + pad + "ng non-PyTorch memory, this process has 78.37 GiB "
           "memory in use. Of the allocated memory 65.60 GiB is allocated by PyTorch, and 12.26 GiB is reserved b" + pad
           + "y PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF"
           "=expandable_segments:True to avoid fragmentat" + pad + "i\n")
    bar = "Steps:   1%|▏         | 1116/75500 [3:25:55<228:44:49, 11.07s/it, lr=2e-5, step_loss=0.014]\n"
    (e,) = parse_text(msg + bar).events
    assert (e.allocated_bytes, e.process_in_use_bytes, e.end_line) == (b("65.60", 3), b("78.37", 3), 1)
    assert (e.step, e.phase) == (1116, "train")  # the bar redrawn after it is not part of the message


def test_a_1_x_message_whose_padded_rows_were_cut_after_a_unit_and_inside_a_word_reads_whole():
    # one row cut at the space after "10.75 GiB", the next inside "PyTorch": the unit keeps its space, the word none
    pad = " " * 57
    msg = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 80.00 MiB (GPU 0; 10.75 GiB" + pad +
           "total capacity; 9.34 GiB already allocated; 27.62 MiB free; 9.77 GiB reserved in total by PyTor" + pad +
           "ch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentat\n")
    (e,) = parse_text(msg).events
    assert (e.total_bytes, e.free_bytes, e.reserved_bytes) == (b("10.75", 3), b("27.62", 2), b("9.77", 3))


def test_a_message_glued_after_a_frames_function_is_found_and_a_plain_frame_is_not_a_message():
    frame = '  File "/site-packages/torch/nn/parameter.py", line 68, in __deepcopy__'
    (e,) = parse_text(frame + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.00 MiB.\n").events
    assert (e.line, e.requested_bytes) == (1, 18 * MIB)
    assert parse_text('  File "/runs/out of memory repro/train.py", line 3, in main\n').events == ()


def test_tensorflows_not_a_failure_warning_stays_silent_when_a_terminal_cut_its_phrase():
    for cut in range(60, 150, 7):  # every row width a terminal may have cut the warning at
        line = ("W tensorflow/core/common_runtime/bfc_allocator.cc:213] Ran out of memory trying to allocate 1.24GiB. The "
                "caller indicates that this is not a failure, but may mean that there could be performance gains.")
        rows = "\n".join(line[k:k + cut] for k in range(0, len(line), cut)) + "\n"
        assert parse_text(rows).events == (), cut


def test_xlas_runtime_restating_its_allocators_failure_without_the_device_is_that_failure():
    log = ("W external/xla/xla/tsl/framework/bfc_allocator.cc:501] Allocator (GPU_0_bfc) ran out of memory trying to "
           "allocate 510.68MiB (rounded to 535486464)requested by op \n"
           "W external/xla/xla/tsl/framework/bfc_allocator.cc:512] ****************************************\n"
           "E0718 11:07:06.132657  193878 pjrt_stream_executor_client.cc:3077] Execution of replica 0 failed: "
           "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 535486464 bytes.\n")
    for text in (log, "\n".join(ln + "  " for ln in log.split("\n"))):  # as printed, and padded by an editor
        (e,) = parse_text(text).events
        assert (e.line, e.gpu_index, e.requested_bytes) == (1, 0, 535486464)


def test_a_librarys_own_device_allocation_is_marked_as_not_pytorchs():
    ctranslate2 = parse_text("RuntimeError: CUDA failed with error out of memory\n").events[0]
    ggml = parse_text("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 512.00 MiB on device 0: cudaMalloc "
                      "failed: out of memory\n").events[0]
    pytorch = parse_text("RuntimeError: CUDA error: out of memory\n").events[0]
    assert (ctranslate2.kind, ctranslate2.detail.get("own_allocator")) == ("cuda_error", True)
    assert ggml.detail.get("own_allocator") is True and "own_allocator" not in pytorch.detail
    # a glog CHECK on a CUDA call: Caffe's and MXNet's own allocators
    caffe = parse_text("F0911 12:46:40.284883 18216 syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0)  out "
                       "of memory\n").events[0]
    assert (caffe.kind, caffe.detail.get("own_allocator")) == ("cuda_error", True)


def test_metals_command_buffer_abort_is_found_with_its_code_cut_off():
    line = ("[error] libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] Command buffer "
            "execution failed: Insufficient Memory{}\n")
    for code in ("", " (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)"):
        (e,) = parse_text(line.format(code)).events
        assert (e.kind, e.detail.get("message_says")) == ("mps_oom", "metal_out_of_memory")


def test_a_checks_source_location_above_its_error_is_the_messages_first_line():
    log = ('  File "/workspace/mmdet3d/ops/spconv/ops.py", line 91, in get_indice_pairs\n'
           "RuntimeError: mmdet3d/ops/spconv/src/indice_cuda.cu 124\ncuda execution failed with error 2\n")
    (e,) = parse_text(log).events
    assert (e.kind, e.line, e.end_line) == ("cuda_error", 2, 3)
    assert not parse_text(log.replace("error 2", "error 700")).events  # another CUDA error is no OOM


def test_the_one_listed_process_that_makes_up_the_cards_use_is_the_failing_one():
    # a container: the failing process under its own pid, its NVML figure a little under PyTorch's reserve
    msg = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 5.87 GiB. GPU 0 has a total capacity of 23.64 "
           "GiB of which 3.67 GiB is free. Process 3436127 has 19.96 GiB memory in use. Of the allocated memory 20.34 GiB "
           "is allocated by PyTorch, and 73.38 MiB is reserved by PyTorch but unallocated.\n")
    (e,) = parse_text(msg).events
    assert (e.process_in_use_bytes, e.other_processes) == (b("19.96", 3), ())
    # the card's use is not that process's alone: someone else holds the rest
    (e,) = parse_text(msg.replace("3.67 GiB is free", "0.67 GiB is free")).events
    assert e.process_in_use_bytes is None and [p.pid for p in e.other_processes] == [3436127]
    # the message cut before PyTorch's reserve: what it allocated is the floor of its hold
    cut = msg.split(", and 73.38")[0] + "\n"
    (e,) = parse_text(cut).events
    assert (e.reserved_bytes, e.process_in_use_bytes, e.other_processes) == (None, b("19.96", 3), ())
    # Ray's memory-monitor advice pasted alone still names the host's out-of-memory kill
    (e,) = parse_text("Refer to the documentation on how to address the out of memory issue: "
                      "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html.\n").events
    assert e.kind == "host_oom"

