/* config.h — the one table of shapes for the MiniMax-H3 DiT block (DESIGN.md §1).
 *
 * Every part of h3block (loader, CPU reference, GPU runner, generators, tests)
 * derives tensor names and shapes from h3_config through h3_tensor_specs(), so
 * a shape is written down exactly once. No dependencies beyond libc. */
#ifndef H3_CONFIG_H
#define H3_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int hidden;     /* C  = 5376 */
    int heads;      /* H  = 56 */
    int head_dim;   /* D  = 128 (the kernels assume 128) */
    int ffn;        /* F  = 14336 (SwiGLU width; fc1 has 2F rows) */
    int temb;       /* T  = 2688 */
    int modalities; /* M  = 3: 0 video, 1 text, 2 audio */
    float eps;      /* RMSNorm eps, 1e-5 everywhere */
    int rope_dims;  /* 96 of 128 head dims are rotated */
    int rope_freqs; /* 16 frequencies per axis (t, h, w) */
    float rope_theta; /* 10000 */
} h3_config;

/* Six modulation slots per modality, in this order in adaln_proj's output. */
enum {
    H3_SLOT_SHIFT_MSA = 0,
    H3_SLOT_SCALE_MSA,
    H3_SLOT_GATE_MSA,
    H3_SLOT_SHIFT_MLP,
    H3_SLOT_SCALE_MLP,
    H3_SLOT_GATE_MLP,
    H3_SLOTS
};

enum { H3_TAG_VIDEO = 0, H3_TAG_TEXT = 1, H3_TAG_AUDIO = 2 };

/* The tensors of one block, in file order. */
enum {
    H3_T_NORM1 = 0,  /* [C] */
    H3_T_NORM2,      /* [C] */
    H3_T_QKV,        /* [3*H*D][C], grouped per head: q_h, k_h, v_h */
    H3_T_QNORM,      /* [D] */
    H3_T_KNORM,      /* [D] */
    H3_T_OUT,        /* [C][H*D] */
    H3_T_FC1,        /* [2F][C]: gate rows then up rows */
    H3_T_FC2,        /* [C][F] */
    H3_T_ADALN_W,    /* [M*6*C][T] */
    H3_T_ADALN_B,    /* [M*6*C] */
    H3_T_COUNT
};

typedef struct {
    const char *name;  /* without the "blocks.N." prefix */
    int rank;
    int64_t shape[2];
} h3_tensor_spec;

/* Stage names (DESIGN.md §2), used by the timing table, checks, JSON and tests. */
enum {
    H3_STAGE_ADALN = 0,
    H3_STAGE_NORM1_MOD,
    H3_STAGE_QKV_GEMM,
    H3_STAGE_QK_NORM_ROPE_QUANT,
    H3_STAGE_ATTENTION,
    H3_STAGE_OUT_GEMM,
    H3_STAGE_GATE_RES1,
    H3_STAGE_NORM2_MOD,
    H3_STAGE_FC1_GEMM,
    H3_STAGE_SWIGLU,
    H3_STAGE_FC2_GEMM,
    H3_STAGE_GATE_RES2,
    H3_STAGE_COUNT
};

extern const char *const h3_stage_names[H3_STAGE_COUNT];

/* The block's four GEMMs, in order. A GEMM precision mask (dit_block --gemm,
 * the runner, cpu_block_forward_fp8) has bit g set when GEMM g runs in the
 * FP8 GEMM mode; 0 is all BF16, H3_FP8_ALL is --gemm fp8. */
enum { H3_GEMM_QKV = 0, H3_GEMM_OUT, H3_GEMM_FC1, H3_GEMM_FC2, H3_GEMMS };
#define H3_FP8_ALL ((1 << H3_GEMMS) - 1)
/* A modifier bit of the mask (--gemm-scales blocks): the FP8 GEMMs take
 * block scales -- their inputs one per token per 128 columns of K, their
 * weights one per 128 x 128 block (cuBLASLt's VEC128_32F and BLK128x128_32F)
 * -- instead of one per token and one per output channel. */
