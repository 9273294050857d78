/* stage_checks.h — the stage checks of a GPU run, as the runtime's check
 * hook (runner.h): ctx is an h3_stage_check_ctx. */
#ifndef H3_STAGE_CHECKS_H
#define H3_STAGE_CHECKS_H

#include "block.h"
#include "cli.h"
#include "inputs.h"
#include "report.h"
#include "runner.h"

typedef struct {
    const cli_options *o; /* --check, --sample, --quiet */
    const h3_block *blk;
    const h3_inputs *in;
    report *r; /* the checks' results go here */
} h3_stage_check_ctx;

void h3_stage_checks(void *ctx, const h3_run_view *v);

#endif
