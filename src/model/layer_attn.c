// layer_attn.c - the attention mixer (architectures.md §0.4, §1.3, §1.5, §1.6, §1.7, §2.6):
// x + post_norm(Wo attention(RoPE(norm_q(Wq h + bq)), RoPE(norm_k(Wk h + bk)), Wv h + bv))
// with h = RMSNorm(x; attn_norm), causal GQA, the per-head q/k norms where the
// layer has them (qwen3, lfm2, gemma3), the post-norm where it has one (gemma),
// the scores capped (gemma2's attn_logit_softcapping) and a sliding window where
// the layer has one (gemma's sliding layers, each with its RoPE base). The window
// is the SOFT_MAX's own mask (ip[1]); the cache keeps every token. Its state is the KV cache: keys [Dh, n_ctx, Hkv]
// and values stored transposed [n_ctx, Dh, Hkv], so both feed MUL_MAT with
// packed rows (a single cached token takes ATTN_DECODE on the same views). With
// c->flash (training, or a session's prompt batch where rg_session_flash_prompt
// says it pays) attention is FLASH_ATTN_EXT instead, never the [n_kv, T, H] scores:
// over the cache it reads the values through a transposed view, which the kernel gathers.
// d = n_embd, T = n_tokens, Dh = head_dim, H / Hkv = the layer's query / kv heads.
#include "model/layer.h"

static int64_t kv_elements(const rg_hparams *hp, const rg_layer *L) { return hp->head_dim * L->n_head_kv; }

static int64_t k_run(const rg_hparams *hp, const rg_layer *L) { (void)L; return hp->head_dim; }
static int64_t v_run(const rg_hparams *hp, const rg_layer *L) { (void)hp, (void)L; return 1; }

static const rg_state_buf attn_state[] = {
    {"k", true, kv_elements, k_run},   // [Dh, n_ctx, Hkv]
    {"v", true, kv_elements, v_run},   // [n_ctx, Dh, Hkv]
};

// Attention of q [Dh, H, T] over k, v [Dh, Hkv, T] (RoPE'd, normed) and, with c->state, the cache: the new keys
// and values written at rows n_past.. first. Returns o [Dh*H, T].
static rg_node *attend(const rg_layer_ctx *c, rg_node *q, rg_node *k, rg_node *v) {
    rg_graph *g = c->g;
    const rg_hparams *hp = &c->m->hp;
    const rg_layer *Ly = c->layer;
    const int64_t T = q->t.ne[2], Dh = hp->head_dim, H = Ly->n_head, Hkv = Ly->n_head_kv;
    const rg_layer_state *cache = c->state;
    const int64_t n_past = c->n_past, n_kv = cache ? n_past + T : T;
    rg_node *Q = rg_permute(g, q, 0, 2, 1, 3);                   // [Dh, T, H]
    rg_node *K, *Vt, *V;  // V: [Dh, n_kv, Hkv] for FLASH_ATTN_EXT
    if (cache) {
        // Write the new rows, then read every cached row: the reads are created
        // after the writes, and execution follows creation order.
        const int kb = c->state_first, vb = c->state_first + 1;   // attn_state's k and v
        const uint32_t type = cache->type[kb];
        const size_t es = rg_type_get(type)->type_size;
        const int64_t C = c->n_ctx;
        rg_node *kc = rg_leaf(g, "cache_k", type, 3, (int64_t[]){Dh, C, Hkv}, cache->buf[kb]);
        rg_node *vc = rg_leaf(g, "cache_v", type, 3, (int64_t[]){C, Dh, Hkv}, cache->buf[vb]);
        rg_node *kw = rg_view(g, kc, 3, (int64_t[]){Dh, T, Hkv}, (size_t[]){es, Dh * es, Dh * C * es},
                              (size_t)(n_past * Dh) * es);
        rg_cpy_into(g, rg_permute(g, k, 0, 2, 1, 3), kw);        // [Dh, T, Hkv] at rows n_past..
        rg_node *vw = rg_view(g, vc, 3, (int64_t[]){T, Dh, Hkv}, (size_t[]){es, C * es, Dh * C * es},
                              (size_t)n_past * es);
        rg_cpy_into(g, rg_permute(g, v, 1, 2, 0, 3), vw);        // [T, Dh, Hkv] at columns n_past..
        K = rg_view(g, kc, 3, (int64_t[]){Dh, n_kv, Hkv}, (size_t[]){es, Dh * es, Dh * C * es}, 0);   // [Dh, n_kv, Hkv]
        Vt = rg_view(g, vc, 3, (int64_t[]){n_kv, Dh, Hkv}, (size_t[]){es, C * es, Dh * C * es}, 0);  // [n_kv, Dh, Hkv]
        V = c->flash ? rg_permute(g, Vt, 1, 0, 2, 3) : NULL;     // [Dh, n_kv, Hkv], strided rows
    } else {
        K = rg_permute(g, k, 0, 2, 1, 3);                        // [Dh, T, Hkv]
        V = c->flash ? rg_permute(g, v, 0, 2, 1, 3) : NULL;      // [Dh, T, Hkv]
        Vt = c->flash ? NULL : rg_cont(g, rg_permute(g, v, 1, 2, 0, 3));  // [T, Dh, Hkv]
    }
    rg_node *o;
    if (c->flash) {
        // FlashAttention-2 (ops_flash.c): causal (query t at n_past + t over keys 0..n_kv-1: the op
        // aligns the queries to the last keys), each query reads its own document's keys (seg, or
        // one document), with the layer's logit cap and window as SOFT_MAX takes them, never the
        // [n_kv, T] scores; o [Dh, H, T] is already the projection's layout.
        const rg_flash_params fp = {.scale = hp->attn_scale, .softcap = hp->attn_softcap, .window = Ly->window,
                                    .causal = true};
        rg_node *fa = rg_flash_attn_ext(g, Q, K, V, c->seg, NULL, &fp);
        o = rg_reshape(g, rg_flash_part(g, fa, RG_FLASH_O), 2, (int64_t[]){Dh * H, T});  // [Dh*H, T]
    } else if (cache && (T == 1 || c->exact_columns)) {
        // A generated token (or an exact batch, query by query, each as its own token would be):
        // scores (capped, windowed as SOFT_MAX takes them), softmax and weighted sum in one op (ops_attn_decode.c).
        o = rg_attn_decode(g, q, K, Vt, hp->attn_scale, hp->attn_softcap, Ly->window);
        o = rg_reshape(g, o, 2, (int64_t[]){Dh * H, T});  // [Dh*H, T]
    } else {
        rg_node *kq = rg_mul_mat(g, K, Q);                       // [n_kv, T, H]; head h reads kv head h / (H/Hkv)
        // causal: key j <= n_past + query i; in a window also n_past + i - j < window
        kq = rg_soft_max_ext(g, kq, c->mask, true, hp->attn_scale, hp->attn_softcap, Ly->window);
        o = rg_mul_mat(g, Vt, kq);                               // [Dh, T, H]
        o = rg_reshape(g, rg_cont(g, rg_permute(g, o, 0, 2, 1, 3)), 2, (int64_t[]){Dh * H, T});  // [Dh*H, T]
    }
    return o;
}

