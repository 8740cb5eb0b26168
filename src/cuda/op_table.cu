// op_table.cu - the CUDA column of the op table (graph/backend.h's rg_op_col), as one list:
// a line per op with a CUDA kernel, naming the cell and the family file that defines it.
// A cell is a constant in the namespace RG_CU_CELLS (cuda_common.cuh) holding the kernel, its
// support rule, its scratch, the types the report lists and whether it reads its parameters
// from device memory; its family file defines it beside the kernel. A new kernel: define its
// cell there and add its line here. Ops without a line run on the CPU (the scheduler falls
// back per node), and test_ops's cuda_parity lists them.
// FMA rule (scripts/check-fma.sh): no arithmetic here.
#include "cuda/cuda_common.cuh"

// X(OP, cell): RG_OP_<OP> runs RG_CU_CELLS::<cell>.
#define RG_CU_COLUMN(X)                                                                                     \
    /* ops.cu */                                                                                            \
    X(ADD, add) X(MUL_MAT, mul_mat) X(SOFT_MAX, soft_max)                                                   \
    /* ops_elementwise.cu */                                                                                \
    X(FILL, fill) X(SUB, sub) X(MUL, mul) X(SCALE, scale) X(SILU, silu) X(SILU_BACK, silu_back)             \
    X(SWIGLU, swiglu) X(REPEAT, repeat) X(REPEAT_BACK, repeat_back) X(SUM, sum) X(MEAN, mean)               \
    X(SUM_ROWS, sum_rows) X(CONT, cont) X(CPY, cpy) X(VIEW_BACK, view_back) X(CPY_INTO, cpy_into)           \
    X(GET_ROWS, get_rows) X(GET_ROWS_BACK, get_rows_back)                                                   \
    /* ops_norm.cu */                                                                                       \
    X(RMS_NORM, rms_norm) X(RMS_NORM_BACK, rms_norm_back) X(ROPE, rope) X(ROPE_BACK, rope_back)             \
    X(SOFT_MAX_BACK, soft_max_back) X(CROSS_ENTROPY_LOSS, cross_entropy_loss)                               \
    X(CROSS_ENTROPY_LOSS_BACK, cross_entropy_loss_back) X(ATTN_DECODE, attn_decode)                         \
    /* ops_train.cu */                                                                                      \
    X(OUT_PROD, out_prod)                                                                                   \
    /* ops_linear_ce.cu */                                                                                  \
    X(LINEAR_CE, linear_ce) X(LINEAR_CE_BACK, linear_ce_back)                                               \
    /* ops_optim.cu */                                                                                      \
    X(ADAMW, adamw) X(SGD, sgd) X(SUMSQ, sumsq) X(CLIP_COEF, clip_coef)                                     \
    /* ops_ssm.cu */                                                                                        \
    X(SSM_CONV, ssm_conv) X(SSM_CONV_BACK, ssm_conv_back) X(SSM_DT, ssm_dt) X(SSM_SCAN, ssm_scan)           \
    X(SSM_SCAN_BACK, ssm_scan_back) X(CONV_RS_GATHER, conv_rs_gather)                                       \
    /* ops_flash.cu */                                                                                      \
    X(FLASH_ATTN_EXT, flash_attn_ext) X(FLASH_ATTN_BACK, flash_attn_back)                                   \
    /* ops_gelu_softcap.cu */                                                                               \
    X(GELU, gelu) X(GELU_BACK, gelu_back) X(SOFTCAP, softcap) X(SOFTCAP_BACK, softcap_back)

namespace RG_CU_CELLS {
#define RG_CU_DECLARE_CELL(op_, cell_) extern const rg_op_col cell_;
RG_CU_COLUMN(RG_CU_DECLARE_CELL)
}  // namespace RG_CU_CELLS

namespace {
struct cuda_column {
    rg_op_col col[RG_OP_COUNT];
    cuda_column() : col() {
#define RG_CU_SET_CELL(op_, cell_) col[RG_OP_##op_] = RG_CU_CELLS::cell_;
        RG_CU_COLUMN(RG_CU_SET_CELL)
    }
};
}  // namespace

extern "C" const struct rg_op_col *rg_cuda_column(void) {
    static const cuda_column column;  // filled at the first call (the cells are set by then)
    return column.col;
}
