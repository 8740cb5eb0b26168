// types.c - the type trait table: one row per ggml type id (spec §2).
//
// This is the one immutable global of the library. Every id a GGUF file can
// name has a row, including removed and intermediate ones, so that a file
// holding a type we cannot compute with can still be described.
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "retrograd.h"

#define S RG_ROLE_STORAGE
#define I RG_ROLE_INTERMEDIATE
#define X RG_ROLE_INVALID

static const rg_type_traits type_table[RG_TYPE_COUNT] = {
    //                  name       block bytes role quantized
    [RG_TYPE_F32]     = {"f32",      1,   4,   S, false},
    [RG_TYPE_F16]     = {"f16",      1,   2,   S, false},
    [RG_TYPE_Q4_0]    = {"q4_0",     32,  18,  S, true},
    [RG_TYPE_Q4_1]    = {"q4_1",     32,  20,  S, true},
    [4]               = {"q4_2 (removed)", 0, 0, X, false},
    [5]               = {"q4_3 (removed)", 0, 0, X, false},
    [RG_TYPE_Q5_0]    = {"q5_0",     32,  22,  S, true},
    [RG_TYPE_Q5_1]    = {"q5_1",     32,  24,  S, true},
    [RG_TYPE_Q8_0]    = {"q8_0",     32,  34,  S, true},
    [RG_TYPE_Q8_1]    = {"q8_1",     32,  36,  I, true},
    [RG_TYPE_Q2_K]    = {"q2_K",     256, 84,  S, true},
    [RG_TYPE_Q3_K]    = {"q3_K",     256, 110, S, true},
    [RG_TYPE_Q4_K]    = {"q4_K",     256, 144, S, true},
    [RG_TYPE_Q5_K]    = {"q5_K",     256, 176, S, true},
    [RG_TYPE_Q6_K]    = {"q6_K",     256, 210, S, true},
    [RG_TYPE_Q8_K]    = {"q8_K",     256, 292, I, true},
    [RG_TYPE_IQ2_XXS] = {"iq2_xxs",  256, 66,  S, true},
    [RG_TYPE_IQ2_XS]  = {"iq2_xs",   256, 74,  S, true},
    [RG_TYPE_IQ3_XXS] = {"iq3_xxs",  256, 98,  S, true},
    [RG_TYPE_IQ1_S]   = {"iq1_s",    256, 50,  S, true},
    [RG_TYPE_IQ4_NL]  = {"iq4_nl",   32,  18,  S, true},
    [RG_TYPE_IQ3_S]   = {"iq3_s",    256, 110, S, true},
    [RG_TYPE_IQ2_S]   = {"iq2_s",    256, 82,  S, true},
    [RG_TYPE_IQ4_XS]  = {"iq4_xs",   256, 136, S, true},
    [RG_TYPE_I8]      = {"i8",       1,   1,   S, false},
    [RG_TYPE_I16]     = {"i16",      1,   2,   S, false},
    [RG_TYPE_I32]     = {"i32",      1,   4,   S, false},
    [RG_TYPE_I64]     = {"i64",      1,   8,   S, false},
    [RG_TYPE_F64]     = {"f64",      1,   8,   S, false},
    [RG_TYPE_IQ1_M]   = {"iq1_m",    256, 56,  S, true},
    [RG_TYPE_BF16]    = {"bf16",     1,   2,   S, false},
    [31]              = {"q4_0_4_4 (removed)", 0, 0, X, false},
    [32]              = {"q4_0_4_8 (removed)", 0, 0, X, false},
    [33]              = {"q4_0_8_8 (removed)", 0, 0, X, false},
    [RG_TYPE_TQ1_0]   = {"tq1_0",    256, 54,  S, true},
    [RG_TYPE_TQ2_0]   = {"tq2_0",    256, 66,  S, true},
    [36]              = {"iq4_nl_4_4 (removed)", 0, 0, X, false},
    [37]              = {"iq4_nl_4_8 (removed)", 0, 0, X, false},
    [38]              = {"iq4_nl_8_8 (removed)", 0, 0, X, false},
    [RG_TYPE_MXFP4]   = {"mxfp4",    32,  17,  S, true},
    [RG_TYPE_NVFP4]   = {"nvfp4",    64,  36,  S, true},
    [RG_TYPE_Q1_0]    = {"q1_0",     128, 18,  S, true},
    [RG_TYPE_Q2_0]    = {"q2_0",     64,  18,  S, true},
};

static const rg_type_traits unknown_type = {"unknown", 0, 0, X, false};

const rg_type_traits *rg_type_get(uint32_t type) {
    if (type >= RG_TYPE_COUNT) return &unknown_type;
    return &type_table[type];
}

size_t rg_type_row_size(uint32_t type, int64_t ne0) {
    const rg_type_traits *t = rg_type_get(type);
    if (t->block_size <= 0 || ne0 < 0 || ne0 % t->block_size) return 0;
    return (size_t)(ne0 / t->block_size) * t->type_size;
}

int rg_type_from_name(const char *name) {
    for (int i = 0; i < RG_TYPE_COUNT; i++) {
        if (type_table[i].role == RG_ROLE_INVALID) continue;
        if (strcasecmp(type_table[i].name, name) == 0) return i;
    }
    return -1;
}
