/* test_inputs — default input layout, save/load round trip and load errors
 * (src/inputs.c).
 *
 * Run alone: ctest --test-dir build -R '^test_inputs$'
 *   or: build/tests/test_inputs   (H3_TEST_SEED=N fixes the seed)
 * The layout does not depend on hidden, so the tiny config keeps S = 30272
 * cheap; the expected positions are rebuilt here with nested loops over
 * (frame, h, w) rather than the library's div/mod. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inputs.h"
#include "numerics.h"
#include "safetensors.h"

#include "test_util.h"
#include "test_stats.h"

/* Checks the layout of in against the rules in inputs.c's header. */
static void check_layout(const h3_inputs *in, int S)
{
    int nt = (int)floor(S * 302.0 / 30272 + 0.5), na = (int)floor(S * 810.0 / 30272 + 0.5);
    if (S >= 3) {
        nt = nt < 1 ? 1 : nt;
        na = na < 1 ? 1 : na;
    }
    int nv = S - nt - na;
    EXPECT(in->S == S, "S %d, expected %d", in->S, S);
    EXPECT(in->count[1] == nt && in->count[2] == na && in->count[0] == nv,
           "S %d: counts text %d audio %d video %d, expected %d %d %d", S, in->count[1], in->count[2], in->count[0], nt,
           na, nv);
    if (S >= 3) EXPECT(nt >= 1 && na >= 1 && nv >= 1, "S %d: a modality has no token", S);
    const int frames = (nv + 404) / 405;
    const double a = sqrt(576.0 / 405.0);
    int i = 0, bad = 0;
    for (int k = 0; k < nt; k++, i++)
        bad += in->tags[i] != 1 || in->pos[3 * i] != (float)k || in->pos[3 * i + 1] != 0 || in->pos[3 * i + 2] != 0;
    for (int k = 0; k < na; k++, i++)
        bad += in->tags[i] != 2 || in->pos[3 * i] != (float)((double)k * frames / na) || in->pos[3 * i + 1] != 0 ||
               in->pos[3 * i + 2] != 0;
    for (int f = 0; f < frames; f++)
        for (int h = 0; h < 15; h++)
            for (int w = 0; w < 27 && i < S; w++, i++)
                bad += in->tags[i] != 0 || in->pos[3 * i] != (float)f || in->pos[3 * i + 1] != (float)(h * a) ||
                       in->pos[3 * i + 2] != (float)(w * a);
    EXPECT(i == S && bad == 0, "S %d: %d tokens with wrong tag or position (walked %d)", S, bad, i);
}

static void expect_load_fail(const char *path, const h3_config *cfg, const char *what, const char *frag)
{
    h3_inputs in;
    char err[512] = "";
    int rc = h3_inputs_load(path, cfg, &in, err, sizeof err);
    EXPECT(rc != 0, "%s: loaded, expected an error", what);
    if (rc == 0) {
        h3_inputs_free(&in);
        return;
    }
    printf("  %-20s -> %s\n", what, err);
    EXPECT(strstr(err, path) && strstr(err, frag), "%s: error lacks '%s' or the path: %s", what, frag, err);
}

