/* overlap_probe.cu — do the exp unit (MUFU.EX2) and the FP8 tensor cores
 * (wgmma) of one Hopper SM work at the same time?
 *
 * Every attention kernel of this project settles at about (tensor-core
 * floor + exp floor) cycles per tile (docs/perf.md, 2026-12-04), as if the
 * two units took turns. This probe measures the two units alone and
 * together, with no softmax logic, data or barriers in between: one CTA per
 * SM, 384 threads = 3 warpgroups.
 *   T   WG0 and WG1 issue wgmma m64n128k32 e4m3 back to back (A and B from
 *       shared memory, 4 per commit group, at most 2 groups in flight).
 *   E   WG2 runs 16 independent chains of y = ex2(fma(y, -1, 0.5)) per thread
 *       (FFMA + MUFU.EX2, as the softmax's exps).
 *   TE  both at once, on their own warps.
 *   TEs T, and WG0/WG1 themselves run the exp chains between issuing a
 *       group and waiting for it (the softmax's place in the kernels; one
 *       group in flight per warpgroup).
 *   F   WG2 runs 16 independent FFMA chains per thread (y = fma(y, a, b)),
 *       about as long as T: the FMA pipe that a polynomial exp2 would use.
 *   TF  T and F at once.
 *   I   WG2 runs 16 independent integer chains per thread (y = (y ^ a) + b:
 *       LOP3 / IADD3 on the ALU pipe), as long as F.
 *   TI  T and I at once.
 *   Th, TEh, TEsh, TFh: T, TE, TEs, TF with the wgmma accumulating in FP16
 *       (m64n128k32.f16.e4m3.e4m3, 32 accumulator registers instead of 64):
 *       whether the accumulator's register traffic is what the units share.
 * Iteration counts are chosen so that T and E alone take about as long;
 * TE ~ max(T, E) means the units overlap, TE ~ T + E that they do not.
 *
 * Build (sm_90a only): CMake target overlap_probe when 90a is among
 * H3_CUDA_ARCHS. Run: overlap_probe [--groups N] [--reps R] [--only MODE].
 * Prints one line per mode: ms, tensor TFLOPS, ex2 per SM per clock at the
 * GPU's maximum SM clock (sample the real clock beside it, e.g. with
 * nvidia-smi, and one mode at a time with --only: the board may lower its
 * clock when both units are busy). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "sm90_lab_utils.cuh"
#endif

namespace {

constexpr int kProbeThreads = 384;
constexpr int kChains = 16;       /* independent exp chains per thread */
constexpr int kExpPerGroup = 4;   /* exp iterations (x kChains ex2 per thread) per tensor group, balancing E with T */
constexpr int kFmaPerGroup = 32;  /* FFMA iterations (x kChains) per tensor group, balancing F with T */
constexpr int kSmem = 8192 + 16384 + 1024; /* A 64x128 B, B 128x128 B, 1024-alignment slack */

enum { kModeT = 1, kModeE = 2, kModeSame = 4, kModeF = 8, kModeH = 16, kModeI = 32 };

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
static __device__ __forceinline__ float ex2(float x)
{
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* kChains chains, iters steps each; y stays in [0.35, 1.1] */
static __device__ __forceinline__ void exp_chains(float (&y)[kChains], int iters)
{
    for (int i = 0; i < iters; ++i)
#pragma unroll
        for (int c = 0; c < kChains; ++c) y[c] = ex2(fmaf(y[c], -1.f, 0.5f));
}

/* WG0/WG1 in the T modes: groups of 4 wgmma m64n128k32 e4m3 into an FP32
 * (Acc float, 64 registers) or FP16 (Acc uint32_t = f16x2, 32) accumulator;
 * in TEs the exp chains run between issuing a group and waiting for it.
 * Returns a value that depends on the accumulator (keeps the work). */
template <int kMode, typename Acc, int kN>
static __device__ __forceinline__ float tensor_groups(uint32_t base, int groups, float (&y)[kChains])
{
    Acc acc[kN];
#pragma unroll
    for (int i = 0; i < kN; ++i) acc[i] = 0;
    const uint64_t da = sm90::desc_k128_sw128(base), db = sm90::desc_k128_sw128(base + 8192);
    for (int n = 0; n < groups; ++n) {
#pragma unroll
        for (int i = 0; i < kN; ++i) sm90::fence_reg(acc[i]);
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            if constexpr (kN == 32)
                sm90::wgmma_ss_m64n128k32_f16(acc, da + 2 * kk, db + 2 * kk, 1);
            else
                sm90::wgmma_ss_m64n128k32(acc, da + 2 * kk, db + 2 * kk, 1);
        }
        sm90::wgmma_commit();
#pragma unroll
        for (int i = 0; i < kN; ++i) sm90::fence_reg(acc[i]);
        if (kMode & kModeSame) /* unrolled: a loop here made ptxas serialise the wgmma (C7514) */
#pragma unroll
            for (int i = 0; i < kExpPerGroup; ++i)
#pragma unroll
                for (int c = 0; c < kChains; ++c) y[c] = ex2(fmaf(y[c], -1.f, 0.5f));
        if (kMode & kModeSame)
            sm90::wgmma_wait<0>(); /* wait<1> with exps in between: ptxas serialised the wgmma (C7514) */
        else
            sm90::wgmma_wait<1>();
    }
    sm90::wgmma_wait<0>();
    float out = 0.f;
#pragma unroll
    for (int i = 0; i < kN; ++i) out += (float)acc[i];
    return out;
}
#endif

