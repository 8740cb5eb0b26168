// lora_stack.h - several LoRA adapters applied at once, as llama.cpp's repeated --lora does.
//
// llama.cpp adds each adapter's term to a projection: y = W x + sum_i s_i B_i (A_i x), with
// s_i = user_scale_i * alpha_i / rank_i. The same sum is one adapter of rank sum(rank_i):
// A = [A_1; A_2; ...] (the ranks stacked) and B = [s_1 B_1 | s_2 B_2 | ...], with scale 1
// (alpha = rank). A projection that only some adapters target gets zero blocks from the others.
// The graph, the session and the kernels stay those of one adapter.
#ifndef RG_MODEL_LORA_STACK_H
#define RG_MODEL_LORA_STACK_H

#include "model/lora.h"

// Builds the stacked adapter of ls[0..n) with user scales scales[0..n) (n >= 1). Every adapter must be for
// the same model (same layer count, same projection shapes): a mismatch is an error naming both adapters'
// index and the tensor. The result owns its buffers (ls are not changed) and is used with user scale 1.
rg_status rg_lora_stack(rg_lora **out, rg_lora *const *ls, const float *scales, int n, rg_error *err);

#endif
