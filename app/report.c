/* report.c — prints the per-op table and writes it as JSON (json-c). */
#include "report.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

report_row *report_add_row(report *r, const char *name, double ms, double flops, double bytes)
{
    if (r->n_rows >= REPORT_MAX_ROWS) return NULL;
    report_row *row = &r->rows[r->n_rows++];
    memset(row, 0, sizeof *row);
    snprintf(row->name, sizeof row->name, "%s", name);
    row->ms = ms;
    row->flops = flops;
    row->bytes = bytes;
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
static const char *row_check(const report *r, const report_row *row)
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
        const report_row *row = &r->rows[i];
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

int report_write_json(const report *r, const char *path, char *err, size_t errlen)
{
    json_object *root = json_object_new_object();
    json_object_object_add(root, "path", json_object_new_string(r->path));
    json_object_object_add(root, "device", json_object_new_string(r->device));
    json_object_object_add(root, "attention_kernel", json_object_new_string(r->attn_kernel));
    json_object_object_add(root, "gemm", json_object_new_string(r->gemm));
    json_object_object_add(root, "tokens", json_object_new_int(r->tokens));
    json_object_object_add(root, "repeat", json_object_new_int(r->repeat));
    json_object_object_add(root, "total_ms", json_object_new_double(r->total_ms));
    json_object_object_add(root, "graph_ms", json_object_new_double(r->graph_ms));
    json_object_object_add(root, "peak_mem_gb", json_object_new_double(r->peak_mem_gb));
    json_object_object_add(root, "config", json_object_new_string(r->config));
    json_object_object_add(root, "h3_config", json_object_new_boolean(r->h3_config));
    json_object_object_add(root, "nonfinite_output", json_object_new_int64(r->nonfinite));
    json_object_object_add(root, "nonfinite_first_stage",
                           r->nonfinite_stage[0] ? json_object_new_string(r->nonfinite_stage) : NULL);
    json_object *stages = json_object_new_array();
    for (int i = 0; i < r->n_rows; i++) {
        const report_row *row = &r->rows[i];
        json_object *s = json_object_new_object();
        json_object_object_add(s, "name", json_object_new_string(row->name));
        json_object_object_add(s, "ms", json_object_new_double(row->ms));
        json_object_object_add(s, "flops", json_object_new_double(row->flops));
        json_object_object_add(s, "bytes", json_object_new_double(row->bytes));
        if (row->ms > 0 && row->flops > 0)
            json_object_object_add(s, "tflops", json_object_new_double(row->flops / (row->ms * 1e-3) / 1e12));
        if (row->ms > 0 && row->bytes > 0)
            json_object_object_add(s, "gbps", json_object_new_double(row->bytes / (row->ms * 1e-3) / 1e9));
        if (row->ceiling > 0) json_object_object_add(s, "ceiling", json_object_new_double(row->ceiling));
        if (row->once) /* "once_per": how often it runs (not part of the block total) */
            json_object_object_add(s, "once_per",
                                   json_object_new_string(row->once == REPORT_ONCE_SEQUENCE ? "sequence" : "timestep"));
        json_object_object_add(s, "check", json_object_new_string(row_check(r, row)));
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
        json_object_object_add(o, "tol_rms", json_object_new_double(c->tol_rms));
        json_object_object_add(o, "tol_max", json_object_new_double(c->tol_max));
        json_object_object_add(o, "nonfinite", json_object_new_int64(c->nonfinite));
        json_object_object_add(o, "count", json_object_new_int64(c->count));
        json_object_object_add(o, "asserted", json_object_new_boolean(c->asserted));
        json_object_object_add(o, "pass", json_object_new_boolean(c->pass));
        json_object_array_add(checks, o);
    }
    /* no check ran: null, never "all_pass": true over nothing */
    if (r->checks_not_run[0]) {
        json_object_put(checks);
        json_object_object_add(root, "checks", NULL);
        json_object_object_add(root, "all_pass", NULL);
        json_object_object_add(root, "checks_not_run", json_object_new_string(r->checks_not_run));
    } else {
        json_object_object_add(root, "checks", checks);
        json_object_object_add(root, "all_pass", json_object_new_boolean(report_all_pass(r)));
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int rc = json_object_to_file_ext(tmp, root, JSON_C_TO_STRING_PRETTY);
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
