// tokenizer.h - the model's own tokenizer, read from GGUF metadata (spec/architectures.md §5).
//
// Two vocabulary kinds are supported:
//   - tokenizer.ggml.model = "gpt2": byte-level BPE with merge ranks (Qwen2/2.5/3, Llama 3,
//     LFM2, SmolLM, GPT-2). Text is cut into special tokens and pre-tokens (a hand-written
//     matcher per tokenizer.ggml.pre, §5.3), every pre-token's bytes are mapped through GPT-2's
//     byte-to-unicode table, and adjacent symbols are merged lowest rank first (§5.4).
//   - tokenizer.ggml.model = "llama": SentencePiece-style BPE by token scores with "▁" for
//     spaces, an optional space prefix, and <0xXX> byte fallback (Llama 2, Phi-3).
//
// Special-token text (§5.4 step 1) is cut out of the input as llama.cpp cuts it
// (tokenizer_special.c; checked against llama-tokenize by the X.gguf.special vectors):
//   - Which tokens: those of type USER_DEFINED always; CONTROL and UNKNOWN ones only with
//     parse_special. A token whose text is one of llama.cpp's end-of-generation texts
//     (rg_token_is_eog's list), or a fill-in-the-middle text whose role the file names no id
//     for, counts as CONTROL whatever its stored type (Phi-3's USER_DEFINED "</s>").
//   - Where several could match: longer texts first, anywhere in the text, then lower ids;
//     each token's occurrences left to right in the text not yet cut. (llama.cpp orders equal
//     lengths by an unstable sort; the order only matters for two tokens with one text or two
//     equal-length texts that overlap, which no shipped vocabulary has.)
//   - Whitespace (C isspace) next to a cut token is dropped when the model's name asks: Phi-3
//     (general.name holds "phi-3"/"phi3") drops it after every special token except <unk>,
//     <s> and <|endoftext|>; the BERT-style masks ("modern-bert" [MASK], jina <mask>) before.
//   - SentencePiece: every piece of ordinary text gets the "▁" prefix (add_space_prefix),
//     the first and each one after a cut token.
//   - add_special puts BOS first (and EOS last) as the model asks and nothing else: text that
//     starts with the BOS text gets two BOS, as llama.cpp gives (it warns).
//
// Differences from llama.cpp, all deliberate: invalid UTF-8 is kept byte for byte (llama.cpp
// substitutes U+FFFD), so decode(encode(x)) == x for every byte string with a byte-level
// vocabulary; decoding never applies clean_up_tokenization_spaces; an empty token text is
// never matched (llama.cpp renames it "[EMPTY_<id>]"); where a vocabulary holds two FIM
// texts of one role, both count as CONTROL (llama.cpp takes the one its hash map gives first).
// llama.cpp's type overrides for vocabularies we refuse to load (gpt-oss's harmony markers,
// Gemma 4's "</s>") are left out.
//
// A loaded tokenizer is immutable and owns all its memory (it does not point into the GGUF
// file, which may be closed after loading); every function taking a const tokenizer may run
// concurrently from several threads.
#ifndef RG_TEXT_TOKENIZER_H
#define RG_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "retrograd.h"

typedef struct rg_tokenizer rg_tokenizer;

typedef enum rg_vocab_kind {
    RG_VOCAB_BPE = 1,  // "gpt2": byte-level BPE
    RG_VOCAB_SPM = 2,  // "llama": SentencePiece-style BPE by scores
} rg_vocab_kind;

// Pre-tokenizer families (tokenizer.ggml.pre), §5.3. Only meaningful for RG_VOCAB_BPE.
typedef enum rg_pretok_kind {
    RG_PRETOK_DEFAULT = 0,  // "default" or absent: llama.cpp's fallback split
    RG_PRETOK_GPT2 = 1,     // "gpt-2", "phi-2"
    RG_PRETOK_LLAMA3 = 2,   // "llama3", "llama-v3", "llama-bpe", "lfm2", "falcon3", "pixtral": digits by 3
    RG_PRETOK_QWEN2 = 3,    // "qwen2", "deepseek-r1-qwen": the Llama 3 rule with single digits
    RG_PRETOK_SMOLLM = 4,   // "smollm": single digits, then the GPT-2 rule
} rg_pretok_kind;

// GGUF tokenizer.ggml.token_type values (same numbers as in bpe_train.h).
enum {
    RG_TOKTYPE_UNDEFINED = 0,
    RG_TOKTYPE_NORMAL = 1,
    RG_TOKTYPE_UNKNOWN = 2,
    RG_TOKTYPE_CONTROL = 3,
    RG_TOKTYPE_USER_DEFINED = 4,
    RG_TOKTYPE_UNUSED = 5,
    RG_TOKTYPE_BYTE = 6,
};

// What the loader read and decided. Ids are -1 when the model has no such token.
typedef struct rg_tokenizer_info {
    rg_vocab_kind kind;
    rg_pretok_kind pretok;
    char pre_name[32];       // tokenizer.ggml.pre as found (truncated), "" when absent
    int32_t n_tokens;
    int32_t n_merges;        // BPE only
    int32_t bos, eos, eot, eom, pad, unk, sep;
    bool add_bos, add_eos;   // what add_special adds (GGUF keys, else the family's default)
    bool add_space_prefix;   // SPM: a "▁" in front of the text and after every special token
    bool ignore_merges;      // BPE, Llama 3 family: a pre-token that is a whole token is emitted as is
    size_t max_token_len;    // longest token text in bytes
    const char *chat_template;  // tokenizer.chat_template (NUL-terminated copy), NULL when absent
    size_t chat_template_len;
} rg_tokenizer_info;

