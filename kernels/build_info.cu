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
