/* files.h — dit_block's files, checked before anything is loaded or run.
 *
 * Every output (--output, --json) must name a regular file or nothing, in an
 * existing directory where a file can be created (tried: a probe file is
 * made and removed), with a usable name; and no output may be the same file
 * as an input (--weights, --input) or as the other output. "The same file"
 * is the same device and inode, so hard links, symlinks and other spellings
 * of one path count; an output that does not exist yet is its directory's
 * device and inode plus its last name. Inputs are not opened here: the
 * loader refuses a FIFO or device without blocking (st_open). */
#ifndef H3_FILES_H
#define H3_FILES_H

#include <stddef.h>

#include "cli.h"

/* 0, or -1 with one line in err (a user error: exit 2). */
int check_files(const cli_options *o, char *err, size_t errlen);

#endif