static rg_node *build(const rg_layer_ctx *c, rg_node *x) {
    rg_graph *g = c->g;
    const rg_hparams *hp = &c->m->hp;
    const rg_layer_nodes *L = c->w;
    const int64_t T = x->t.ne[1], Dh = hp->head_dim, H = c->layer->n_head, Hkv = c->layer->n_head_kv;
    rg_node *h = rg_layer_norm(g, x, L->w[RG_ROLE_ATTN_NORM], hp->norm_eps);                           // [d, T]
    rg_node *q = rg_reshape(g, rg_layer_linear(c, RG_ROLE_ATTN_Q, RG_ROLE_ATTN_Q_B, h), 3, (int64_t[]){Dh, H, T});    // [Dh, H, T]
    rg_node *k = rg_reshape(g, rg_layer_linear(c, RG_ROLE_ATTN_K, RG_ROLE_ATTN_K_B, h), 3, (int64_t[]){Dh, Hkv, T});  // [Dh, Hkv, T]
    rg_node *v = rg_reshape(g, rg_layer_linear(c, RG_ROLE_ATTN_V, RG_ROLE_ATTN_V_B, h), 3, (int64_t[]){Dh, Hkv, T});  // [Dh, Hkv, T]
    if (L->w[RG_ROLE_ATTN_Q_NORM]) q = rg_layer_norm(g, q, L->w[RG_ROLE_ATTN_Q_NORM], hp->norm_eps);  // per head, over Dh
    if (L->w[RG_ROLE_ATTN_K_NORM]) k = rg_layer_norm(g, k, L->w[RG_ROLE_ATTN_K_NORM], hp->norm_eps);
    const rg_layer *Ly = c->layer;
    const float base = Ly->rope_freq_base > 0 ? Ly->rope_freq_base : hp->rope_freq_base;
    const float fscale = Ly->rope_freq_scale > 0 ? Ly->rope_freq_scale : hp->rope_freq_scale;
    q = rg_rope(g, q, c->pos, (int)hp->n_rot, hp->rope_mode, base, fscale);
    k = rg_rope(g, k, c->pos, (int)hp->n_rot, hp->rope_mode, base, fscale);
    rg_node *o;
    if (c->segs) {  // several sequences: each segment's queries over its own cache
        o = rg_layer_gather(c, "attn_o", Dh * H, T);                                     // [Dh*H, T]
        for (int i = 0; i < c->n_segs && o; i++) {
            const rg_layer_ctx cs = rg_layer_seg_ctx(c, i);
            const int64_t f = c->segs[i].first, n = c->segs[i].n;
            rg_layer_put_cols(g, attend(&cs, rg_layer_cols(g, q, 2, f, n), rg_layer_cols(g, k, 2, f, n),
                                        rg_layer_cols(g, v, 2, f, n)), o, f);            // [Dh*H, n] at column f
        }
    } else {
        o = attend(c, q, k, v);                                                          // [Dh*H, T]
    }
    rg_node *a = rg_layer_linear(c, RG_ROLE_ATTN_O, RG_ROLE_ATTN_O_B, o);  // [d, T]
    if (L->w[RG_ROLE_ATTN_POST_NORM]) a = rg_layer_norm(g, a, L->w[RG_ROLE_ATTN_POST_NORM], hp->norm_eps);
    return rg_add(g, x, a);  // [d, T]
}

const rg_layer_kind_desc rg_layer_attn = {"attention", build, 2, attn_state};
