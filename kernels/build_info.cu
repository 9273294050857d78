/* build_info.cu — which GPU architectures this build carries machine code for,
 * so the runner can say "not built for this GPU" instead of failing a launch. */
#include <cuda_runtime.h>

#include "kernels.h"

__global__ void h3k_probe_kernel(int *out) { *out = 1; }

/* Returns 1 when the kernels of this build can run on the current device. */
extern "C" int h3k_device_supported(void)
{
    cudaFuncAttributes attr;
    cudaError_t e = cudaFuncGetAttributes(&attr, h3k_probe_kernel);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky error state of the failed query */
        return 0;
    }
    return 1;
}

/* The driver API's tensor-map encoder, fetched through the runtime at first
 * use instead of linking libcuda: a binary that links libcuda does not even
 * start on a machine without the NVIDIA driver (CI), where it must run the
 * CPU path and let the GPU tests skip. */
#include <cuda.h>

typedef CUresult (*h3k_encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                        const cuuint64_t *, const cuuint32_t *, const cuuint32_t *,
                                        CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                        CUtensorMapFloatOOBfill);

extern "C" CUresult h3k_tensor_map_encode_tiled(CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank,
                                                void *addr, const cuuint64_t *dims, const cuuint64_t *strides,
                                                const cuuint32_t *box, const cuuint32_t *elem_strides,
                                                CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                                CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    static h3k_encode_tiled_fn fn = nullptr;
    if (!fn) {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess || !p)
            return CUDA_ERROR_NOT_FOUND;
        fn = (h3k_encode_tiled_fn)p;
    }
    return fn(map, dtype, rank, addr, dims, strides, box, elem_strides, il, sw, l2, oob);
}