// Reads tokenizer.ggml.* from g and builds the tokenizer; g may be closed afterwards.
// Validates what it uses and names the key, index and value at fault: token_type and scores
// lengths against the token count; each merge ("A B", split at the first space after index 0)
// must name two tokens whose concatenation is a token; special ids must be in range (a stored
// -1 / 0xFFFFFFFF means "none"). Unsupported models (bert, t5, ...) and unknown BPE
// pre-tokenizers give RG_ERR_UNSUPPORTED; a file without tokenizer.ggml.model/tokens gives
// RG_ERR_NOT_FOUND.
rg_status rg_tokenizer_load(rg_tokenizer **out, const rg_gguf *g, rg_error *err);
void rg_tokenizer_free(rg_tokenizer *tok);

const rg_tokenizer_info *rg_tokenizer_get_info(const rg_tokenizer *tok);

// Tokenizes text[0..len) (any bytes; invalid UTF-8 is kept byte for byte). add_special adds
// BOS/EOS as the model asks (info.add_bos / add_eos), also before text that starts with the
// BOS text; parse_special recognizes CONTROL and UNKNOWN token text (the rules above).
// Writes the first min(count, cap) ids (ids may be NULL when cap is 0) and returns the full
// count, or -1 when memory runs out or len is 4 GiB or more.
int64_t rg_tokenize(const rg_tokenizer *tok, const char *text, size_t len, bool add_special, bool parse_special,
                    int32_t *ids, int64_t cap);
// The same into a malloc'd array the caller frees.
rg_status rg_tokenize_alloc(const rg_tokenizer *tok, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t **ids, size_t *n_ids, rg_error *err);

// Token accessors. Out-of-range ids give NULL / -1 / false.
int32_t rg_tokenizer_n_tokens(const rg_tokenizer *tok);
const char *rg_token_text(const rg_tokenizer *tok, int32_t id, size_t *len);  // as stored in GGUF (NUL-terminated)
int rg_token_type(const rg_tokenizer *tok, int32_t id);                        // RG_TOKTYPE_* as stored
float rg_token_score(const rg_tokenizer *tok, int32_t id);                     // SPM scores; 0 otherwise
int32_t rg_token_find(const rg_tokenizer *tok, const char *text, size_t len);  // exact stored text, or -1
// End of generation: eos, eot, eom, and any token whose text is one of <|eot_id|>,
// <|im_end|>, <|end|>, <|return|>, <|call|>, <|flush|>, <|calls|>, <end_of_turn>,
// <|endoftext|>, </s>, <|eom_id|>, <EOT>, _<EOT>, [EOT], [EOS], <|end_of_text|>,
// <end_of_utterance>, <eos>, <turn|>, <|tool_response>, <｜end▁of▁sentence｜>, [e~[ (llama.cpp's
// list, §5.2).
bool rg_token_is_eog(const rg_tokenizer *tok, int32_t id);
// The end-of-generation ids in id order, at most cap of them, into out; returns how many.
int rg_token_eog_ids(const rg_tokenizer *tok, int32_t *out, int cap);

// The bytes one token stands for: byte-level tokens through the inverse byte table, SPM
// tokens with "▁" as space and <0xXX> as its byte, USER_DEFINED text verbatim, CONTROL and
// UNKNOWN text (and the control-looking texts above) only when render_special, nothing for
// UNUSED and out-of-range ids. snprintf convention: returns the full length, writes
// min(len, cap-1) bytes and a NUL when cap > 0.
size_t rg_token_to_piece(const rg_tokenizer *tok, int32_t id, bool render_special, char *out, size_t cap);

// Decodes a sequence: the concatenated pieces, except that with an SPM space prefix the one
// leading space of the first piece and of the first piece after each special token is
// dropped (it was added by encoding). snprintf convention as above. Byte-level vocabularies:
// rg_detokenize(rg_tokenize(x)) == x for any x (with render_special when parse_special was on).
size_t rg_detokenize(const rg_tokenizer *tok, const int32_t *ids, size_t n, bool render_special, char *out,
                     size_t cap);

// Streaming decode for generation: push tokens one at a time and get the bytes that are
// ready. A UTF-8 sequence that is incomplete but could still become valid is held back until
// the next token completes it; bytes that can never be valid are passed through unchanged, so
// that the concatenation of everything pushed and flushed equals rg_detokenize of the ids.
typedef struct rg_detok_stream {
    const rg_tokenizer *tok;
    bool render_special;
    bool strip_space;   // SPM: drop a leading space of the next piece
    uint8_t held[4];
    uint8_t n_held;
} rg_detok_stream;

void rg_detok_stream_init(rg_detok_stream *s, const rg_tokenizer *tok, bool render_special);
// Room that out must have for any push or flush: the longest token plus 4 bytes.
size_t rg_detok_stream_max_out(const rg_tokenizer *tok);
// Writes the ready bytes to out (no terminator) and returns their count; -1 (and no change)
// when cap is below what this push needs.
int64_t rg_detok_stream_push(rg_detok_stream *s, int32_t id, char *out, size_t cap);
// Writes any held-back bytes (an incomplete sequence at the end of the output).
int64_t rg_detok_stream_flush(rg_detok_stream *s, char *out, size_t cap);

// Byte offset of the first byte of text that is not part of well-formed UTF-8, or len.
size_t rg_utf8_first_invalid(const char *text, size_t len);

#endif
