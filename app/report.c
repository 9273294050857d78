/* report.c — prints the per-op table and writes it as JSON (json-c), in the
 * format docs/report-format.md describes. */
#include "report.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "version.h"

h3_op_row *report_add_row(report *r, const char *name, double ms, double flops, double bytes)
{
    if (r->n_rows >= REPORT_MAX_ROWS) return NULL;
    h3_op_row *row = &r->rows[r->n_rows++];
    h3_op_row_init(row, name, ms, flops, bytes);
    return row;
}

report_check *report_add_check(report *r, const char *stage, const char *what)
{
    if (r->n_checks >= REPORT_MAX_CHECKS) return NULL;
    report_check *c = &r->checks[r->n_checks++];
    memset(c, 0, sizeof *c);
    snprintf(c->stage, sizeof c->stage, "%s", stage);
    snprintf(c->what, sizeof c->what, "%s", what);
    return c;
}

int report_all_pass(const report *r)
{
    for (int i = 0; i < r->n_checks; i++)
        if (r->checks[i].asserted && !r->checks[i].pass) return 0;
    return 1;
}

/* A row covers the stages named in it ("a+b"); its check column summarises
 * the asserted checks of those stages. */
static const char *row_check(const report *r, const h3_op_row *row)
{
    int any = 0, fail = 0;
    char names[64];
    snprintf(names, sizeof names, "%s", row->name);
    for (char *tok = strtok(names, "+"); tok; tok = strtok(NULL, "+"))
        for (int i = 0; i < r->n_checks; i++)
            if (!strcmp(r->checks[i].stage, tok) && r->checks[i].asserted) {
                any = 1;
                if (!r->checks[i].pass) fail = 1;
            }
    return !any ? "-" : fail ? "FAIL" : "pass";
}

void report_print(const report *r, FILE *f)
{
    fprintf(f, "\n%-28s %10s %7s %14s %8s  %s\n", "stage", "median ms", "%", "rate", "of peak", "check");
    fprintf(f, "%-28s %10s %7s %14s %8s  %s\n", "----------------------------", "---------", "------",
            "-------------", "-------", "-----");
    double sum = 0;
    for (int i = 0; i < r->n_rows; i++)
        if (!r->rows[i].once) sum += r->rows[i].ms;
    for (int i = 0; i < r->n_rows; i++) {
        const h3_op_row *row = &r->rows[i];
        char rate[32] = "-", share[16], peak[16] = "-";
        double v = 0;
        if (row->ms > 0 && row->flops > 0) {
            v = row->flops / (row->ms * 1e-3) / (r->path[0] == 'g' ? 1e12 : 1e9);
            snprintf(rate, sizeof rate, "%.1f %s", v, r->path[0] == 'g' ? "TFLOPS" : "GFLOPS");
        } else if (row->ms > 0 && row->bytes > 0) {
            v = row->bytes / (row->ms * 1e-3) / 1e9;
            snprintf(rate, sizeof rate, "%.0f GB/s", v);
        }
        if (v > 0 && row->ceiling > 0) snprintf(peak, sizeof peak, "%.0f%%", 100.0 * v / row->ceiling);
        if (row->once)
            snprintf(share, sizeof share, "once");
        else
            snprintf(share, sizeof share, "%.1f%%", sum > 0 ? 100.0 * row->ms / sum : 0.0);
        fprintf(f, "%-28s %10.3f %7s %14s %8s  %s\n", row->name, row->ms, share, rate, peak, row_check(r, row));
    }
    fprintf(f, "%-28s %10.3f\n", "block total", r->total_ms);
    if (r->graph_ms > 0) fprintf(f, "%-28s %10.3f\n", "block total (CUDA graph)", r->graph_ms);
    fprintf(f, "\npath %s, device %s, attention %s, gemm %s, tokens %d, repeat %d\n", r->path, r->device,
            r->attn_kernel, r->gemm, r->tokens, r->repeat);
    fprintf(f, "config %s%s\n", r->config, r->h3_config ? " (the H3 block)" : ": NOT the H3 block's shapes");
    if (r->peak_mem_gb > 0) fprintf(f, "peak device memory beyond the weights: %.2f GB\n", r->peak_mem_gb);
    if (r->nonfinite)
        fprintf(f, "output: %ld non-finite values (NaN/Inf), first made by stage %s\n", r->nonfinite,
                r->nonfinite_stage[0] ? r->nonfinite_stage : "(not found)");
    if (r->checks_not_run[0]) {
        fprintf(f, "\nchecks: not run (%s)\n", r->checks_not_run);
    } else if (r->n_checks) {
        fprintf(f, "\n%-20s %-24s %10s %10s %10s  %s\n", "check", "against", "rel RMS", "max abs", "tol RMS",
                "result");
        for (int i = 0; i < r->n_checks; i++) {
            const report_check *c = &r->checks[i];
            const char *res = !c->asserted ? "reported" : c->pass ? "pass" : "FAIL";
            fprintf(f, "%-20s %-24s %10.3g %10.3g %10.3g  %s\n", c->stage, c->what, c->rel_rms, c->max_abs,
                    c->asserted ? c->tol_rms : 0.0, res);
            if (c->nonfinite) fprintf(f, "    %ld non-finite values (in the output or the reference)\n", c->nonfinite);
            if (c->asserted && !c->pass && c->detail[0]) fprintf(f, "    %s\n", c->detail);
        }
    }
}

