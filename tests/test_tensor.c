// test_tensor.c - shapes, strides, views, contiguity and the arena.
#include <string.h>

#include "base/arena.h"
#include "rg_test.h"
#include "tensor/tensor.h"

static void test_arena_alignment_and_growth(void) {
    rg_arena a;
    rg_arena_init(&a, 1024);
    void *p[200];
    for (int i = 0; i < 200; i++) {
        size_t align = (size_t)1 << (i % 7);
        p[i] = rg_arena_alloc(&a, (size_t)(i * 13 % 300) + 1, align);
        RG_REQUIRE(p[i], "alloc %d", i);
        RG_CHECK(((uintptr_t)p[i] & (align - 1)) == 0, "alloc %d misaligned for %zu", i, align);
        memset(p[i], 0xAB, (size_t)(i * 13 % 300) + 1);  // the sanitizer checks the bounds
    }
    void *big = rg_arena_alloc(&a, 100000, 64);
    RG_CHECK(big && ((uintptr_t)big & 63) == 0, "big alloc");
    void *after = rg_arena_alloc(&a, 16, 8);
    RG_CHECK(after != NULL, "allocation after a big one");
    RG_CHECK(rg_arena_alloc(&a, SIZE_MAX - 8, 8) == NULL, "overflowing request must fail");
    RG_CHECK(rg_arena_alloc(&a, 8, 3) == NULL, "alignment 3 must fail");
    char *s = rg_arena_strndup(&a, "hello world", 5);
    RG_CHECK(s && strcmp(s, "hello") == 0, "strndup");
    rg_arena_free(&a);
}

static void test_contiguous_strides(void) {
    rg_arena a;
    rg_arena_init(&a, 0);
    rg_error err = {0};
    rg_tensor *t = rg_tensor_new(&a, RG_TYPE_F32, 3, (int64_t[]){5, 3, 2}, &err);
    RG_REQUIRE(t, "%s", err.msg);
    RG_CHECK(t->nb[0] == 4 && t->nb[1] == 20 && t->nb[2] == 60 && t->nb[3] == 120, "f32 strides");
    RG_CHECK(rg_tensor_nelements(t) == 30 && rg_tensor_nrows(t) == 6 && rg_tensor_span(t) == 120, "counts");
    RG_CHECK(rg_tensor_is_contiguous(t) && !rg_tensor_is_transposed(t), "contiguous");
    rg_tensor *q = rg_tensor_new(&a, RG_TYPE_Q4_K, 2, (int64_t[]){512, 3}, &err);
    RG_REQUIRE(q, "%s", err.msg);
    RG_CHECK(q->nb[0] == 144 && q->nb[1] == 288 && rg_tensor_span(q) == 864, "q4_K strides %zu %zu", q->nb[0], q->nb[1]);
    RG_CHECK(rg_tensor_is_contiguous(q), "q4_K contiguous");
    RG_CHECK(rg_tensor_new(&a, RG_TYPE_Q4_0, 1, (int64_t[]){33}, &err) == NULL && strstr(err.msg, "block size 32"),
             "%s", err.msg);
    RG_CHECK(rg_tensor_new(&a, 4, 1, (int64_t[]){32}, &err) == NULL && strstr(err.msg, "cannot hold data"), "%s", err.msg);
    RG_CHECK(rg_tensor_new(&a, RG_TYPE_F32, 2, (int64_t[]){4, -1}, &err) == NULL && strstr(err.msg, "negative"), "%s",
             err.msg);
    rg_arena_free(&a);
}

