/* check.h — error checks that say what, where and why (CONVENTIONS.md).
 * CHECK/CUDA_CHECK/CUBLAS_CHECK print the failing expression, file:line and
 * a hint, then exit(1) (internal errors). User errors are reported by the
 * CLI with exit 2 instead and do not go through here. */
#ifndef H3_CHECK_H
#define H3_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

#ifdef H3_HAVE_CUDA
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
#endif

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