/* JSON values for "not applicable": null, never 0 (docs/report-format.md). */
static json_object *num_or_null(double v, int applies) { return applies ? json_object_new_double(v) : NULL; }
static json_object *int_or_null(long long v, int applies) { return applies ? json_object_new_int64(v) : NULL; }
static json_object *str_or_null(const char *s) { return s && s[0] ? json_object_new_string(s) : NULL; }

/* A CUDA API version (12080) as "12.8"; null when unknown. */
static json_object *cuda_version(int v)
{
    char b[32];
    snprintf(b, sizeof b, "%d.%d", v / 1000, v % 1000 / 10);
    return v > 0 ? json_object_new_string(b) : NULL;
}

static json_object *file_json(const report_file *f)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "path", str_or_null(f->path));
    json_object_object_add(o, "file", str_or_null(f->file));
    json_object_object_add(o, "size_bytes", int_or_null(f->size, f->size >= 0));
    json_object_object_add(o, "header_fnv1a64", str_or_null(f->hash));
    return o;
}

/* What produced the report: the tool, its build, the command line, the date. */
static void add_provenance(json_object *root, const report *r)
{
    json_object_object_add(root, "format", json_object_new_string(REPORT_FORMAT));
    json_object *tool = json_object_new_object();
    json_object_object_add(tool, "name", json_object_new_string(r->tool ? r->tool : "dit_block"));
    json_object_object_add(tool, "version", json_object_new_string(h3_version));
    json_object_object_add(tool, "commit", json_object_new_string(h3_commit));
    json_object_object_add(tool, "cuda_compiler", str_or_null(h3_cuda_compiler));
    json_object_object_add(tool, "cuda_targets", str_or_null(h3_cuda_targets));
    json_object_object_add(root, "tool", tool);
    json_object *argv = json_object_new_array();
    for (int i = 0; i < r->argc; i++) json_object_array_add(argv, json_object_new_string(r->argv[i]));
    json_object_object_add(root, "argv", argv);
    json_object_object_add(root, "created_utc", str_or_null(r->created_utc));
    json_object_object_add(root, "seed", int_or_null((long long)r->seed, r->synthetic));
    json_object *w = file_json(&r->weights);
    json_object_object_add(w, "layout", str_or_null(r->layout));
    json_object_object_add(root, "weights", w);
    json_object *in = file_json(&r->inputs);
    json_object_object_add(in, "source", json_object_new_string(r->synthetic ? "synthetic" : "file"));
    json_object_object_add(in, "profile", r->synthetic ? str_or_null(r->profile) : NULL);
    json_object_object_add(root, "inputs", in);
}

static json_object *gpu_json(const report *r)
{
    if (!r->has_gpu) return NULL;
    const report_gpu *g = &r->gpu;
    json_object *o = json_object_new_object();
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
    json_object_object_add(o, "name", json_object_new_string(g->name));
    json_object_object_add(o, "compute_capability", json_object_new_string(cc));
    json_object_object_add(o, "sm_count", json_object_new_int(g->sms));
    json_object_object_add(o, "sm_clock_mhz", int_or_null(g->sm_clock_mhz, g->sm_clock_mhz > 0));
    json_object_object_add(o, "memory_clock_mhz", int_or_null(g->mem_clock_mhz, g->mem_clock_mhz > 0));
    json_object_object_add(o, "memory_gb", num_or_null(g->mem_gb, g->mem_gb > 0));
    json_object_object_add(o, "driver_version", str_or_null(g->driver));
    json_object_object_add(o, "driver_cuda_version", cuda_version(g->driver_cuda));
    json_object_object_add(o, "cuda_runtime_version", cuda_version(g->cuda_runtime));
    char lt[32];
    snprintf(lt, sizeof lt, "%lu.%lu.%lu", g->cublaslt / 10000, g->cublaslt / 100 % 100, g->cublaslt % 100);
    json_object_object_add(o, "cublaslt_version", g->cublaslt ? json_object_new_string(lt) : NULL);
    return o;
}

