/* opts.h — the command-line convention of every h3block tool, on glibc's
 * getopt_long:
 *   --flag VALUE and --flag=VALUE; flags without a value take none;
 *   -h, --help: the tool's usage on stdout, exit 0;
 *   --version: h3_version_print and the tool's own lines (the CUDA libraries
 *     it links), exit 0;
 *   every usage error: one line on stderr, "PROG: WHAT (see --help)", with
 *     the values from the command line escaped, exit 2.
 * Stricter than getopt_long alone: a flag is spelt in full (no abbreviations:
 * --tok is not --tokens), a value given as the next word may not start with
 * "--" (that is the next flag, so the value is missing), and there are no
 * positional arguments. */
#ifndef H3_OPTS_H
#define H3_OPTS_H

#include <stdio.h>

typedef struct {
    const char *name; /* without the dashes: "weights" */
    int value;        /* 1: the flag takes a value */
} h3_flag;

typedef struct {
    const char *prog;               /* the tool's name, first word of every message */
    const char *usage;              /* the --help text */
    const h3_flag *flags;           /* terminated by {NULL, 0} */
    void (*version_extra)(FILE *f); /* the tool's own --version lines; may be NULL */
} h3_cli;

/* The index in c->flags of the next flag on the command line, its value in
 * *value (NULL for a flag without one); -1 when every argument is read.
 * --help, --version and usage errors end the process here. Parses argv once,
 * front to back (getopt_long's global optind). */
int h3_cli_next(const h3_cli *c, int argc, char **argv, const char **value);

/* One usage-error line, "PROG: <fmt ...> (see --help)", escaped (st_escape),
 * and exit 2. */
_Noreturn void h3_cli_fail(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A non-negative decimal integer in [lo, hi] (digits, an optional leading
 * '+'); anything else is a usage error naming flag: "needs a value", "'x' is
 * not an integer", "N is out of range LO..HI". */
unsigned long long h3_cli_uint(const char *prog, const char *flag, const char *v, unsigned long long lo,
                               unsigned long long hi);

/* The index of v in choices (NULL-terminated); anything else is a usage
 * error: "FLAG: 'v' is not one of a, b, c". Case-sensitive. */
int h3_cli_choice(const char *prog, const char *flag, const char *v, const char *const *choices);

#endif