template <int kMode> __global__ void __launch_bounds__(kProbeThreads, 1) probe_kernel(int groups, float *sink)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (sm90::smem_u32(smem_raw) + 1023u) & ~1023u;
    /* operands: small e4m3 codes (0x30 = 1.0); values do not matter for timing */
    for (int i = threadIdx.x; i < (8192 + 16384) / 4; i += kProbeThreads)
        asm volatile("st.shared.u32 [%0], %1;" ::"r"(base + 4 * i), "r"(0x30303030u));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
    float y[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) y[c] = 0.5f + 0.01f * (float)((threadIdx.x + c) % 7);
    float out = 0.f;
    if (wg < 2 && (kMode & kModeT)) {
        if constexpr ((kMode & kModeH) != 0)
            out += tensor_groups<kMode, uint32_t, 32>(base, groups, y);
        else
            out += tensor_groups<kMode, float, 64>(base, groups, y);
    }
    if (wg == 2 && (kMode & kModeE)) exp_chains(y, kExpPerGroup * groups);
    if (wg == 2 && (kMode & kModeF))
        for (int i = 0; i < kFmaPerGroup * groups; ++i)
#pragma unroll
            for (int c = 0; c < kChains; ++c) y[c] = fmaf(y[c], 0.999f, 0.001f);
    if (wg == 2 && (kMode & kModeI)) {
        uint32_t u[kChains];
#pragma unroll
        for (int c = 0; c < kChains; ++c) u[c] = threadIdx.x + c;
        for (int i = 0; i < kFmaPerGroup * groups; ++i)
#pragma unroll
            for (int c = 0; c < kChains; ++c) {
                uint32_t r;
                asm volatile("{\n.reg .b32 x;\nxor.b32 x, %1, 0x5bd1e995;\nadd.u32 %0, x, 0x1234567;\n}" : "=r"(r) : "r"(u[c]));
                u[c] = r;
            }
#pragma unroll
        for (int c = 0; c < kChains; ++c) out += (float)(u[c] & 7u);
    }
#pragma unroll
    for (int c = 0; c < kChains; ++c) out += y[c];
    if (out == 12345.678f) sink[threadIdx.x] = out; /* keeps the work; never true in practice */
#else
    (void)groups, (void)sink;
#endif
}

} // namespace

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "overlap_probe: %s: %s\n", #x, cudaGetErrorString(e_));                                     \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

