/* opts.c — the tools' shared option parsing (opts.h) and the --version lines
 * (version.h). */
#define _GNU_SOURCE /* getopt_long */
#include "opts.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "version.h"

#define MAX_FLAGS 62
enum { ID_HELP = 'h', ID_VERSION = 0x100, ID_FLAG = 0x200 }; /* getopt_long's val: ID_FLAG + index */

void h3_version_print(FILE *f, const char *prog)
{
    fprintf(f, "%s (h3block) %s\ncommit %s\n", prog, h3_version, h3_commit);
    if (h3_cuda_compiler[0])
        fprintf(f, "built with CUDA %s for %s\n", h3_cuda_compiler, h3_cuda_targets);
    else
        fprintf(f, "built without CUDA (CPU only)\n");
}

_Noreturn void h3_cli_fail(const char *prog, const char *fmt, ...)
{
    char msg[1024], line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s (see --help)\n", prog, st_escape(line, sizeof line, msg, strlen(msg), 0));
    exit(2);
}

unsigned long long h3_cli_uint(const char *prog, const char *flag, const char *v, unsigned long long lo,
                               unsigned long long hi)
{
    if (!v || !*v) h3_cli_fail(prog, "%s needs a value", flag);
    const char *d = v + (*v == '-' || *v == '+'); /* a sign is read so that "-1" is out of range, not junk */
    if (!*d || strspn(d, "0123456789") != strlen(d)) h3_cli_fail(prog, "%s: '%s' is not an integer", flag, v);
    errno = 0;
    const unsigned long long x = strtoull(d, NULL, 10);
    if (errno == ERANGE || (*v == '-' && x) || x < lo || x > hi)
        h3_cli_fail(prog, "%s: %s is out of range %llu..%llu", flag, v, lo, hi);
    return x;
}

int h3_cli_choice(const char *prog, const char *flag, const char *v, const char *const *choices)
{
    char list[256] = "";
    size_t n = 0;
    for (int i = 0; choices[i]; i++) {
        if (!strcmp(v, choices[i])) return i;
        n += (size_t)snprintf(list + n, n < sizeof list ? sizeof list - n : 0, "%s%s", i ? ", " : "", choices[i]);
    }
    h3_cli_fail(prog, "%s: '%s' is not one of %s", flag, v, list);
}

/* The flag as written: the word up to '=' ("--tokens" of "--tokens=8"). */
static void flag_word(char *out, size_t len, const char *word)
{
    snprintf(out, len, "%.*s", (int)strcspn(word, "="), word);
}

int h3_cli_next(const h3_cli *c, int argc, char **argv, const char **value)
{
    struct option lo[MAX_FLAGS + 3];
    int n = 0;
    for (; c->flags[n].name; n++) {
        if (n == MAX_FLAGS) { /* the tool's table, not the user: an internal error */
            fprintf(stderr, "%s: internal error: more than %d flags\n", c->prog, MAX_FLAGS);
            exit(1);
        }
        lo[n] = (struct option){c->flags[n].name, c->flags[n].value ? required_argument : no_argument, NULL,
                                ID_FLAG + n};
    }
    lo[n] = (struct option){"help", no_argument, NULL, ID_HELP};
    lo[n + 1] = (struct option){"version", no_argument, NULL, ID_VERSION};
    lo[n + 2] = (struct option){NULL, 0, NULL, 0};

    *value = NULL;
    opterr = 0;
    const int at = optind; /* the word getopt_long reads now: long flags never share a word */
    /* "-": non-options come back in order as 1 (no permuting); ":": a missing value is ':' */
    const int r = getopt_long(argc, argv, "-:h", lo, NULL);
    const char *word = at < argc ? argv[at] : "";
    char fw[256];
    flag_word(fw, sizeof fw, word);
    if (r == -1) {
        if (at < argc) h3_cli_fail(c->prog, "unexpected argument '%s'", word); /* "--" and what follows it */
        return -1;
    }
    if (r == 1) h3_cli_fail(c->prog, "unexpected argument '%s'", optarg);
    if (r == ':') h3_cli_fail(c->prog, "%s needs a value", fw);
    if (r == '?') {
        if (optopt > 0 && optopt < 0x100 && word[1] != '-') h3_cli_fail(c->prog, "unknown flag '-%c'", optopt);
        if (strchr(word, '='))
            for (int i = 0; i < n + 2; i++)
                if (lo[i].has_arg == no_argument && !strncmp(fw, "--", 2) && !strcmp(fw + 2, lo[i].name))
                    h3_cli_fail(c->prog, "%s takes no value", fw);
        h3_cli_fail(c->prog, "unknown flag '%s'", fw);
    }
    /* getopt_long takes any unambiguous prefix of a flag: refuse it, naming the flag meant */
    const char *name = r == ID_HELP ? "help" : r == ID_VERSION ? "version" : c->flags[r - ID_FLAG].name;
    if (!(r == ID_HELP && !strcmp(word, "-h")) && (strncmp(fw, "--", 2) || strcmp(fw + 2, name)))
        h3_cli_fail(c->prog, "unknown flag '%s' (flags are spelt in full: --%s)", fw, name);
    if (r == ID_HELP) {
        fputs(c->usage, stdout);
        exit(0);
    }
    if (r == ID_VERSION) {
        h3_version_print(stdout, c->prog);
        if (c->version_extra) c->version_extra(stdout);
        exit(0);
    }
    /* a value as the next word that starts with "--" is the next flag */
    if (optarg && optarg == argv[at + 1] && !strncmp(optarg, "--", 2)) h3_cli_fail(c->prog, "%s needs a value", fw);
    *value = optarg;
    return r - ID_FLAG;
}
