/* sm90_tmap.cuh — the host side of the Hopper attention kernels' TMA: the
 * tensor maps their launches encode over Q, K and V^T. Host code only. */
#ifndef H3_SM90_TMAP_CUH
#define H3_SM90_TMAP_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* build_info.cu: cuTensorMapEncodeTiled fetched through the runtime, so no
 * binary links libcuda (it must start on machines without the driver). */
extern "C" CUresult h3k_tensor_map_encode_tiled(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                                const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                                const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* 2D tensor map over a row-major byte matrix [rows][inner], 128 x box_rows boxes,
 * 128-byte swizzle (the box's inner extent is exactly 128 bytes). 0 or a
 * cudaError_t. */
static inline int make_tmap(CUtensorMap *m, const void *ptr, uint64_t inner, uint64_t rows, uint32_t box_rows)
{
    const cuuint64_t dims[2] = {inner, rows};
    const cuuint64_t strides[1] = {inner}; /* bytes, dims 1.. */
    const cuuint32_t box[2] = {128, box_rows};
    const cuuint32_t estr[2] = {1, 1};
    CUresult r = h3k_tensor_map_encode_tiled(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void *>(ptr), dims, strides,
                                             box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : (int)cudaErrorInvalidValue;
}

#endif
