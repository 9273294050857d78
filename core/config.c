/* config.c — H3 block constants and the derived tensor table (DESIGN.md §1). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *const h3_stage_names[H3_STAGE_COUNT] = {
    "adaln",     "norm1_mod", "qkv_gemm", "qk_norm_rope_quant", "attention", "out_gemm",
    "gate_res1", "norm2_mod", "fc1_gemm", "swiglu",             "fc2_gemm",  "gate_res2",
};

const char *const h3_gemm_names[H3_GEMMS] = {"qkv", "out", "fc1", "fc2"};

void h3_gemm_list(int mask, char *buf, size_t len)
{
    size_t n = 0;
    if (len) buf[0] = 0;
    for (int g = 0; g < H3_GEMMS; g++)
        if (mask >> g & 1) {
            int w = snprintf(buf + n, len > n ? len - n : 0, "%s%s", n ? "," : "", h3_gemm_names[g]);
            if (w > 0) n += (size_t)w;
            if (n >= len) return; /* truncated: snprintf ended it */
        }
}

h3_config h3_config_full(void)
{
    h3_config c = {
        .hidden = 5376, .heads = 56, .head_dim = 128, .ffn = 14336, .temb = 2688,
        .modalities = 3, .eps = 1e-5f, .rope_dims = 96, .rope_freqs = 16, .rope_theta = 10000.0f,
    };
    return c;
}

h3_config h3_config_tiny(void)
{
    h3_config c = h3_config_full();
    c.hidden = 256;
    c.heads = 2;
    c.ffn = 512;
    c.temb = 64;
    return c;
}

void h3_tensor_specs(const h3_config *c, h3_tensor_spec s[H3_T_COUNT])
{
    const int64_t C = c->hidden, D = c->head_dim, I = (int64_t)c->heads * D, F = c->ffn,
                  T = c->temb, MOD = (int64_t)c->modalities * H3_SLOTS * C;
    s[H3_T_NORM1] = (h3_tensor_spec){"norm1.weight", 1, {C, 0}};
    s[H3_T_NORM2] = (h3_tensor_spec){"norm2.weight", 1, {C, 0}};
    s[H3_T_QKV] = (h3_tensor_spec){"attn.qkv_proj.weight", 2, {3 * I, C}};
    s[H3_T_QNORM] = (h3_tensor_spec){"attn.q_norm.weight", 1, {D, 0}};
    s[H3_T_KNORM] = (h3_tensor_spec){"attn.k_norm.weight", 1, {D, 0}};
    s[H3_T_OUT] = (h3_tensor_spec){"attn.out_proj.weight", 2, {C, I}};
    s[H3_T_FC1] = (h3_tensor_spec){"mlp.fc1.weight", 2, {2 * F, C}};
    s[H3_T_FC2] = (h3_tensor_spec){"mlp.fc2.weight", 2, {C, F}};
    s[H3_T_ADALN_W] = (h3_tensor_spec){"adaln_proj.linear.weight", 2, {MOD, T}};
    s[H3_T_ADALN_B] = (h3_tensor_spec){"adaln_proj.linear.bias", 1, {MOD, 0}};
}

int64_t h3_param_count(const h3_config *c)
{
    h3_tensor_spec s[H3_T_COUNT];
    h3_tensor_specs(c, s);
    int64_t n = 0;
    for (int i = 0; i < H3_T_COUNT; i++)
        n += s[i].rank == 1 ? s[i].shape[0] : s[i].shape[0] * s[i].shape[1];
    return n;
}

int h3_config_validate(const h3_config *c, char *err, size_t errlen)
{
    if (c->hidden <= 0 || c->heads <= 0 || c->ffn <= 0 || c->temb <= 0 || c->modalities <= 0) {
        snprintf(err, errlen, "config: sizes must be positive (hidden %d, heads %d, ffn %d, temb %d, modalities %d)",
                 c->hidden, c->heads, c->ffn, c->temb, c->modalities);
        return -1;
    }
    if (c->head_dim != 128) {
        snprintf(err, errlen, "config: head_dim %d is not supported (the attention kernels assume 128)", c->head_dim);
        return -1;
    }
    if (c->hidden % 8 || c->ffn % 8 || c->temb % 8) {
        snprintf(err, errlen, "config: hidden %d, ffn %d and temb %d must be multiples of 8 (16-byte rows)",
                 c->hidden, c->ffn, c->temb);
        return -1;
    }
    if (c->rope_dims != 6 * c->rope_freqs || c->rope_dims > c->head_dim || c->rope_dims % 2) {
        snprintf(err, errlen, "config: rope_dims %d must be 6 x rope_freqs %d and fit in head_dim %d",
                 c->rope_dims, c->rope_freqs, c->head_dim);
        return -1;
    }
    return 0;
}

double h3_stage_flops(const h3_config *c, int S, int stage)
{
    const double C = c->hidden, I = (double)c->heads * c->head_dim, F = c->ffn;
    switch (stage) {
    case H3_STAGE_ADALN: return 2.0 * h3_mod_width(c) * c->temb;
    case H3_STAGE_QKV_GEMM: return 2.0 * S * C * 3 * I;
    case H3_STAGE_ATTENTION: return 4.0 * S * (double)S * c->head_dim * c->heads;
    case H3_STAGE_OUT_GEMM: return 2.0 * S * I * C;
    case H3_STAGE_FC1_GEMM: return 2.0 * S * C * 2 * F;
    case H3_STAGE_FC2_GEMM: return 2.0 * S * F * C;
    default: return 0;
    }
}

int h3_profile_parse(const char *s, h3_profile *p)
{
    if (!strcmp(s, "model")) *p = H3_PROFILE_MODEL;
    else if (!strcmp(s, "uniform")) *p = H3_PROFILE_UNIFORM;
    else return -1;
    return 0;
}

const char *h3_profile_name(h3_profile p) { return p == H3_PROFILE_UNIFORM ? "uniform" : "model"; }

void h3_rope_omega(const h3_config *cfg, float *omega)
{
    for (int j = 0; j < cfg->rope_freqs; j++)
        omega[j] = (float)pow((double)cfg->rope_theta, -(double)j / (double)cfg->rope_freqs);
}
