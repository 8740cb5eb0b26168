// quant_fixture.h - a [per_row, rows] tensor of a quantized type for the device tests
// (test_cuda_elementwise's GET_ROWS, test_cuda_loss_quant's heads): x quantized by the CPU's
// quantizer where the type has one, else random blocks whose f16 scale is 2^-7, so every value
// is finite and O(1) (the IQ1/IQ2/IQ3 types have no quantizer without an importance matrix).
// Returns malloc'd bytes, or NULL (said why) when the quantizer refuses.
#ifndef RG_TESTS_QUANT_FIXTURE_H
#define RG_TESTS_QUANT_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/rng.h"
#include "tensor/quant/quant.h"
#include "tensor/tensor.h"

static inline uint8_t *rg_test_quant_fixture(uint32_t type, const float *x, int64_t rows, int64_t per_row,
                                             uint64_t seed, const char *what) {
    const rg_type_traits *tt = rg_type_get(type);
    const size_t bytes = rg_type_row_size(type, per_row) * (size_t)rows;
    uint8_t *q = malloc(bytes ? bytes : 1);
    const rg_quant_ops *ops = rg_quant_get(type);
    if (!q) return NULL;
    if (ops && ops->quantize) {
        rg_error err = {0};
        if (rg_quantize(type, x, q, rows, per_row, NULL, what, &err) != RG_OK) {
            printf("    quantize %s: %s\n", tt->name, err.msg);
            free(q);
            return NULL;
        }
        return q;
    }
    for (size_t i = 0; i < bytes; i++) q[i] = (uint8_t)(rg_rng_u64(seed, 5, i) >> 24);
    for (size_t b = 0; b < bytes / tt->type_size; b++) {
        uint8_t *blk = q + b * tt->type_size;
        if (type == RG_TYPE_IQ1_M) {  // the f16 scale is the top nibbles of the four scale words at 48
            blk[49] &= 0x0F, blk[51] &= 0x0F, blk[53] &= 0x0F, blk[55] = (uint8_t)((blk[55] & 0x0F) | 0x20);
        } else {  // d f16 at byte 0 (IQ1_S, IQ2_*, IQ3_*)
            blk[0] = 0x00, blk[1] = 0x20;
        }
    }
    return q;
}

#endif
