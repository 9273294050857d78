/* files.c — dit_block's inputs and outputs checked before any work (files.h). */
#define _POSIX_C_SOURCE 200809L
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

/* What a path names: the file itself when it exists, else the directory it
 * would be created in and its last name there. */
typedef struct {
    const char *flag, *path;
    int exists;
    dev_t dev;
    ino_t ino;
    const char *base; /* !exists: the last name */
} file_id;

static int same_file(const file_id *a, const file_id *b)
{
    return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino && (a->exists || !strcmp(a->base, b->base));
}

static const char *kind(mode_t m)
{
    return S_ISFIFO(m) ? "FIFO" : S_ISCHR(m) ? "character device" : S_ISBLK(m) ? "block device"
                                               : S_ISSOCK(m) ? "socket" : "special file";
}

/* An output path: usable, a regular file or absent, in a directory where a
 * file can be created. Fills id. */
static int check_output(const char *flag, const char *path, file_id *id, char *err, size_t errlen)
{
    *id = (file_id){.flag = flag, .path = path};
    const size_t n = strlen(path);
    if (!n) {
        snprintf(err, errlen, "%s: empty file name", flag);
        return -1;
    }
    if (n >= PATH_MAX) {
        snprintf(err, errlen, "%s: path of %zu characters is too long", flag, n);
        return -1;
    }
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            snprintf(err, errlen, "%s: %s is a directory", flag, path);
            return -1;
        }
        if (!S_ISREG(sb.st_mode)) { /* written beside it and renamed over it, it would be replaced */
            snprintf(err, errlen, "%s: %s is a %s, not a regular file (not replaced)", flag, path, kind(sb.st_mode));
            return -1;
        }
        id->exists = 1;
        id->dev = sb.st_dev;
        id->ino = sb.st_ino;
    } else if (errno == ENOENT && path[n - 1] != '/') {
        const char *slash = strrchr(path, '/');
        char dir[PATH_MAX];
        if (!slash)
            snprintf(dir, sizeof dir, ".");
        else
            snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
        const int found = stat(dir, &sb) == 0, why = errno;
        if (!found || !S_ISDIR(sb.st_mode)) {
            snprintf(err, errlen, "%s: %s: directory %s %s", flag, path, dir,
                     found ? "is not a directory" : why == ENOENT ? "does not exist" : strerror(why));
            return -1;
        }
        id->dev = sb.st_dev;
        id->ino = sb.st_ino;
        id->base = slash ? slash + 1 : path;
    } else {
        snprintf(err, errlen, "%s: %s: %s", flag, path, path[n - 1] == '/' ? "names a directory" : strerror(errno));
        return -1;
    }
    /* Can a file be made there, under a name as long as the writers'
     * temporaries ("<path>.tmp.<pid>...")? (a read-only or full directory,
     * no permission, a name too long) */
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof probe, "%s.tmp.%ld.probe", path, (long)getpid());
    const int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s: cannot create a file there: %s", flag, path, strerror(errno));
        return -1;
    }
    close(fd);
    unlink(probe);
    return 0;
}

int check_files(const cli_options *o, char *err, size_t errlen)
{
    file_id out[2], in[2];
    int nout = 0, nin = 0;
    const struct {
        const char *flag, *path;
    } outs[2] = {{"--output", o->output}, {"--json", o->json}}, ins[2] = {{"--weights", o->weights}, {"--input", o->input}};
    for (int i = 0; i < 2; i++)
        if (outs[i].path && check_output(outs[i].flag, outs[i].path, &out[nout++], err, errlen)) return -1;
    for (int i = 0; i < 2; i++) { /* an input that cannot be stat'ed is the loader's to report */
        struct stat sb;
        if (ins[i].path && stat(ins[i].path, &sb) == 0)
            in[nin++] = (file_id){.flag = ins[i].flag, .path = ins[i].path, .exists = 1, .dev = sb.st_dev, .ino = sb.st_ino};
    }
    for (int i = 0; i < nout; i++) {
        for (int j = 0; j < nin; j++)
            if (same_file(&out[i], &in[j])) {
                snprintf(err, errlen, "%s %s is the same file as %s %s: refusing to overwrite an input", out[i].flag,
                         out[i].path, in[j].flag, in[j].path);
                return -1;
            }
        for (int j = 0; j < i; j++)
            if (same_file(&out[i], &out[j])) {
                snprintf(err, errlen, "%s %s and %s %s name the same file", out[j].flag, out[j].path, out[i].flag,
                         out[i].path);
                return -1;
            }
    }
    return 0;
}
