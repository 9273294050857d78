/* cuda_check.h — CUDA_CHECK(call) and CUBLAS_CHECK(call): a failed CUDA
 * or cuBLASLt call printed with the call, file:line, the library's error
 * name and a hint, then exit(1) (internal errors; core/check.h has CHECK). */
#ifndef H3_CUDA_CHECK_H
#define H3_CUDA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>
#define CUDA_CHECK(call)                                                                              \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) {                                                                      \
            fprintf(stderr, "%s:%d: CUDA error: %s: %s (%s)\n", __FILE__, __LINE__, #call,            \
                    cudaGetErrorName(e_), cudaGetErrorString(e_));                                    \
            if (e_ == cudaErrorMemoryAllocation)                                                      \
                fprintf(stderr, "hint: the device is out of memory; try a smaller --tokens\n");       \
            if (e_ == cudaErrorNoKernelImageForDevice)                                                \
                fprintf(stderr, "hint: rebuild with H3_CUDA_ARCHS including this GPU's architecture\n"); \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)
#ifdef H3_HAVE_CUBLASLT
#include <cublasLt.h>
#define CUBLAS_CHECK(call)                                                                            \
    do {                                                                                              \
        cublasStatus_t s_ = (call);                                                                   \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                            \
            fprintf(stderr, "%s:%d: cuBLAS error: %s: %s\n", __FILE__, __LINE__, #call,               \
                    cublasLtGetStatusString(s_));                                                       \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)
#endif

#endif
