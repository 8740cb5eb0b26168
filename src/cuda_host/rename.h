// rename.h - force-included (-include) ahead of everything in each file of the
// host execution of the CUDA code: the host twin of src/cuda/*.cu, the runtime
// in src/cuda_host/ and the tests that call it. It renames every CUDA runtime,
// cuBLAS and rg_cuda_* entry point to an rgh_ (or rg_cudahost_) name *before*
// the toolkit headers are read, so the toolkit's own declarations are renamed
// with them: our runtime implements exactly those signatures, and the real
// libcudart/libcublas (used by the nvcc twin) link into the same binary
// without a clash. A CUDA call of the host twin that is missing here would
// reach the real libcudart instead; the build checks the host twin's objects
// for undefined cuda*/cublas* symbols (scripts/check_host_symbols.sh) so that
// such a call fails the build rather than a test.
//
// C and C++: the runtime tests in C include the toolkit's C API directly.
#ifndef RG_CUDA_HOST_RENAME_H
#define RG_CUDA_HOST_RENAME_H

#define RG_CUDA_HOST 1

// ---------------------------------------------------------------------------
// The CUDA runtime

#define cudaGetDeviceCount rgh_cudaGetDeviceCount
#define cudaGetDeviceProperties rgh_cudaGetDeviceProperties
#define cudaDeviceGetAttribute rgh_cudaDeviceGetAttribute
#define cudaSetDevice rgh_cudaSetDevice
#define cudaGetDevice rgh_cudaGetDevice
#define cudaDeviceSynchronize rgh_cudaDeviceSynchronize
#define cudaDeviceReset rgh_cudaDeviceReset
#define cudaDriverGetVersion rgh_cudaDriverGetVersion
#define cudaRuntimeGetVersion rgh_cudaRuntimeGetVersion

#define cudaGetLastError rgh_cudaGetLastError
#define cudaPeekAtLastError rgh_cudaPeekAtLastError
#define cudaGetErrorString rgh_cudaGetErrorString
#define cudaGetErrorName rgh_cudaGetErrorName

#define cudaMalloc rgh_cudaMalloc
#define cudaFree rgh_cudaFree
#define cudaMallocHost rgh_cudaMallocHost
#define cudaHostAlloc rgh_cudaHostAlloc
#define cudaFreeHost rgh_cudaFreeHost
#define cudaMemGetInfo rgh_cudaMemGetInfo
#define cudaPointerGetAttributes rgh_cudaPointerGetAttributes
#define cudaMemcpy rgh_cudaMemcpy
#define cudaMemcpyAsync rgh_cudaMemcpyAsync
#define cudaMemset rgh_cudaMemset
#define cudaMemsetAsync rgh_cudaMemsetAsync

#define cudaStreamCreate rgh_cudaStreamCreate
#define cudaStreamCreateWithFlags rgh_cudaStreamCreateWithFlags
#define cudaStreamDestroy rgh_cudaStreamDestroy
#define cudaStreamSynchronize rgh_cudaStreamSynchronize
#define cudaStreamQuery rgh_cudaStreamQuery
#define cudaStreamWaitEvent rgh_cudaStreamWaitEvent
#define cudaLaunchHostFunc rgh_cudaLaunchHostFunc

#define cudaEventCreate rgh_cudaEventCreate
#define cudaEventCreateWithFlags rgh_cudaEventCreateWithFlags
#define cudaEventRecord rgh_cudaEventRecord
#define cudaEventQuery rgh_cudaEventQuery
#define cudaEventSynchronize rgh_cudaEventSynchronize
#define cudaEventElapsedTime rgh_cudaEventElapsedTime
#define cudaEventDestroy rgh_cudaEventDestroy

#define cudaStreamBeginCapture rgh_cudaStreamBeginCapture
#define cudaThreadExchangeStreamCaptureMode rgh_cudaThreadExchangeStreamCaptureMode
#define cudaStreamEndCapture rgh_cudaStreamEndCapture
#define cudaStreamIsCapturing rgh_cudaStreamIsCapturing
#define cudaGraphInstantiate rgh_cudaGraphInstantiate
#define cudaGraphLaunch rgh_cudaGraphLaunch
#define cudaGraphExecDestroy rgh_cudaGraphExecDestroy
#define cudaGraphDestroy rgh_cudaGraphDestroy

#define cudaFuncSetAttribute rgh_cudaFuncSetAttribute

// ---------------------------------------------------------------------------
// cuBLAS (cublas_v2.h maps cublasCreate to cublasCreate_v2 and so on; these
// are the names the declarations carry)

#define cublasCreate_v2 rgh_cublasCreate_v2
#define cublasDestroy_v2 rgh_cublasDestroy_v2
#define cublasSetStream_v2 rgh_cublasSetStream_v2
#define cublasGetStream_v2 rgh_cublasGetStream_v2
#define cublasSetWorkspace_v2 rgh_cublasSetWorkspace_v2
#define cublasSetPointerMode_v2 rgh_cublasSetPointerMode_v2
#define cublasGetPointerMode_v2 rgh_cublasGetPointerMode_v2
#define cublasSetMathMode rgh_cublasSetMathMode
#define cublasGetMathMode rgh_cublasGetMathMode
#define cublasSetAtomicsMode rgh_cublasSetAtomicsMode
#define cublasGetAtomicsMode rgh_cublasGetAtomicsMode
#define cublasGetStatusString rgh_cublasGetStatusString
#define cublasGetStatusName rgh_cublasGetStatusName
#define cublasSgemm_v2 rgh_cublasSgemm_v2
#define cublasSgemmStridedBatched rgh_cublasSgemmStridedBatched
#define cublasGemmEx rgh_cublasGemmEx
#define cublasGemmStridedBatchedEx rgh_cublasGemmStridedBatchedEx

// cuBLASLt
#define cublasLtCreate rgh_cublasLtCreate
#define cublasLtDestroy rgh_cublasLtDestroy
#define cublasLtMatmulDescCreate rgh_cublasLtMatmulDescCreate
#define cublasLtMatmulDescDestroy rgh_cublasLtMatmulDescDestroy
#define cublasLtMatmulDescSetAttribute rgh_cublasLtMatmulDescSetAttribute
#define cublasLtMatmulDescGetAttribute rgh_cublasLtMatmulDescGetAttribute
#define cublasLtMatrixLayoutCreate rgh_cublasLtMatrixLayoutCreate
#define cublasLtMatrixLayoutDestroy rgh_cublasLtMatrixLayoutDestroy
#define cublasLtMatrixLayoutSetAttribute rgh_cublasLtMatrixLayoutSetAttribute
#define cublasLtMatrixLayoutGetAttribute rgh_cublasLtMatrixLayoutGetAttribute
#define cublasLtMatmulPreferenceCreate rgh_cublasLtMatmulPreferenceCreate
#define cublasLtMatmulPreferenceDestroy rgh_cublasLtMatmulPreferenceDestroy
#define cublasLtMatmulPreferenceSetAttribute rgh_cublasLtMatmulPreferenceSetAttribute
#define cublasLtMatmulAlgoGetHeuristic rgh_cublasLtMatmulAlgoGetHeuristic
#define cublasLtMatmul rgh_cublasLtMatmul

// ---------------------------------------------------------------------------
// The backend's own C API and the helpers its .cu files share: cuda_select.c
// routes rg_cuda_* to this twin (RETRO_CUDA_HOST=1) or to the nvcc build.

#define RG_CUDA_TWIN_PREFIX(name) rg_cudahost_##name

#endif
