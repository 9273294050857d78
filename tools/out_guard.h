/* out_guard.h — the generators' output guard: an existing file is kept
 * unless --force. (gen_weights --config tiny run at the repository root would
 * otherwise replace the 1.29 GB weights/block0.safetensors with a tiny block,
 * and the next tools/run.sh would time that.) */
#ifndef H3_OUT_GUARD_H
#define H3_OUT_GUARD_H

#include <stdio.h>
#include <sys/stat.h>

/* 1 (after one line on stderr) when path exists and force is not set. */
static inline int refuse_existing(const char *prog, const char *path, int force)
{
    struct stat sb;
    if (force || lstat(path, &sb) != 0) return 0;
    fprintf(stderr, "%s: %s exists; not overwritten (--force replaces it)\n", prog, path);
    return 1;
}

#endif
