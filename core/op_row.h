/* op_row.h — one timed op of a block run: the runtime measures it, the
 * report prints it and writes it to JSON. Header-only, no dependencies. */
#ifndef H3_OP_ROW_H
#define H3_OP_ROW_H

#include <stdio.h>
#include <string.h>

/* h3_op_row.once: how often a cached op runs */
enum { H3_ONCE_TIMESTEP = 1, H3_ONCE_SEQUENCE = 2 };

typedef struct {
    char name[48];  /* a stage name, or "a+b" for a fused kernel covering two stages */
    double ms;      /* median wall time */
    double flops;   /* arithmetic work (GEMMs, attention), 0 for memory-bound ops */
    double bytes;   /* minimum device-memory traffic, for GB/s */
    double ceiling; /* the device's peak for this row's rate (TFLOPS or GB/s), 0 if unknown */
    int once;       /* computed once and cached, not part of the block total: H3_ONCE_* */
} h3_op_row;

/* A row with these figures, no ceiling, run every time. */
static inline void h3_op_row_init(h3_op_row *row, const char *name, double ms, double flops, double bytes)
{
    memset(row, 0, sizeof *row);
    snprintf(row->name, sizeof row->name, "%s", name);
    row->ms = ms;
    row->flops = flops;
    row->bytes = bytes;
}

#endif
