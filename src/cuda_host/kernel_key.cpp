// kernel_key.cpp - a kernel's mangled name as nvcc spells it in the kernel table,
// read from typeid(KTag<F>).name(), i.e. "N3rgh4KTagIXadL" <F's mangled name> "EEEE".
//
// F's name inside KTag's differs from F's own in three ways, undone here:
// - the substitutions (S_, S0_, ...: back-references to earlier name components)
//   count rgh and rgh::KTag first, so each index is 2 too high;
// - a static function's name starts _ZL, nvcc's _Z;
// - the anonymous namespace is _GLOBAL__N_1 here, a hashed name under nvcc, which
//   scripts/cuda-kernel-table.sh rewrites to _GLOBAL__N_1.
// The walk over the name skips what can hold an 'S' or a digit that is not a
// substitution: <length><identifier>, literals L<type><value>E, template parameters
// T<n>_, array and vector sizes. A name it cannot read gives "": the kernel then has no
// row, which a src/cuda kernel is refused for (kernel_limits.cpp), so a misreading shows.
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_host/kernel_limits.h"

namespace rgh {

namespace {

const char kPrefix[] = "N3rgh4KTagIXadL";  // rgh::KTag< &F >
const char kSuffix[] = "EEEE";             // ends L, X, I and N
const int kShift = 2;                      // rgh and rgh::KTag come first in the substitutions

bool is_seq(char c) { return isdigit((unsigned char)c) || isupper((unsigned char)c); }

// Copies s[i..] through the next '_' (a size or a template parameter); false when there is none.
bool copy_through_underscore(const std::string &s, size_t *i, std::string *out) {
    const size_t e = s.find('_', *i);
    if (e == std::string::npos) return false;
    out->append(s, *i, e + 1 - *i);
    *i = e + 1;
    return true;
}

// Copies the <length><identifier> at s[*i]; false when the length runs past the end.
bool copy_source_name(const std::string &s, size_t *i, std::string *out) {
    char *end;
    const unsigned long len = strtoul(s.c_str() + *i, &end, 10);
    const size_t start = (size_t)(end - s.c_str());
    if (start + len > s.size()) return false;
    out->append(s, *i, start + len - *i);
    *i = start + len;
    return true;
}

// A substitution S<seq>_ at s[*i], renumbered; false when it is not one this reads.
bool renumber_substitution(const std::string &s, size_t *i, std::string *out) {
    size_t j = *i + 1;
    long idx = 0;  // S_ is 0, S0_ is 1, S<base 36 n>_ is n + 1
    bool digits = false;
    while (j < s.size() && is_seq(s[j])) {
        idx = idx * 36 + (isdigit((unsigned char)s[j]) ? s[j] - '0' : s[j] - 'A' + 10);
        digits = true, j++;
    }
    if (j >= s.size() || s[j] != '_') return false;
    if (digits) idx++;
    idx -= kShift;
    if (idx < 0) return false;  // a reference to rgh or KTag: not F's
    out->push_back('S');
    if (idx > 0) {
        char buf[16];
        int n = 0;
        for (long v = idx - 1; ; v /= 36) {
            const int d = (int)(v % 36);
            buf[n++] = (char)(d < 10 ? '0' + d : 'A' + d - 10);
            if (v < 36) break;
        }
        while (n) out->push_back(buf[--n]);
    }
    out->push_back('_');
    *i = j + 1;
    return true;
}

}  // namespace

std::string kernel_key(const char *ktag_name) {
    const size_t n = strlen(ktag_name), np = sizeof kPrefix - 1, ns = sizeof kSuffix - 1;
    if (n <= np + ns || strncmp(ktag_name, kPrefix, np) || strcmp(ktag_name + n - ns, kSuffix)) return "";
    const std::string s(ktag_name + np, n - np - ns);
    if (s.compare(0, 2, "_Z")) return "";
    std::string out = "_Z";
    size_t i = 2;
    if (i < s.size() && s[i] == 'L') i++;  // static: internal linkage, which nvcc does not spell
    while (i < s.size()) {
        const char c = s[i], d = i + 1 < s.size() ? s[i + 1] : '\0';
        if (isdigit((unsigned char)c)) {  // <length><identifier>
            if (!copy_source_name(s, &i, &out)) return "";
        } else if (c == 'S' && islower((unsigned char)d)) {  // St, Sa, Ss...: std:: abbreviations
            out.append(s, i, 2), i += 2;
        } else if (c == 'S') {
            if (!renumber_substitution(s, &i, &out)) return "";
        } else if (c == 'T' && (d == '_' || isdigit((unsigned char)d))) {  // template parameter
            if (!copy_through_underscore(s, &i, &out)) return "";
        } else if ((c == 'A' && isdigit((unsigned char)d)) || (c == 'D' && d == 'v')) {  // array, vector size
            if (!copy_through_underscore(s, &i, &out)) return "";
        } else if (c == 'L' && d != '_') {  // literal L<type><value>E (a class type's name is skipped whole)
            out.push_back('L'), i++;
            if (i < s.size() && isdigit((unsigned char)s[i]) && !copy_source_name(s, &i, &out)) return "";
            const size_t e = s.find('E', i);
            if (e == std::string::npos) return "";
            out.append(s, i, e + 1 - i);
            i = e + 1;
        } else {
            out.push_back(c), i++;
        }
    }
    return out;
}

}  // namespace rgh
