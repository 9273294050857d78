/* cli.h — dit_block's command line: one options struct, strict parsing.
 * Usage errors print one line and exit 2 (parse_cli does this itself). */
#ifndef H3_CLI_H
#define H3_CLI_H

#include <stdint.h>

typedef enum { CHECK_STAGES = 0, CHECK_FULL, CHECK_NONE } check_mode;
typedef enum { ATTN_AUTO = 0, ATTN_MMA, ATTN_SM90 } attn_choice;
typedef enum { PATH_AUTO = 0, PATH_CPU, PATH_GPU } path_choice;

typedef struct {
    const char *weights;  /* --weights PATH (required): a file, an index or a directory */
    int block;            /* --block N: the block of a checkpoint that holds several; -1 unset */
    int qkv_layout;       /* --qkv-layout grouped|stacked: an h3_qkv_order, H3_QKV_UNSTATED (0) unset */
    const char *input;    /* --input FILE */
    const char *output;   /* --output FILE */
    const char *json;     /* --json FILE */
    int tokens;           /* --tokens N, 0 = default */
    uint64_t seed;        /* --seed N */
    int profile;          /* --profile model|uniform: the synthetic inputs' h3_profile (default model) */
    int repeat;           /* --repeat N timed runs, median reported (default 10 on the GPU, 1 on the CPU) */
    int warmup;           /* --warmup N untimed runs first (default 2 on the GPU, 0 on the CPU) */
    int sample;           /* --sample N rows checked per stage */
    check_mode check;     /* --check stages|full|none */
    attn_choice attn;     /* --attn auto|mma|sm90 */
    int fp8_mask;         /* --gemm bf16|fp8|fp8:LIST: bit H3_GEMM_* set = that GEMM in FP8 (0 bf16,
                             H3_FP8_ALL fp8), plus H3_FP8_BLOCKS with block scales (gemm_blocks) */
    const char *gemm;     /* the --gemm value as given ("bf16" by default), for messages */
    int fast_accum;       /* --gemm-accum fast: the FP8 GEMMs with cuBLASLt's fast accumulation (GPU only) */
    int gemm_blocks;      /* the FP8 GEMMs with block scales (also H3_FP8_BLOCKS in fp8_mask): --gemm-scales
                             blocks, or auto where the run allows them (parse_cli; main's token count check) */
    int gemm_scales_auto; /* --gemm-scales auto (the default): rows where blocks cannot run */
    path_choice path;     /* --cpu / --gpu */
    int exact_cpu;        /* --cpu-exact: CPU path uses exact attention */
    int quiet;            /* --quiet: no progress bars */
    int gpus;             /* --gpus P: sequence parallel over P GPUs (1 = the single-GPU runner) */
    int sp_one_device;    /* --sp-one-device: the P ranks on GPU 0, one after another (tests the sharding) */
    int smooth_v;         /* --smooth-v on|off: 1, 0, or -1 unset (on for the GPU runners, one GPU
                             or --gpus P; off for the CPU path) */
    int rotate_qk;        /* --rotate-qk on|off: 1, 0 (default off; GPU only) */
    int allow_nonfinite;  /* --allow-nonfinite: write the output even when it holds NaN/Inf (a warning, not an error) */
    /* which of these were given (their defaults differ by path, or they do
     * not apply on every path: main.c warns about those) */
    int check_given, sample_given, attn_given, repeat_given, warmup_given;
} cli_options;

/* Parses argv into o; prints usage and exits 0 on --help, prints one line and
 * exits 2 on any usage error. */
void parse_cli(int argc, char **argv, cli_options *o);

#endif
