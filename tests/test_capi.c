/* test_capi.c — every argument check of the C API (include/h3block.h), on
 * any machine: the checks run before any CUDA call, so each bad argument
 * gets its status and a message naming it with or without a GPU (and in a
 * build without CUDA). Links libh3block.so as a user's program does. The
 * only valid calls here are the ones that need a GPU to go further; they
 * are expected to fail for that reason alone (or to pass, on a GPU). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h3block.h"
#include "test_util.h"

/* status st and a message containing want */
#define EXPECT_ERR(call, st_want, msg, want)                                                                    \
    do {                                                                                                        \
        const h3b_status st_ = (call);                                                                          \
        const char *m_ = (msg);                                                                                 \
        EXPECT(st_ == (st_want) && strstr(m_, want), "%s: got %s '%s', want %s naming '%s'", #call,            \
               h3b_status_name(st_), m_, h3b_status_name(st_want), want);                                       \
    } while (0)

/* fake device addresses: never dereferenced, the checks reject them first */
#define ADDR(x) ((void *)(uintptr_t)(x))

int main(void)
{
    printf("h3block %s\n", h3b_version());
    EXPECT(strstr(h3b_version(), "0.") == h3b_version(), "version '%s'", h3b_version());
    EXPECT(!strcmp(h3b_status_name(H3B_ERR_FILE), "H3B_ERR_FILE"), "status name");
    EXPECT(h3b_attn_create(NULL, 0, 0) == H3B_ERR_ARGUMENT, "create with out NULL");
    EXPECT(h3b_attention(NULL, 1, 1, 1, (h3b_tensor){0}, (h3b_tensor){0}, (h3b_tensor){0}, NULL, NULL, NULL) ==
               H3B_ERR_ARGUMENT, "attention on a NULL handle");
    EXPECT(!strcmp(h3b_attn_error(NULL), "h3b_attn: NULL handle"), "message of a NULL handle");

    h3b_attn *bad;
    EXPECT_ERR(h3b_attn_create(&bad, 0, 0x10), H3B_ERR_ARGUMENT, h3b_attn_error(bad), "options = 0x10");
    h3b_attn_destroy(bad);

    h3b_attn *a;
    const h3b_status cst = h3b_attn_create(&a, 0, 0);
    EXPECT(a != NULL, "create returns a handle even when it fails");
    printf("h3b_attn_create on device 0: %s %s\n", h3b_status_name(cst), cst ? h3b_attn_error(a) : h3b_attn_kernel(a));
    if (cst) EXPECT(h3b_attn_error(a)[0], "a failed create says why");

    const int B = 2, S = 300, H = 4;
    const int64_t sb = (int64_t)S * H * 128, ss = H * 128, sh = 128;
    const h3b_tensor q = {ADDR(0x10000), sb, ss, sh}, k = {ADDR(0x20000), sb, ss, sh}, v = {ADDR(0x30000), sb, ss, sh};
    void *out = ADDR(0x40000);
    EXPECT_ERR(h3b_attention(a, 0, S, H, q, k, v, out, NULL, NULL), H3B_ERR_ARGUMENT, h3b_attn_error(a), "B = 0");
    EXPECT_ERR(h3b_attention(a, B, 0, H, q, k, v, out, NULL, NULL), H3B_ERR_ARGUMENT, h3b_attn_error(a), "S = 0");
    EXPECT_ERR(h3b_attention(a, B, 65535 * 128 + 1, H, q, k, v, out, NULL, NULL), H3B_ERR_UNSUPPORTED,
               h3b_attn_error(a), "S = 8388481");
    EXPECT_ERR(h3b_attention(a, B, S, 0, q, k, v, out, NULL, NULL), H3B_ERR_ARGUMENT, h3b_attn_error(a), "H = 0");
    EXPECT_ERR(h3b_attention(a, B, S, 65536, q, k, v, out, NULL, NULL), H3B_ERR_UNSUPPORTED, h3b_attn_error(a),
               "H = 65536");
    h3b_tensor t = q;
    t.data = NULL;
    EXPECT_ERR(h3b_attention(a, B, S, H, t, k, v, out, NULL, NULL), H3B_ERR_ARGUMENT, h3b_attn_error(a), "q: data is NULL");
    t = k;
    t.data = ADDR(0x20008);
    EXPECT_ERR(h3b_attention(a, B, S, H, q, t, v, out, NULL, NULL), H3B_ERR_ARGUMENT, h3b_attn_error(a),
               "k: data 0x20008 is not 16-byte aligned");
    t = v;
    t.stride_s = ss + 4;
    EXPECT_ERR(h3b_attention(a, B, S, H, q, k, t, out, NULL, NULL), H3B_ERR_ARGUMENT, h3b_attn_error(a),
               "v: stride_s 516 and stride_h 128 must be multiples of 8");
    t = v;
    t.stride_h = 12;
    EXPECT_ERR(h3b_attention(a, B, S, H, q, k, t, out, NULL, NULL), H3B_ERR_ARGUMENT, h3b_attn_error(a),
               "v: stride_s 512 and stride_h 12");
    t = q;
    t.stride_h = -128;
    EXPECT_ERR(h3b_attention(a, B, S, H, t, k, v, out, NULL, NULL), H3B_ERR_ARGUMENT, h3b_attn_error(a),
               "q: strides (b 153600, s 512, h -128) must be positive");
    t = q;
    t.stride_h = (int64_t)1 << 32;
    EXPECT_ERR(h3b_attention(a, B, S, H, t, k, v, out, NULL, NULL), H3B_ERR_ARGUMENT, h3b_attn_error(a),
               "q: stride_h 4294967296 does not fit");
    EXPECT_ERR(h3b_attention(a, B, S, H, q, k, v, NULL, NULL, NULL), H3B_ERR_ARGUMENT, h3b_attn_error(a), "out is NULL");
    EXPECT_ERR(h3b_attention(a, B, S, H, q, k, v, ADDR(0x40002), NULL, NULL), H3B_ERR_ARGUMENT, h3b_attn_error(a),
               "out 0x40002 is not 16-byte aligned");
    EXPECT_ERR(h3b_attention(a, B, S, H, q, k, v, out, ADDR(0x50002), NULL), H3B_ERR_ARGUMENT, h3b_attn_error(a),
               "lse 0x50002 is not 4-byte aligned");
    /* one token and one head: their strides are never used, any value is fine */
    t = q;
    t.stride_s = 0;
    t.stride_h = 0;
    const h3b_status one = h3b_attention_ws(a, 1, 1, 1, t, t, t, out, NULL, NULL, 0, NULL);
    EXPECT(one == H3B_ERR_ARGUMENT && strstr(h3b_attn_error(a), "workspace is NULL"),
           "S = H = 1 with zero strides passes the tensor checks: %s", h3b_attn_error(a));

    /* the caller's workspace */
    const size_t need = h3b_attention_workspace_size(S, H);
    EXPECT(need >= (size_t)3 * H * 384 * 128, "workspace size %zu", need);
    EXPECT(h3b_attention_workspace_size(0, H) == 0 && h3b_attention_workspace_size(S, 0) == 0, "workspace of nothing");
    EXPECT_ERR(h3b_attention_ws(a, B, S, H, q, k, v, out, NULL, NULL, need, NULL), H3B_ERR_ARGUMENT, h3b_attn_error(a),
               "workspace is NULL");
    EXPECT_ERR(h3b_attention_ws(a, B, S, H, q, k, v, out, NULL, ADDR(0x60010), need, NULL), H3B_ERR_ARGUMENT,
               h3b_attn_error(a), "workspace 0x60010 is not 256-byte aligned");
    char want[128];
    snprintf(want, sizeof want, "workspace_bytes = %zu: S = 300, H = 4 need %zu", need - 1, need);
    EXPECT_ERR(h3b_attention_ws(a, B, S, H, q, k, v, out, NULL, ADDR(0x60000), need - 1, NULL), H3B_ERR_ARGUMENT,
               h3b_attn_error(a), want);
    /* valid arguments: only a handle that failed to create stops them (the fake addresses are never reached) */
    if (cst) {
        EXPECT_ERR(h3b_attention(a, B, S, H, q, k, v, out, NULL, NULL), H3B_ERR_UNSUPPORTED, h3b_attn_error(a),
                   "");
        printf("valid arguments on a failed handle: %s\n", h3b_attn_error(a));
    }
    h3b_attn_destroy(a);

    /* ---- the block ---- */
    h3b_block *b;
    EXPECT(h3b_block_open(NULL, "x", -1, H3B_GEMM_BF16, 0) == H3B_ERR_ARGUMENT, "open with out NULL");
    EXPECT_ERR(h3b_block_open(&b, NULL, -1, H3B_GEMM_BF16, 0), H3B_ERR_ARGUMENT, h3b_block_error(b), "path is NULL");
    h3b_block_destroy(b);
    EXPECT_ERR(h3b_block_open(&b, "x", -1, (h3b_gemm)7, 0), H3B_ERR_ARGUMENT, h3b_block_error(b), "gemm = 7");
    h3b_block_destroy(b);
    EXPECT_ERR(h3b_block_open(&b, "x", -2, H3B_GEMM_BF16, 0), H3B_ERR_ARGUMENT, h3b_block_error(b), "block_index = -2");
    h3b_block_destroy(b);
    EXPECT_ERR(h3b_block_open(&b, "/nonexistent/block.safetensors", -1, H3B_GEMM_FP8, 0), H3B_ERR_FILE,
               h3b_block_error(b), "/nonexistent/block.safetensors");
    h3b_block_info info;
    EXPECT(h3b_block_get_info(b, &info) == H3B_ERR_ARGUMENT, "info of a block that failed to open");
    h3b_block_destroy(b);

    static uint16_t w[16];
    h3b_host_tensor ts[10] = {
        {"norm1.weight", w, {5376, 0}},           {"norm2.weight", w, {5376, 0}},
        {"attn.qkv_proj.weight", w, {21504, 5376}},    {"attn.q_norm.weight", w, {128, 0}},
        {"attn.k_norm.weight", w, {128, 0}},      {"attn.out_proj.weight", w, {5376, 7168}},
        {"mlp.fc1.weight", w, {28672, 5376}},     {"mlp.fc2.weight", w, {5376, 14336}},
        {"adaln_proj.linear.weight", w, {96768, 2688}}, {"adaln_proj.linear.bias", w, {96768, 0}},
    };
    EXPECT_ERR(h3b_block_create(&b, NULL, 10, H3B_GEMM_BF16, 0), H3B_ERR_ARGUMENT, h3b_block_error(b), "no tensors");
    h3b_block_destroy(b);
    EXPECT_ERR(h3b_block_create(&b, ts, 10, (h3b_gemm)-1, 0), H3B_ERR_ARGUMENT, h3b_block_error(b), "gemm = -1");
    h3b_block_destroy(b);
    h3b_host_tensor tb[10];
    memcpy(tb, ts, sizeof ts);
    tb[4].name = "attn.v_norm.weight";
    EXPECT_ERR(h3b_block_create(&b, tb, 10, H3B_GEMM_BF16, 0), H3B_ERR_ARGUMENT, h3b_block_error(b),
               "'attn.v_norm.weight' is not a tensor of the H3 block");
    h3b_block_destroy(b);
    memcpy(tb, ts, sizeof ts);
    tb[2].shape[0] = 21503;
    EXPECT_ERR(h3b_block_create(&b, tb, 10, H3B_GEMM_BF16, 0), H3B_ERR_ARGUMENT, h3b_block_error(b),
               "tensor 'attn.qkv_proj.weight': shape [21503, 5376], the H3 block's is [21504, 5376]");
    h3b_block_destroy(b);
    memcpy(tb, ts, sizeof ts);
    tb[7].data = NULL;
    EXPECT_ERR(h3b_block_create(&b, tb, 10, H3B_GEMM_BF16, 0), H3B_ERR_ARGUMENT, h3b_block_error(b),
               "tensor 'mlp.fc2.weight': data is NULL");
    h3b_block_destroy(b);
    memcpy(tb, ts, sizeof ts);
    tb[9] = tb[8];
    EXPECT_ERR(h3b_block_create(&b, tb, 10, H3B_GEMM_BF16, 0), H3B_ERR_ARGUMENT, h3b_block_error(b),
               "tensor 'adaln_proj.linear.weight' given twice");
    h3b_block_destroy(b);
    EXPECT_ERR(h3b_block_create(&b, ts, 9, H3B_GEMM_BF16, 0), H3B_ERR_ARGUMENT, h3b_block_error(b),
               "tensor 'adaln_proj.linear.bias' is missing");
    /* forward's own checks, on that handle (they come before the handle's state) */
    const int T = 4096;
    void *x = ADDR(0x100000), *o = ADDR(0x100000 + (size_t)T * 5376 * 2);
    const float *temb = ADDR(0x90000), *pos = ADDR(0xa0000);
    const int32_t *tags = ADDR(0xb0000);
    EXPECT_ERR(h3b_block_forward(b, 0, x, temb, tags, pos, o, NULL), H3B_ERR_ARGUMENT, h3b_block_error(b), "S = 0");
    EXPECT_ERR(h3b_block_forward(b, T, NULL, temb, tags, pos, o, NULL), H3B_ERR_ARGUMENT, h3b_block_error(b),
               "x is NULL");
    EXPECT_ERR(h3b_block_forward(b, T, x, NULL, tags, pos, o, NULL), H3B_ERR_ARGUMENT, h3b_block_error(b),
               "temb is NULL");
    EXPECT_ERR(h3b_block_forward(b, T, x, temb, ADDR(0xb0004), pos, o, NULL), H3B_ERR_ARGUMENT, h3b_block_error(b),
               "tags 0xb0004 is not 16-byte aligned");
    EXPECT_ERR(h3b_block_forward(b, T, x, temb, tags, NULL, o, NULL), H3B_ERR_ARGUMENT, h3b_block_error(b),
               "positions is NULL");
    EXPECT_ERR(h3b_block_forward(b, T, x, temb, tags, pos, ADDR(0x100010), NULL), H3B_ERR_ARGUMENT, h3b_block_error(b),
               "out overlaps x");
    EXPECT_ERR(h3b_block_forward(b, T, x, temb, tags, pos, o, NULL), H3B_ERR_ARGUMENT, h3b_block_error(b),
               "the block was not created");
    h3b_block_destroy(b);
    h3b_block_destroy(NULL);
    h3b_attn_destroy(NULL);

    printf("%d checks, %d failed\n", checks, fails);
    return fails ? 1 : 0;
}
