/* regress_main.c — runs the fuzz target's checks (fuzz_safetensors.c) once on
 * every *.safetensors in a directory, without libFuzzer: the valid and
 * malformed fixtures and every saved fuzz_regress_* crash input must go
 * through st_open with the target's invariants holding (accepted files:
 * tensors inside the file and tiling its data; rejected files: one-line
 * error, nothing left allocated). Built with the normal compiler, so the
 * ASan/UBSan build checks them too.
 *
 * Run alone: ctest -R test_fuzz_regress   (or: build/tests/test_fuzz_regress tests/data) */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_fuzz_regress DIR\n");
        return 2;
    }
    DIR *d = opendir(argv[1]);
    if (!d) {
        perror(argv[1]);
        return 1;
    }
    int n = 0, n_regress = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!ends_with(e->d_name, ".safetensors")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        FILE *fp = fopen(path, "rb");
        if (!fp) {
            perror(path);
            return 1;
        }
        /* The fixtures are small (the largest header case is a length field
         * pointing past EOF, not a large file); 64 MiB is a safe cap. */
        size_t cap = 64u << 20, len = 0;
        uint8_t *buf = malloc(cap);
        if (!buf) return 1;
        len = fread(buf, 1, cap, fp);
        fclose(fp);
        printf("%s (%zu bytes)\n", e->d_name, len);
        fflush(stdout);
        LLVMFuzzerTestOneInput(buf, len); /* aborts with a message on a broken invariant */
        free(buf);
        n++;
        if (strncmp(e->d_name, "fuzz_regress_", 13) == 0) n_regress++;
    }
    closedir(d);
    printf("test_fuzz_regress: %d files (%d saved fuzz crashes), all handled cleanly\n", n, n_regress);
    return n > 0 ? 0 : 1;
}
