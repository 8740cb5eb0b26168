// bpe_train.h - a small, deterministic byte-level BPE vocabulary trainer, encoder and decoder.
//
// It exists so that `retrograd make-tiny` can give its test models a real GPT-2-style
// tokenizer (GGUF keys tokenizer.ggml.tokens / token_type / merges, spec/architectures.md §5)
// instead of a placeholder, so that the tokenizer, chat and training paths see realistic ids.
// It is not a replacement for the model tokenizer: the pre-tokenizer is a simplified GPT-2 rule
// and special tokens are never parsed out of text.
//
// Pre-tokenizer (shared by training and encoding; merges never cross a piece boundary), on bytes:
//   - letters are ASCII A-Z a-z and every byte >= 0x80 (so a UTF-8 character is never split
//     between pieces, and non-Latin words stay whole);
//   - an optional leading space + a run of letters;
//   - a single digit 0-9;
//   - an optional leading space + a run of other non-space bytes (punctuation, symbols, NUL...);
//   - a run of whitespace (space \t \n \v \f \r); as in GPT-2's `\s+(?!\S)`, when such a run of
//     two or more bytes ends in a space and is followed by a letter or other byte, its last space
//     is left to start the next piece.
#ifndef RG_TEXT_BPE_TRAIN_H
#define RG_TEXT_BPE_TRAIN_H

#include <stddef.h>
#include <stdint.h>

// GGUF tokenizer.ggml.token_type values.
enum {
    RG_TOKEN_TYPE_UNDEFINED = 0,
    RG_TOKEN_TYPE_NORMAL = 1,
    RG_TOKEN_TYPE_UNKNOWN = 2,
    RG_TOKEN_TYPE_CONTROL = 3,
    RG_TOKEN_TYPE_USER_DEFINED = 4,
    RG_TOKEN_TYPE_UNUSED = 5,
    RG_TOKEN_TYPE_BYTE = 6,
};

// Every array and string is malloc'd and owned by the vocabulary; free with rg_bpe_vocab_free.
// A zeroed struct is a valid empty vocabulary.
typedef struct rg_bpe_vocab {
    int32_t n_tokens;
    char **tokens;          // [n_tokens] NUL-terminated, byte-level-unicode UTF-8 ("Ġthe")
    int32_t *token_types;   // [n_tokens] RG_TOKEN_TYPE_*
    int32_t n_merges;
    char **merges;          // [n_merges] "A B", rank = index, lower merges first
} rg_bpe_vocab;

// Learns up to n_merges merges from corpus[0..len) (any bytes; UTF-8 text in practice).
// The vocabulary is the 256 single-byte tokens in byte order (ids 0..255, type NORMAL), then
// one NORMAL token per merge in merge order (id 256 + rank). At each step the most frequent
// adjacent pair (counted over all pieces, with multiplicity) is merged; ties go to the pair
// whose byte strings are lexicographically smallest (left part first, then right part), so the
// result depends only on the corpus and n_merges. A pair whose concatenation is already a token
// is never chosen, so token texts stay unique. Training stops early when no remaining pair
// occurs at least twice. On success returns 0 (RG_OK) and fills *out (which it overwrites
// without freeing); on failure returns an rg_status code (RG_ERR_ARG, RG_ERR_NOMEM), leaves
// *out empty and writes a message to err (when err_cap > 0).
int rg_bpe_train(const char *corpus, size_t len, int32_t n_merges, rg_bpe_vocab *out,
                 char *err, size_t err_cap);

// Appends a token whose text is stored verbatim (e.g. "<|im_start|>" with type
// RG_TOKEN_TYPE_CONTROL). Returns its id, or -1 when text is NULL or empty, type is not 1..6,
// a token with the same text already exists (ids are looked up by text), or memory runs out;
// on -1 the vocabulary is unchanged.
int32_t rg_bpe_vocab_add(rg_bpe_vocab *v, const char *text, int32_t type);

// Encodes text[0..len) (any bytes): pre-tokenizes, then in each piece starts from single-byte
// tokens and repeatedly applies the adjacent merge of lowest rank (ties: leftmost) until none
// applies (spec §5.4 steps 2-5). Special-token text is not recognised: "<|im_end|>" is encoded
// as ordinary bytes. Each call rebuilds its lookup tables from the strings, O(n_tokens +
// n_merges), which suits fixtures and tests rather than a hot loop. Writes the first
// min(count, cap) ids to ids (which may be NULL when cap == 0) and returns the full count.
// Returns -1 when memory runs out or when the vocabulary lacks a single-byte token for a byte
// of text.
int64_t rg_bpe_encode(const rg_bpe_vocab *v, const char *text, size_t len, int32_t *ids,
                      int64_t cap);

// Decodes ids back to bytes. NORMAL (and other byte-level) tokens go through the inverse byte
// table; CONTROL and USER_DEFINED tokens are emitted as their text, as is any token whose text
// is not valid byte-level text. Ids outside 0..n_tokens-1 produce nothing. Writes the first
// min(needed, cap) bytes to out (NULL allowed when cap == 0), then a NUL when needed < cap, and
// returns the number of bytes needed (not counting the NUL).
size_t rg_bpe_decode(const rg_bpe_vocab *v, const int32_t *ids, int64_t n, char *out, size_t cap);

// Frees everything the vocabulary owns and zeroes it. Accepts NULL and zeroed vocabularies.
void rg_bpe_vocab_free(rg_bpe_vocab *v);

#endif
