// tiny_corpus.h - a built-in English text (~16 KB) for training the tiny models' vocabulary.
#ifndef RG_TEXT_TINY_CORPUS_H
#define RG_TEXT_TINY_CORPUS_H

#include <stddef.h>

// UTF-8 text, NUL-terminated; rg_tiny_corpus_len excludes the NUL.
extern const char rg_tiny_corpus[];
extern const size_t rg_tiny_corpus_len;

#endif
