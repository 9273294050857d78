/* report.h — the per-op timing table and check results, printed and as JSON
 * (docs/report-format.md: "h3block-report/1", with what produced it). One
 * format for the CPU and GPU paths, stage names from config.h. */
#ifndef H3_REPORT_H
#define H3_REPORT_H

#include <stdio.h>

#include "op_row.h"

#define REPORT_FORMAT "h3block-report/1" /* the JSON's "format": a new number for a change a reader must know */
#define REPORT_MAX_ROWS 24
#define REPORT_MAX_CHECKS 48

typedef struct {
    char stage[48];  /* stage name the check belongs to */
    char what[48];   /* e.g. "vs cpu", "vs emulated fp8", "vs exact (fp8 error)" */
    double rel_rms, max_abs, ref_max;
    double tol_rms, tol_max; /* max_abs tolerance is relative to ref_max */
    long nonfinite;  /* NaN/Inf in the tested output where the reference is finite */
    long count;      /* elements compared */
    int asserted;    /* 0: reported only (e.g. the FP8 error vs exact) */
    int pass;
    char detail[256]; /* first mismatches, when failing */
} report_check;

/* The GPU that ran the block, from the runtime's probe (report "gpu"). */
typedef struct {
    char name[256];                  /* the device's own name */
    int cc_major, cc_minor, sms;
    int sm_clock_mhz, mem_clock_mhz; /* peak clocks the device reports; 0 unknown */
    double mem_gb;
    char driver[32];                 /* the kernel driver's version, "" unknown */
    int driver_cuda, cuda_runtime;   /* CUDA versions as the CUDA API gives them: 12080 = 12.8; 0 unknown */
    unsigned long cublaslt;          /* 130100 = 13.1.0; 0 unknown */
} report_gpu;

/* A file the run read (report "weights", "inputs"). */
typedef struct {
    const char *path;     /* as given; NULL: none (synthetic inputs) */
    char file[4096];      /* the file read: PATH, or the index or file found in a directory */
    long long size;       /* bytes of file; -1 unknown */
    char hash[17];        /* st_fingerprint of file, 16 hex digits; "" unknown */
} report_file;

typedef struct {
    /* what produced the report */
    const char *tool;     /* "dit_block" */
    int argc;
    char *const *argv;    /* the command line as given */
    char created_utc[32]; /* when the run started, ISO 8601 in UTC: "YYYY-MM-DDTHH:MM:SSZ" */
    report_file weights, inputs;
    char layout[1024];    /* the weights' layout and QKV order (the summary's layout line) */
    int synthetic;        /* the inputs were generated (from seed and profile), not read */
    unsigned long long seed;
    char profile[16];     /* the synthetic inputs' profile */
    int has_gpu;          /* the GPU path ran: gpu is filled */
    report_gpu gpu;
    /* what ran and what it measured */
    char path[8];         /* "gpu" or "cpu" */
    char device[128];
    char attn_kernel[128];
    char gemm[128];       /* the GEMM precision; with --gemm fp8:LIST, which GEMMs are FP8 and which BF16 */
    int tokens, heads, hidden, repeat, warmup;
    h3_op_row rows[REPORT_MAX_ROWS];
    int n_rows;
    double total_ms;      /* median of the whole block, ops launched one by one with events between */
    double graph_ms;      /* median of the whole block replayed as one CUDA graph, 0 if not run */
    report_check checks[REPORT_MAX_CHECKS];
    int n_checks;
    double peak_mem_gb;   /* device memory in use at peak beyond the weights, 0 if unknown */
    char checks_not_run[96]; /* why no check ran ("" when the checks ran): printed, and JSON all_pass is null */
    char config[128];     /* the block's shapes, "hidden 5376, heads 56 x 128, ..." */
    int h3_config;        /* 1: the published H3 block's shapes; 0: another (e.g. tiny) config, flagged */
    long nonfinite;       /* NaN/Inf values in the block's output (written only with --allow-nonfinite) */
    char nonfinite_stage[48]; /* the first stage whose output held one ("" if none or not found) */
} report;

h3_op_row *report_add_row(report *r, const char *name, double ms, double flops, double bytes);
report_check *report_add_check(report *r, const char *stage, const char *what);
/* 1 unless an asserted check failed (also when no check ran: see
 * checks_not_run, which the printed and JSON reports state instead). */
int report_all_pass(const report *r);
void report_print(const report *r, FILE *f);
/* Written beside path and renamed over it: a failure leaves no partial file. */
int report_write_json(const report *r, const char *path, char *err, size_t errlen);

#endif