#define H3_FP8_BLOCKS (1 << H3_GEMMS)
/* How many FP32 scales an FP8 GEMM operand [rows][K] has under mask: its
 * input (rows = tokens; blocks: [ceil(K / 128)][rows]) and its weight (rows =
 * output channels; blocks: [ceil(rows / 128)][ceil(K / 128) rounded up to 4],
 * cuBLASLt's 16-byte-aligned rows of BLK128x128_32F scales). */
static inline size_t h3_fp8_kblocks(size_t K) { return (K + 127) / 128; } /* 128-column blocks of a row */
static inline size_t h3_fp8_in_scales(size_t rows, size_t K, int mask)
{
    return mask & H3_FP8_BLOCKS ? h3_fp8_kblocks(K) * rows : rows;
}
static inline size_t h3_fp8_w_scale_ld(size_t K) { return (h3_fp8_kblocks(K) + 3) / 4 * 4; }
static inline size_t h3_fp8_w_scales(size_t rows, size_t K, int mask)
{
    return mask & H3_FP8_BLOCKS ? h3_fp8_w_scale_ld(K) * h3_fp8_kblocks(rows) : rows;
}
extern const char *const h3_gemm_names[H3_GEMMS]; /* "qkv", "out", "fc1", "fc2": the --gemm fp8:LIST names */

/* The names of the GEMMs in mask, in block order, joined by ',' ("" for 0);
 * H3_GEMM_LIST_LEN holds the longest, "qkv,out,fc1,fc2". */
#define H3_GEMM_LIST_LEN 16
void h3_gemm_list(int mask, char *buf, size_t len);

/* Synthetic data profiles (gen_weights, gen_inputs, dit_block's own inputs;
 * docs/DESIGN.md "Synthetic data" says what each choice follows):
 *   H3_PROFILE_MODEL    the statistics of a trained DiT: q/k-norm gains far
 *                       from 1 (sharp attention rows), massive-activation
 *                       channels and channel means in the hidden states (so
 *                       V, a GEMM output, has per-channel means), adaLN
 *                       biases that matter, heavy-tailed weights. The default.
 *   H3_PROFILE_UNIFORM  i.i.d. normal weights and inputs, near-identity
 *                       norms: nearly uniform attention (the first block). */
typedef enum { H3_PROFILE_MODEL = 0, H3_PROFILE_UNIFORM = 1 } h3_profile;
int h3_profile_parse(const char *s, h3_profile *p); /* "model" or "uniform": 0, else -1 */
const char *h3_profile_name(h3_profile p);

h3_config h3_config_full(void); /* the published H3 block */
h3_config h3_config_tiny(void); /* hidden 256, 2 heads x 128, SwiGLU 512, temb 64 */

/* The RoPE frequencies omega_j = rope_theta^(-j / rope_freqs), j <
 * rope_freqs, as the FP32 the CPU reference and the GPU's table use. */
void h3_rope_omega(const h3_config *cfg, float *omega /* [rope_freqs] */);

/* Fills specs[H3_T_COUNT] with names and shapes derived from cfg. */
void h3_tensor_specs(const h3_config *cfg, h3_tensor_spec specs[H3_T_COUNT]);

/* Arithmetic work of a stage at S tokens: FLOPs of the GEMMs and of
 * attention (4 S^2 D H), 0 for the memory-bound stages. */
double h3_stage_flops(const h3_config *cfg, int S, int stage);

/* Parameter count and BF16 byte size of one block. */
int64_t h3_param_count(const h3_config *cfg);

/* Validates a config (positive sizes, head_dim == 128, rope fits). Returns 0
 * or -1 with a reason in err. */
int h3_config_validate(const h3_config *cfg, char *err, size_t errlen);

/* Derived sizes. */
static inline int h3_attn_width(const h3_config *c) { return c->heads * c->head_dim; }
static inline int h3_qkv_width(const h3_config *c) { return 3 * c->heads * c->head_dim; }
/* The qkv GEMM's output is grouped per head: row s holds head h's q, k, v at
 * columns H3_QKV_HEAD_STRIDE h + 0, 128, H3_QKV_V_OFFSET (head_dim 128). */
