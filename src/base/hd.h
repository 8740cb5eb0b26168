// hd.h - RG_HD marks an inline function that C, C++ and CUDA device code all
// compile: __host__ __device__ under nvcc, nothing elsewhere (the host twin of
// the CUDA code, src/cuda_host/, runs kernels as plain host functions).
#ifndef RG_BASE_HD_H
#define RG_BASE_HD_H

#ifdef __CUDACC__
#define RG_HD __host__ __device__
#else
#define RG_HD
#endif

#endif
