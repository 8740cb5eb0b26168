// pack.h - the results of an op that makes several, packed into its one F32
// output until the node model has more than one output per node (a later
// issue). A packed node is 1-D [total]; part i is a contiguous tensor of
// shape ne[i] starting at element off[i], the parts in order with no gaps.
// One layout function (rg_pack_layout) says the parts of every packing op, and
// serves the constructor (the node's length), the views that expose each part
// (rg_pack_part) and the CPU and CUDA kernels (where each part is written), so
// a change of the packing is a change of pack.c alone.
//
//   op              parts (graph.h gives the meaning of each)
//   SSM_CONV        0 y [C, T, S]           1 final state [C, K-1, S]
//   SSM_CONV_BACK   0 dx [C, T, S]          1 dstate [C, K-1, S]    2 dc [K, C]
//   SSM_SCAN        0 y [P, H, T, S]        1 final state [N, P, H, S]
//                   (ip[3] = 1: 2 states [N*P*H, T, S], the state after every token)
//   SSM_SCAN_BACK   0 dxBC [P*H + 2*G*N, T, S]   1 ddt [H, T, S]    2 dA (A's shape)   3 dstate [N, P, H, S]
//   FLASH_ATTN_EXT  0 o [Dh, H, T, S]       1 lse [T, H, S]
//   FLASH_ATTN_BACK 0 dq [Dh, T, H, S]      1 dk [Dh, Tk, Hkv, S]   2 dv [Dh, Tk, Hkv, S]
#ifndef RG_GRAPH_PACK_H
#define RG_GRAPH_PACK_H

#include <stdbool.h>
#include <stdint.h>

#include "graph/graph.h"

#define RG_PACK_MAX_PARTS 4

typedef struct rg_pack {
    int n_parts;
    int64_t ne[RG_PACK_MAX_PARTS][4];  // each part's shape (ggml order)
    int64_t off[RG_PACK_MAX_PARTS];    // its first element in the packed node
    int64_t total;                     // elements of the packed node
} rg_pack;

// The parts of a node of op `op` with these sources and integer parameters
// (a node's own, or a constructor's before the node exists). False for an op
// that does not pack, or sources that do not give the shapes.
bool rg_pack_layout(rg_op op, rg_node *const src[RG_MAX_SRC], const int64_t ip[8], rg_pack *p);
static inline bool rg_pack_of(const rg_node *n, rg_pack *p) { return rg_pack_layout(n->op, n->src, n->ip, p); }

// Part i of the packed node n as a view (contiguous, the part's shape), or NULL
// with the graph's error set when n does not pack or has no part i.
rg_node *rg_pack_part(rg_graph *g, rg_node *n, int part);

#endif