int report_write_json(const report *r, const char *path, char *err, size_t errlen)
{
    json_object *root = json_object_new_object();
    add_provenance(root, r);
    json_object_object_add(root, "path", json_object_new_string(r->path));
    json_object_object_add(root, "device", json_object_new_string(r->device));
    json_object_object_add(root, "gpu", gpu_json(r));
    json_object_object_add(root, "attention_kernel", json_object_new_string(r->attn_kernel));
    json_object_object_add(root, "gemm", json_object_new_string(r->gemm));
    json_object_object_add(root, "config", json_object_new_string(r->config));
    json_object_object_add(root, "h3_config", json_object_new_boolean(r->h3_config));
    json_object_object_add(root, "tokens", json_object_new_int(r->tokens));
    json_object_object_add(root, "repeat", json_object_new_int(r->repeat));
    json_object_object_add(root, "warmup", json_object_new_int(r->warmup));
    json_object_object_add(root, "total_ms", json_object_new_double(r->total_ms));
    json_object_object_add(root, "graph_ms", num_or_null(r->graph_ms, r->graph_ms > 0));
    json_object_object_add(root, "peak_mem_gb", num_or_null(r->peak_mem_gb, r->peak_mem_gb > 0));
    json_object_object_add(root, "nonfinite_output", json_object_new_int64(r->nonfinite));
    json_object_object_add(root, "nonfinite_first_stage", str_or_null(r->nonfinite_stage));
    json_object *stages = json_object_new_array();
    for (int i = 0; i < r->n_rows; i++) {
        const h3_op_row *row = &r->rows[i];
        const int fl = row->flops > 0, by = row->bytes > 0, timed = row->ms > 0;
        const char *check = row_check(r, row);
        json_object *s = json_object_new_object();
        json_object_object_add(s, "name", json_object_new_string(row->name));
        json_object_object_add(s, "ms", json_object_new_double(row->ms));
        json_object_object_add(s, "flops", num_or_null(row->flops, fl));
        json_object_object_add(s, "bytes", num_or_null(row->bytes, by));
        json_object_object_add(s, "tflops", num_or_null(row->flops / (row->ms * 1e-3) / 1e12, fl && timed));
        json_object_object_add(s, "gb_per_s", num_or_null(row->bytes / (row->ms * 1e-3) / 1e9, by && timed));
        /* the ceiling is of the rate the table shows: TFLOPS where the row has flops, else GB/s */
        json_object_object_add(s, "peak_tflops", num_or_null(row->ceiling, fl && row->ceiling > 0));
        json_object_object_add(s, "peak_gb_per_s", num_or_null(row->ceiling, !fl && by && row->ceiling > 0));
        json_object_object_add(s, "once_per",
                               !row->once ? NULL
                                          : json_object_new_string(row->once == H3_ONCE_SEQUENCE ? "sequence"
                                                                                                      : "timestep"));
        json_object_object_add(s, "check", strcmp(check, "-") ? json_object_new_string(check) : NULL);
        json_object_array_add(stages, s);
    }
    json_object_object_add(root, "stages", stages);
    json_object *checks = json_object_new_array();
    for (int i = 0; i < r->n_checks; i++) {
        const report_check *c = &r->checks[i];
        json_object *o = json_object_new_object();
        json_object_object_add(o, "stage", json_object_new_string(c->stage));
        json_object_object_add(o, "against", json_object_new_string(c->what));
        json_object_object_add(o, "rel_rms", json_object_new_double(c->rel_rms));
        json_object_object_add(o, "max_abs", json_object_new_double(c->max_abs));
        json_object_object_add(o, "ref_max", json_object_new_double(c->ref_max));
        /* a check that is reported only has no tolerance and no verdict */
        json_object_object_add(o, "tol_rms", num_or_null(c->tol_rms, c->asserted));
        json_object_object_add(o, "tol_max", num_or_null(c->tol_max, c->asserted));
        json_object_object_add(o, "nonfinite", json_object_new_int64(c->nonfinite));
        json_object_object_add(o, "count", json_object_new_int64(c->count));
        json_object_object_add(o, "asserted", json_object_new_boolean(c->asserted));
        json_object_object_add(o, "pass", c->asserted ? json_object_new_boolean(c->pass) : NULL);
        json_object_object_add(o, "detail", c->asserted && !c->pass ? str_or_null(c->detail) : NULL);
        json_object_array_add(checks, o);
    }
    /* no check ran: null, never "all_pass": true over nothing */
    if (r->checks_not_run[0]) {
        json_object_put(checks);
        checks = NULL;
    }
    json_object_object_add(root, "checks", checks);
    json_object_object_add(root, "all_pass", checks ? json_object_new_boolean(report_all_pass(r)) : NULL);
    json_object_object_add(root, "checks_not_run", str_or_null(r->checks_not_run));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int rc = json_object_to_file_ext(tmp, root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
    json_object_put(root);
    if (rc) {
        /* json-c's message ends in a newline; keep our error one line */
        const char *why = json_util_get_last_err();
        int n = why ? (int)strcspn(why, "\n") : 0;
        snprintf(err, errlen, "%s: cannot write JSON report: %.*s", path, n, why ? why : "");
        remove(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}
