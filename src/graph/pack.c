// pack.c - see pack.h: the parts of every op that packs several results in its output.
#include "graph/pack.h"

#include <stdio.h>
#include <string.h>

#include "base/error.h"

static void add_part(rg_pack *p, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    const int i = p->n_parts++;
    p->ne[i][0] = n0, p->ne[i][1] = n1, p->ne[i][2] = n2, p->ne[i][3] = n3;
    p->off[i] = p->total;
    p->total += n0 * n1 * n2 * n3;
}

bool rg_pack_layout(rg_op op, rg_node *const src[RG_MAX_SRC], const int64_t ip[8], rg_pack *p) {
    memset(p, 0, sizeof *p);
    switch (op) {
    case RG_OP_SSM_CONV:
    case RG_OP_SSM_CONV_BACK: {
        // SSM_CONV (x, c, ...), SSM_CONV_BACK (d, x, c, ...)
        const int first = op == RG_OP_SSM_CONV ? 0 : 1;
        const rg_node *x = src[first], *c = src[first + 1];
        if (!x || !c || c->t.ne[0] < 1) return false;
        const int64_t C = x->t.ne[0], T = x->t.ne[1], S = x->t.ne[2], K = c->t.ne[0];
        add_part(p, C, T, S, 1);      // y or dx
        add_part(p, C, K - 1, S, 1);  // final state or dstate
        if (op == RG_OP_SSM_CONV_BACK) add_part(p, K, C, 1, 1);  // dc
        return true;
    }
    case RG_OP_SSM_SCAN:
    case RG_OP_SSM_SCAN_BACK: {
        // SSM_SCAN (xBC, dt, A, ...), SSM_SCAN_BACK (d, xBC, SSM_DT [H, T, S, 3], A, ...); ip[0] P, ip[1] N
        const int first = op == RG_OP_SSM_SCAN ? 0 : 1;
        const rg_node *xbc = src[first], *dt = src[first + 1], *A = src[first + 2];
        if (!xbc || !dt || !A) return false;
        const int64_t P = ip[0], N = ip[1], H = dt->t.ne[0], T = dt->t.ne[1], S = dt->t.ne[2];
        if (op == RG_OP_SSM_SCAN) {
            add_part(p, P, H, T, S);  // y
            add_part(p, N, P, H, S);  // final state
            if (ip[3]) add_part(p, N * P * H, T, S, 1);  // the state after every token: [N, P, H] each
            return true;
        } else {
            add_part(p, xbc->t.ne[0], T, S, 1);  // dxBC
            add_part(p, H, T, S, 1);             // ddt
            add_part(p, A->t.ne[0], A->t.ne[1], A->t.ne[2], A->t.ne[3]);  // dA
        }
        add_part(p, N, P, H, S);  // final state or dstate
        return true;
    }
    case RG_OP_FLASH_ATTN_EXT:
    case RG_OP_FLASH_ATTN_BACK: {
        // FLASH_ATTN_EXT (q, k, ...), FLASH_ATTN_BACK (d, q, k, ...)
        const int first = op == RG_OP_FLASH_ATTN_EXT ? 0 : 1;
        const rg_node *q = src[first], *k = src[first + 1];
        if (!q || !k) return false;
        const int64_t Dh = q->t.ne[0], T = q->t.ne[1], H = q->t.ne[2], S = q->t.ne[3];
        if (op == RG_OP_FLASH_ATTN_EXT) {
            add_part(p, Dh, H, T, S);  // o
            add_part(p, T, H, S, 1);   // lse
        } else {
            add_part(p, Dh, T, H, S);                                 // dq
            add_part(p, Dh, k->t.ne[1], k->t.ne[2], k->t.ne[3]);      // dk
            add_part(p, Dh, k->t.ne[1], k->t.ne[2], k->t.ne[3]);      // dv
        }
        return true;
    }
    default: return false;
    }
}

rg_node *rg_pack_part(rg_graph *g, rg_node *n, int part) {
    if (!n) return NULL;
    rg_pack p;
    if (!rg_pack_of(n, &p) || part < 0 || part >= p.n_parts) {
        if (g->err.status == RG_OK)
            rg_fail(&g->err, RG_ERR_ARG, "pack part: node '%s' (%s) has no part %d", n->t.name, rg_op_name(n->op), part);
        return NULL;
    }
    const int64_t *ne = p.ne[part];
    const size_t nb[4] = {sizeof(float), sizeof(float) * (size_t)ne[0], sizeof(float) * (size_t)(ne[0] * ne[1]),
                          sizeof(float) * (size_t)(ne[0] * ne[1] * ne[2])};
    return rg_view(g, n, 4, ne, nb, sizeof(float) * (size_t)p.off[part]);
}
