/* The fused int8 activation of the conv / depthwise epilogues (int8_ops.c, on the kernels of the
 * separate table step): a 256-entry table applied in place to outputs already requantized and
 * clamped, y = lut[(uint8_t)y], indexed by the output's bit pattern as the table step's tables
 * are (the `lut` field of ei_int8_conv_args and ei_dw_args; fuse_int8_activation.py builds
 * them in this order with ops/int8_tables.by_bits). The kernels call it on each block of
 * output they have just stored, while it is in cache; the tables are built at prepare (ops/int8_tables.py,
 * TFLite's PopulateLookupTable), so fused and separate table steps give the same bytes. */
#ifndef EI_LUT_H
#define EI_LUT_H

#include <stdint.h>

/* rows of n contiguous bytes, ys apart, starting at y */
void ei_lut_inplace(const int8_t *lut, int8_t *y, int64_t n, int64_t rows, int64_t ys);

#endif