static void test_transpose_and_permute(void) {
    rg_arena a;
    rg_arena_init(&a, 0);
    rg_error err = {0};
    rg_tensor *t = rg_tensor_new(&a, RG_TYPE_F32, 2, (int64_t[]){3, 2}, &err);  // [3, 2]
    for (int i = 0; i < 6; i++) ((float *)t->data)[i] = (float)i;
    rg_tensor *tt = rg_tensor_transpose(&a, t, &err);  // [2, 3]
    RG_REQUIRE(tt, "%s", err.msg);
    RG_CHECK(tt->ne[0] == 2 && tt->ne[1] == 3 && rg_tensor_is_transposed(tt) && !rg_tensor_is_contiguous(tt), "shape");
    // tt[i0, i1] == t[i1, i0]
    for (int i0 = 0; i0 < 2; i0++)
        for (int i1 = 0; i1 < 3; i1++)
            RG_CHECK(*(float *)rg_tensor_at(tt, i0, i1, 0, 0) == *(float *)rg_tensor_at(t, i1, i0, 0, 0), "element");
    RG_CHECK(tt->view_src == t, "view source");
    rg_tensor *b = rg_tensor_new(&a, RG_TYPE_F32, 4, (int64_t[]){2, 3, 4, 5}, &err);
    rg_tensor *p = rg_tensor_permute(&a, b, (int[]){0, 2, 1, 3}, &err);  // [2, 4, 3, 5]
    RG_REQUIRE(p, "%s", err.msg);
    RG_CHECK(p->ne[1] == 4 && p->ne[2] == 3 && p->nb[1] == b->nb[2] && p->nb[2] == b->nb[1], "permute strides");
    RG_CHECK(rg_tensor_span(p) == rg_tensor_span(b), "same span");
    RG_CHECK(rg_tensor_permute(&a, b, (int[]){0, 0, 1, 2}, &err) == NULL && strstr(err.msg, "not a permutation"), "%s",
             err.msg);
    rg_tensor *q = rg_tensor_new(&a, RG_TYPE_Q8_0, 2, (int64_t[]){64, 2}, &err);
    RG_CHECK(rg_tensor_transpose(&a, q, &err) == NULL && strstr(err.msg, "blocks"), "quantized transpose: %s", err.msg);
    rg_arena_free(&a);
}

static void test_reshape_and_views(void) {
    rg_arena a;
    rg_arena_init(&a, 0);
    rg_error err = {0};
    rg_tensor *t = rg_tensor_new(&a, RG_TYPE_F16, 2, (int64_t[]){8, 6}, &err);
    rg_tensor *r = rg_tensor_reshape(&a, t, 3, (int64_t[]){4, 2, 6}, &err);
    RG_REQUIRE(r, "%s", err.msg);
    RG_CHECK(r->data == t->data && r->nb[1] == 8 && r->nb[2] == 16, "reshape strides");
    RG_CHECK(rg_tensor_reshape(&a, t, 2, (int64_t[]){7, 7}, &err) == NULL && strstr(err.msg, "48 elements"), "%s", err.msg);
    rg_tensor *tt = rg_tensor_transpose(&a, t, &err);
    RG_CHECK(rg_tensor_reshape(&a, tt, 1, (int64_t[]){48}, &err) == NULL && strstr(err.msg, "not contiguous"), "%s",
             err.msg);
    // Rows 2..4 of t: a window with the source's row stride.
    rg_tensor *v = rg_tensor_view(&a, t, 2, (int64_t[]){8, 3}, (size_t[]){2, t->nb[1]}, 2 * t->nb[1], &err);
    RG_REQUIRE(v, "%s", err.msg);
    RG_CHECK((char *)v->data == (char *)t->data + 32 && v->view_offs == 32 && rg_tensor_is_contiguous(v), "row window");
    // A column: strided, not contiguous, rows of one element.
    rg_tensor *col = rg_tensor_view(&a, t, 2, (int64_t[]){1, 6}, (size_t[]){2, t->nb[1]}, 6, &err);
    RG_REQUIRE(col, "%s", err.msg);
    RG_CHECK(rg_tensor_span(col) == 5 * 16 + 2, "column span %zu", rg_tensor_span(col));
    // A view of a view keeps the owner and adds offsets.
    rg_tensor *vv = rg_tensor_view(&a, v, 1, (int64_t[]){8}, (size_t[]){2}, v->nb[1], &err);
    RG_REQUIRE(vv, "%s", err.msg);
    RG_CHECK(vv->view_src == t && vv->view_offs == 48, "nested view offset %zu", vv->view_offs);
    // Out of range windows are refused with both shapes named.
    RG_CHECK(rg_tensor_view(&a, t, 2, (int64_t[]){8, 4}, (size_t[]){2, t->nb[1]}, 3 * t->nb[1], &err) == NULL &&
                 strstr(err.msg, "[8, 4]") && strstr(err.msg, "[8, 6]"),
             "%s", err.msg);
    rg_arena_free(&a);
}

static const rg_test_case cases[] = {
    RG_TEST(test_arena_alignment_and_growth),
    RG_TEST(test_contiguous_strides),
    RG_TEST(test_transpose_and_permute),
    RG_TEST(test_reshape_and_views),
    {0},
};

int main(int argc, char **argv) { return rg_test_run(argc, argv, cases); }