template <int kMode> static int time_mode(const char *name, int sms, int groups, int reps, float *sink, double clk_ghz)
{
    CK(cudaFuncSetAttribute(probe_kernel<kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    probe_kernel<kMode><<<sms, kProbeThreads, kSmem>>>(groups, sink); /* warm-up */
    CK(cudaGetLastError());
    float ms[64];
    for (int r = 0; r < reps; ++r) {
        CK(cudaEventRecord(a));
        probe_kernel<kMode><<<sms, kProbeThreads, kSmem>>>(groups, sink);
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms[r], a, b));
    }
    for (int i = 1; i < reps; ++i) /* insertion sort for the median */
        for (int j = i; j > 0 && ms[j] < ms[j - 1]; --j) {
            float t = ms[j];
            ms[j] = ms[j - 1];
            ms[j - 1] = t;
        }
    const double med = ms[reps / 2];
    const double flop = (kMode & kModeT) ? 2.0 * sms * groups * 4 * 2.0 * 64 * 128 * 32 : 0.0;
    const double ex2n = (double)sms * 128 * kChains * kExpPerGroup * groups *
                        (((kMode & kModeE) ? 1 : 0) + ((kMode & kModeSame) ? 2 : 0));
    const double fman = (kMode & (kModeF | kModeI)) ? (double)sms * 128 * kChains * kFmaPerGroup * groups : 0.0;
    printf("%-4s %9.3f ms  tensor %7.1f TFLOPS  ex2 %5.2f  %s %6.1f per SM per clock (at %.3f GHz)\n", name, med,
           flop / (med * 1e-3) / 1e12, ex2n / sms / (med * 1e-3 * clk_ghz * 1e9), (kMode & kModeI) ? "ialu" : "ffma",
           fman / sms / (med * 1e-3 * clk_ghz * 1e9), clk_ghz);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return 0;
}

/* The modes, in the order a run without --only times them: one list for the
 * runs, the usage line and the --only check. */
struct ModeEntry {
    const char *name;
    int (*run)(const char *, int, int, int, float *, double);
};
static const ModeEntry kModes[] = {
    {"T", time_mode<kModeT>},
    {"E", time_mode<kModeE>},
    {"TE", time_mode<kModeT | kModeE>},
    {"TEs", time_mode<kModeT | kModeSame>},
    {"F", time_mode<kModeF>},
    {"TF", time_mode<kModeT | kModeF>},
    {"I", time_mode<kModeI>},
    {"TI", time_mode<kModeT | kModeI>},
    {"Th", time_mode<kModeT | kModeH>},
    {"TEh", time_mode<kModeT | kModeE | kModeH>},
    {"TEsh", time_mode<kModeT | kModeSame | kModeH>},
    {"TFh", time_mode<kModeT | kModeF | kModeH>},
};
constexpr int kNModes = (int)(sizeof kModes / sizeof kModes[0]);

static void print_mode_names(void)
{
    for (int i = 0; i < kNModes; ++i) fprintf(stderr, " %s", kModes[i].name);
    fprintf(stderr, ")\n");
}

int main(int argc, char **argv)
{
    int groups = 20000, reps = 11;
    const char *only = NULL;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--groups") && i + 1 < argc)
            groups = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: overlap_probe [--groups N] [--reps R (1..64)] [--only MODE] (MODE:");
            print_mode_names();
            return 2;
        }
    }
    if (groups < 1 || reps < 1 || reps > 64) {
        fprintf(stderr, "overlap_probe: --groups must be >= 1 and --reps 1..64\n");
        return 2;
    }
    int known = !only;
    for (int i = 0; i < kNModes && !known; ++i) known = !strcmp(only, kModes[i].name);
    if (!known) {
        fprintf(stderr, "overlap_probe: --only %s: not a mode (one of:", only);
        print_mode_names();
        return 2;
    }
    int dev = 0, major = 0, minor = 0, sms = 0, clk_khz = 0, ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1 || cudaGetDevice(&dev) != cudaSuccess) {
        fprintf(stderr, "overlap_probe: no CUDA device\n");
        return 77;
    }
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, dev));
    if (major != 9 || minor != 0) {
        fprintf(stderr, "overlap_probe: needs an sm_90 GPU (this one is sm_%d%d)\n", major, minor);
        return 77;
    }
    float *sink = NULL;
    CK(cudaMalloc(&sink, kProbeThreads * sizeof(float)));
    const double ghz = clk_khz * 1e-6;
    printf("overlap_probe: %d SMs, %d groups of 4 wgmma m64n128k32 per warpgroup, %d ex2 per exp thread per group\n",
           sms, groups, kChains * kExpPerGroup);
    int rc = 0;
    for (int i = 0; i < kNModes; ++i)
        if (!only || !strcmp(only, kModes[i].name)) rc |= kModes[i].run(kModes[i].name, sms, groups, reps, sink, ghz);
    cudaFree(sink);
    return rc;
}