int main(void)
{
    const unsigned long long seed = (unsigned long long)h3t_seed("test_inputs");
    h3_config cfg = h3_config_tiny();
    char err[512];
    h3_inputs in;

    /* The default: 302 / 810 / 29160, and its exact positions. */
    if (h3_inputs_default(&cfg, H3_DEFAULT_TOKENS, seed, H3_PROFILE_MODEL, &in, err, sizeof err) != 0) {
        printf("FAIL: default inputs: %s\n", err);
        return 1;
    }
    EXPECT(in.count[1] == 302 && in.count[2] == 810 && in.count[0] == 29160, "default counts %d/%d/%d", in.count[1],
           in.count[2], in.count[0]);
    check_layout(&in, H3_DEFAULT_TOKENS);
    EXPECT(in.pos[3 * 302 + 3 * 809] == (float)(809.0 * 72 / 810), "last audio t %g", (double)in.pos[3 * 1111]);
    EXPECT(in.pos[3 * (30272 - 1)] == 71.0f, "last video frame t %g", (double)in.pos[3 * 30271]);
    /* The model profile's x (inputs.c): NaN/Inf first; then every channel's
     * mean over the tokens: the massive channels (max(1, C 8/5376) of them,
     * 1 for the tiny config) at |40| within 6 standard errors (sd 4 over
     * 30272 tokens), the other channels' means spread with sd 0.5 (within 6
     * standard errors of that sd over C - 1 channels) and their values with
     * sd 1 about the mean. */
    {
        const int C = cfg.hidden, nm_want = C * 8 / 5376 > 0 ? C * 8 / 5376 : 1;
        int nonfinite = 0, nm = 0, nrest = 0;
        double m2 = 0, within = 0, big = 0;
        for (int c = 0; c < C; c++) {
            double s = 0, s2 = 0;
            for (int t = 0; t < in.S; t++) {
                double v = h3_bf16_to_f32(in.x[(size_t)t * C + c]);
                nonfinite += !isfinite(v);
                s += v, s2 += v * v;
            }
            const double mu = s / in.S, var = s2 / in.S - mu * mu;
            if (fabs(mu) > 20) {
                nm++;
                big = fmax(big, fabs(fabs(mu) - 40.0) / (4.0 / sqrt((double)in.S)));
            } else {
                nrest++;
                m2 += mu * mu;
                within += var;
            }
        }
        EXPECT(nonfinite == 0, "%d non-finite x", nonfinite);
        EXPECT(nm == nm_want && big < 6, "%d massive channels (want %d), |mean| off 40 by %.1f standard errors", nm,
               nm_want, big);
        const double sd_means = sqrt(m2 / nrest), sd_within = sqrt(within / nrest);
        EXPECT(fabs(sd_means - 0.5) < 6 * 0.5 / sqrt(2.0 * nrest), "channel means spread with sd %g, want 0.5",
               sd_means);
        EXPECT(fabs(sd_within - 1) < 0.01, "x's sd about the channel means %g, want 1", sd_within);
        for (int j = 0; j < cfg.temb; j++) nonfinite += !isfinite(in.temb[j]);
        EXPECT(nonfinite == 0, "non-finite temb");
    }
    /* The uniform profile: x ~ N(0,1) in BF16, mean and sd within 6 standard
     * errors (n = 7.7 M: 0.0022 for the mean, 0.0015 for the sd). */
    {
        h3_inputs u;
        if (h3_inputs_default(&cfg, H3_DEFAULT_TOKENS, seed, H3_PROFILE_UNIFORM, &u, err, sizeof err) != 0) {
            printf("FAIL: uniform inputs: %s\n", err);
            return 1;
        }
        size_t n = (size_t)u.S * cfg.hidden;
        double s = 0, s2 = 0;
        int nonfinite = 0;
        for (size_t e = 0; e < n; e++) {
            double v = h3_bf16_to_f32(u.x[e]);
            nonfinite += !isfinite(v);
            s += v, s2 += v * v;
        }
        double mu = s / n, sd = sqrt(s2 / n - mu * mu);
        EXPECT(nonfinite == 0, "%d non-finite x", nonfinite);
        EXPECT(fabs(mu) < 6 / sqrt((double)n) && fabs(sd - 1) < 6 / sqrt(2.0 * n) + 2e-3, "x mean %g sd %g", mu, sd);
        EXPECT(!memcmp(u.temb, in.temb, (size_t)cfg.temb * 4), "temb depends on the profile");
        h3_inputs_free(&u);
    }
    /* Determinism and seed dependence. */
    {
        h3_inputs again, other;
        if (h3_inputs_default(&cfg, 1000, seed, H3_PROFILE_MODEL, &again, err, sizeof err) ||
            h3_inputs_default(&cfg, 1000, seed + 1, H3_PROFILE_MODEL, &other, err, sizeof err)) {
            printf("FAIL: %s\n", err);
            return 1;
        }
        h3_inputs third;
        h3_inputs_default(&cfg, 1000, seed, H3_PROFILE_MODEL, &third, err, sizeof err);
        EXPECT(!memcmp(again.x, third.x, (size_t)1000 * cfg.hidden * 2) && !memcmp(again.temb, third.temb, cfg.temb * 4),
               "same seed gave different inputs");
        EXPECT(memcmp(again.x, other.x, (size_t)1000 * cfg.hidden * 2) && memcmp(again.temb, other.temb, cfg.temb * 4),
               "seed and seed+1 gave the same inputs");
        /* x value e is stream 0, element e: the first S*C of the 30272-token x. */
        EXPECT(!memcmp(again.x, in.x, (size_t)1000 * cfg.hidden * 2), "x of S=1000 is not a prefix of x of S=30272");
        h3_inputs_free(&again);
        h3_inputs_free(&other);
        h3_inputs_free(&third);
    }
    /* Other S, including tile edges and tiny ones. */
    const int Ss[] = {1, 2, 3, 4, 63, 65, 113, 405, 1023, 4096, 30271, 40000};
    for (size_t k = 0; k < sizeof Ss / sizeof Ss[0]; k++) {
        h3_inputs t;
        if (h3_inputs_default(&cfg, Ss[k], seed, H3_PROFILE_MODEL, &t, err, sizeof err) != 0) {
            fails++;
            printf("FAIL: S %d: %s\n", Ss[k], err);
            continue;
        }
        check_layout(&t, Ss[k]);
        printf("  S %5d: text %3d audio %3d video %5d\n", Ss[k], t.count[1], t.count[2], t.count[0]);
        h3_inputs_free(&t);
    }
    {
        h3_inputs z;
        int rc = h3_inputs_default(&cfg, 0, seed, H3_PROFILE_MODEL, &z, err, sizeof err);
        EXPECT(rc != 0, "S = 0 accepted");
        if (rc == 0) h3_inputs_free(&z);
    }

    /* Round trip. */
    if (h3_inputs_save("ti_roundtrip.safetensors", &cfg, &in, err, sizeof err) != 0) {
        printf("FAIL: save: %s\n", err);
        return 1;
    }
    h3_inputs back;
    if (h3_inputs_load("ti_roundtrip.safetensors", &cfg, &back, err, sizeof err) != 0) {
        fails++;
        printf("FAIL: load: %s\n", err);
    } else {
        const size_t S = (size_t)in.S;
        EXPECT(back.S == in.S, "S %d after round trip", back.S);
        EXPECT(!memcmp(back.x, in.x, S * cfg.hidden * 2) && !memcmp(back.temb, in.temb, (size_t)cfg.temb * 4) &&
                   !memcmp(back.tags, in.tags, S * 4) && !memcmp(back.pos, in.pos, S * 12),
               "round trip changed the data");
        EXPECT(!memcmp(back.count, in.count, sizeof in.count), "counts differ after round trip");
        h3_inputs_free(&back);
    }

    /* Tags as U8 and I64 are accepted; a tag >= modalities is rejected with
     * its token index; bad shapes name the tensor. */
    {
        const int S = 100, C = cfg.hidden, T = cfg.temb;
        h3_inputs s;
        h3_inputs_default(&cfg, S, seed, H3_PROFILE_MODEL, &s, err, sizeof err);
        uint8_t t8[100];
        int64_t t64[100];
        for (int i = 0; i < S; i++) t8[i] = (uint8_t)s.tags[i], t64[i] = s.tags[i];
        st_write_tensor w[4] = {
            {{"x", ST_BF16, 2, {S, C}}, s.x},
            {{"temb", ST_F32, 1, {T}}, s.temb},
            {{"tags", ST_U8, 1, {S}}, t8},
            {{"positions", ST_F32, 2, {S, 3}}, s.pos},
        };
        const char *dtn[2] = {"U8", "I64"};
        for (int v = 0; v < 2; v++) {
            if (v) w[2] = (st_write_tensor){{"tags", ST_I64, 1, {S}}, t64};
            if (st_write("ti_tags.safetensors", w, 4, NULL, 0, err, sizeof err)) return printf("FAIL: %s\n", err), 1;
            if (h3_inputs_load("ti_tags.safetensors", &cfg, &back, err, sizeof err) != 0) {
                fails++;
                printf("FAIL: %s tags: %s\n", dtn[v], err);
                continue;
            }
            EXPECT(!memcmp(back.tags, s.tags, S * 4) && !memcmp(back.count, s.count, sizeof s.count),
                   "%s tags read wrong", dtn[v]);
            h3_inputs_free(&back);
        }
        t64[57] = 3;
        st_write("ti_badtag.safetensors", w, 4, NULL, 0, err, sizeof err);
        expect_load_fail("ti_badtag.safetensors", &cfg, "tag 3 (I64)", "token 57 has tag 3");
        t64[57] = -1;
        st_write("ti_badtag.safetensors", w, 4, NULL, 0, err, sizeof err);
        expect_load_fail("ti_badtag.safetensors", &cfg, "tag -1 (I64)", "token 57 has tag -1");
        int32_t t32[100];
        memcpy(t32, s.tags, sizeof t32);
        t32[99] = 7;
        w[2] = (st_write_tensor){{"tags", ST_I32, 1, {S}}, t32};
        st_write("ti_badtag.safetensors", w, 4, NULL, 0, err, sizeof err);
        expect_load_fail("ti_badtag.safetensors", &cfg, "tag 7 (I32)", "token 99 has tag 7");
        w[2] = (st_write_tensor){{"tags", ST_F32, 1, {S}}, s.pos};
        st_write("ti_badtag.safetensors", w, 4, NULL, 0, err, sizeof err);
        expect_load_fail("ti_badtag.safetensors", &cfg, "F32 tags", "'tags': dtype F32");
        w[2] = (st_write_tensor){{"tags", ST_I32, 1, {S}}, s.tags};
        w[0].decl.shape[1] = C - 8;
        st_write("ti_bad.safetensors", w, 4, NULL, 0, err, sizeof err);
        expect_load_fail("ti_bad.safetensors", &cfg, "x of hidden 248", "'x': shape [100, 248], expected [100, 256]");
        w[0].decl.shape[1] = C;
        w[3].decl.shape[0] = S - 1;
        st_write("ti_bad.safetensors", w, 4, NULL, 0, err, sizeof err);
        expect_load_fail("ti_bad.safetensors", &cfg, "positions of S-1", "'positions': shape [99, 3], expected [100, 3]");
        w[3].decl.shape[0] = S;
        w[1].decl.shape[0] = T - 1;
        st_write("ti_bad.safetensors", w, 4, NULL, 0, err, sizeof err);
        expect_load_fail("ti_bad.safetensors", &cfg, "temb of T-1", "'temb': shape [63], expected [64]");
        w[1].decl.shape[0] = T;
        st_write("ti_bad.safetensors", w, 3, NULL, 0, err, sizeof err);
        expect_load_fail("ti_bad.safetensors", &cfg, "no positions", "tensor 'positions' is missing");
        h3_inputs_free(&s);
    }
    h3_inputs_free(&in);
    if (!fails) {
        remove("ti_roundtrip.safetensors");
        remove("ti_tags.safetensors");
        remove("ti_badtag.safetensors");
        remove("ti_bad.safetensors");
    }
    printf(fails ? "test_inputs: %d FAILED\n" : "test_inputs: all passed\n", fails);
    return fails ? 1 : 0;
}