#define H3_QKV_HEAD_STRIDE 384
#define H3_QKV_V_OFFSET 256
static inline int h3_mod_width(const h3_config *c) { return c->modalities * H3_SLOTS * c->hidden; }
/* Floats per token of the GPU's RoPE table (kernels.h h3k_rope_table): the
 * cos and sin of the 48 angles, rope_dims / 2 for the 3 axes x 16
 * frequencies that every config has (the GPU kernels assume 16; config.c
 * only checks rope_dims = 6 x rope_freqs). */
#define H3_ROPE_TAB 96

/* Quantisation group and sequence padding for the FP8 attention operands:
 * one scale per (head, 128-token group); Q/K/V buffers are padded to whole
 * groups with zeros. */
#define H3_QGROUP 128
static inline int h3_pad_tokens(int S) { return (S + H3_QGROUP - 1) / H3_QGROUP * H3_QGROUP; }
static inline int h3_groups(int S) { return (S + H3_QGROUP - 1) / H3_QGROUP; }

/* V smoothing (cpu_ref.h): V's per-(head, dim) mean over the S tokens is
 * summed in double in a fixed order so that CPU and GPU get the same FP32
 * mean bit for bit: token s adds to partial sum s % H3_VMEAN_LANES in token
 * order, then the partials are added in lane order, then divided by S. */
#define H3_VMEAN_LANES 32

/* Q/K rotation (--rotate-qk; cpu_ref.h): before quantisation every q and k
 * head vector x [128] (BF16 values) becomes bf16(H3_ROT_SCALE * FWHT(sigma .
 * x)): sigma_d = -1 where bit d of H3_ROT_SIGNS is set (bit d % 32 of word
 * d / 32), FWHT the unnormalised Walsh-Hadamard transform in FP32 taken stage
 * by stage, pairs differing in bit 0 of the dim first, then bit 1, ..., bit 6,
 * the lower dim of a pair getting a + b and the upper a - b, and H3_ROT_SCALE
 * = 128^-1/2 rounded to FP32, one multiply. The map is orthonormal and the
 * same for q and k, so QK^T is unchanged (up to the final BF16 rounding); an
 * outlier channel is spread over all 128 dims, so its group's amax shrinks
 * and the other values keep more of e4m3's range (FA3's "incoherent
 * processing"). The signs are a fixed draw (splitmix64 of 0x726f74, 0x726f75),
 * so that inputs aligned with a Hadamard row (a constant vector) are unlikely. */
#define H3_ROT_SIGNS {0x0f8a1a2cu, 0xeb98fb2au, 0x13fe8a15u, 0x99b73af1u}
#define H3_ROT_SCALE 0.0883883476483184405f
/* 1 where the rotation flips dim d's sign (sigma_d = -1), d in 0..127 */
static inline int h3_rot_flips(int d)
{
    static const uint32_t sig[4] = H3_ROT_SIGNS;
    return (int)(sig[d >> 5] >> (d & 31) & 1u);
}

/* V is stored transposed ([H][D][S_pad]) with its keys permuted inside every
 * 16-key group, so that the P tile can go from the QK^T accumulator fragment
 * straight into the A-operand fragment of the PV MMA with no shuffle
 * (mma.sync m16n8k32 and wgmma m64nNk32 share this fragment shape).
 *
 * In the accumulator a thread (t = lane % 4) holds, per 8-key n-tile j, keys
 * 8j + 2t + {0,1}; in the A operand it owns k-slots 4t + {0..3} (keys 0..15)
 * and 16 + 4t + {0..3}. Putting its n-tiles 0,1 into the first four slots and
 * 2,3 into the next four means slot s must meet key h3_v_slot_key(s) of V. */
static inline int h3_v_slot_key(int s)
{
    int base = s & ~15, r = s & 15, t = r >> 2, e = r & 3;
    return base + (e >> 1) * 8 + t * 2 + (e & 1);
}
/* Inverse: the slot (stored position) that holds key k. */
static inline int h3_v_key_slot(int k)
{
    int base = k & ~15, r = k & 15, half = r >> 3, t = (r & 7) >> 1, lo = r & 1;
    return base + t * 4 + half * 2 + lo;
}

#ifdef __cplusplus
}
#endif
#endif
