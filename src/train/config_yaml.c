// config_yaml.c - training config from a YAML file (libyaml, optional at build time):
// nested mappings flatten to dotted keys, lists only for list-valued keys,
// every error with file:line; the file is checked whole before any key is set.
#include "train/config.h"
#include "train/config_keys.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"

#ifdef RG_HAVE_YAML
#include <yaml.h>
#endif

// ------------------------------------------------------------ YAML file ---

#ifdef RG_HAVE_YAML

typedef struct seen_key {
    char key[KEY_MAX];
    size_t line;
} seen_key;

typedef struct yaml_load {
    const char *path;
    rg_train_config cfg;  // filled here, copied out only when the whole file is good
    yaml_parser_t parser;
    seen_key *seen;
    size_t n_seen, cap_seen;
    size_t n_lines;  // the text's lines, as libyaml counts them
    rg_error *err;
} yaml_load;

#define YAML_MAX_DEPTH 16
#define YAML_MAX_KEYS 4096

// libyaml's line breaks: \r\n, \r, \n, U+0085, U+2028, U+2029. A text has one line more than breaks.
static size_t count_lines(const char *t, size_t n) {
    size_t lines = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c == '\r' && i + 1 < n && t[i + 1] == '\n') i++;
        lines += c == '\n' || c == '\r' || (c == 0xC2 && i + 1 < n && (unsigned char)t[i + 1] == 0x85) ||
                 (c == 0xE2 && i + 2 < n && (unsigned char)t[i + 1] == 0x80 && ((unsigned char)t[i + 2] & 0xFE) == 0xA8);
    }
    return lines;
}

// The 1-based line of a mark. At the end of a text without a final line break libyaml moves its
// mark to a line of its own, one past the text: that is the text's last line.
static size_t mark_line(const yaml_load *L, yaml_mark_t m) { return m.line + 1 < L->n_lines ? m.line + 1 : L->n_lines; }

static size_t line_of(const yaml_load *L, const yaml_event_t *ev) { return mark_line(L, ev->start_mark); }

// The next event, refusing aliases, anchors and tags.
static rg_status next_event(yaml_load *L, yaml_event_t *ev) {
    if (!yaml_parser_parse(&L->parser, ev)) {
        yaml_parser_t *p = &L->parser;
        if (p->error == YAML_MEMORY_ERROR) return rg_fail(L->err, RG_ERR_NOMEM, "%s: out of memory reading YAML", L->path);
        if (p->error == YAML_READER_ERROR)
            return rg_fail(L->err, RG_ERR_FORMAT, "%s: cannot read YAML: %s at byte %zu", L->path,
                           p->problem ? p->problem : "error", p->problem_offset);
        char where[48] = "at the end of the file";  // past the last line: see mark_line
        if (p->problem_mark.line + 1 <= L->n_lines) snprintf(where, sizeof where, "column %zu", p->problem_mark.column + 1);
        return rg_fail(L->err, RG_ERR_FORMAT, "%s:%zu: YAML syntax error: %s (%s%s%s)", L->path,
                       mark_line(L, p->problem_mark), p->problem ? p->problem : "error", where, p->context ? ", " : "",
                       p->context ? p->context : "");
    }
    const char *anchor = NULL, *tag = NULL;
    switch (ev->type) {
    case YAML_ALIAS_EVENT: {
        anchor = (const char *)ev->data.alias.anchor;
        rg_status st = rg_fail(L->err, RG_ERR_UNSUPPORTED, "%s:%zu: YAML aliases (*%.60s) are not supported; "
                               "write the value", L->path, line_of(L, ev), anchor ? anchor : "");
        yaml_event_delete(ev);
        return st;
    }
    case YAML_SCALAR_EVENT:
        anchor = (const char *)ev->data.scalar.anchor, tag = (const char *)ev->data.scalar.tag;
        break;
    case YAML_SEQUENCE_START_EVENT:
        anchor = (const char *)ev->data.sequence_start.anchor, tag = (const char *)ev->data.sequence_start.tag;
        break;
    case YAML_MAPPING_START_EVENT:
        anchor = (const char *)ev->data.mapping_start.anchor, tag = (const char *)ev->data.mapping_start.tag;
        break;
    default: break;
    }
    rg_status st = RG_OK;
    if (anchor)
        st = rg_fail(L->err, RG_ERR_UNSUPPORTED, "%s:%zu: YAML anchors (&%.60s) are not supported", L->path,
                     line_of(L, ev), anchor);
    else if (tag)
        st = rg_fail(L->err, RG_ERR_UNSUPPORTED, "%s:%zu: YAML tags (%.60s) are not supported; values are read by "
                     "the key's type", L->path, line_of(L, ev), tag);
    if (st != RG_OK) yaml_event_delete(ev);
    return st;
}

// Records a key; a second occurrence in the file is an error naming both lines.
static rg_status note_key(yaml_load *L, const char *key, size_t line) {
    for (size_t i = 0; i < L->n_seen; i++)
        if (strcmp(L->seen[i].key, key) == 0)
            return rg_fail(L->err, RG_ERR_FORMAT, "%s:%zu: duplicate key '%s' (first at line %zu)", L->path, line, key,
                           L->seen[i].line);
    if (L->n_seen == YAML_MAX_KEYS)
        return rg_fail(L->err, RG_ERR_FORMAT, "%s:%zu: more than %d keys", L->path, line, YAML_MAX_KEYS);
    if (L->n_seen == L->cap_seen) {
        size_t cap = L->cap_seen ? 2 * L->cap_seen : 32;
        seen_key *s = realloc(L->seen, cap * sizeof *s);
        if (!s) return rg_fail(L->err, RG_ERR_NOMEM, "%s: out of memory", L->path);
        L->seen = s, L->cap_seen = cap;
    }
    snprintf(L->seen[L->n_seen].key, KEY_MAX, "%s", key);
    L->seen[L->n_seen++].line = line;
    return RG_OK;
}

// A sequence value: only lora.targets takes one. Items are checked one by one
// (so an error names the item's line), then joined and set.
static rg_status load_sequence(yaml_load *L, const char *key, const char *where) {
    if (!rg_config_is_key(key)) return rg_config_unknown_key(key, where, L->err);
    if (!rg_config_key_takes_list(key)) {
        char type[160];
        rg_config_key_type(key, type, sizeof type);
        return rg_fail(L->err, RG_ERR_ARG, "%s: a list is not allowed here; expected %s (%s)", key, type, where);
    }
    char joined[VALUE_MAX] = "";
    size_t n = 0;
    for (;;) {
        yaml_event_t ev;
        rg_status st = next_event(L, &ev);
        if (st != RG_OK) return st;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        if (ev.type != YAML_SCALAR_EVENT) {
            size_t l = line_of(L, &ev);
            yaml_event_delete(&ev);
            return rg_fail(L->err, RG_ERR_ARG, "%s: list items must be plain words (%s:%zu)", key, L->path, l);
        }
        char item_where[320];
        snprintf(item_where, sizeof item_where, "%.300s:%zu", L->path, line_of(L, &ev));
        const char *text = (const char *)ev.data.scalar.value;
        st = rg_config_check_list_item(key, text, item_where, L->err);
        if (st == RG_OK) {
            int w = snprintf(joined + n, sizeof joined - n, "%s%s", n ? "," : "", text);
            if (w < 0 || (size_t)w >= sizeof joined - n)
                st = rg_fail(L->err, RG_ERR_ARG, "%s: the list is too long (%s)", key, item_where);
            else
                n += (size_t)w;
        }
        yaml_event_delete(&ev);
        if (st != RG_OK) return st;
    }
    return rg_train_config_set(&L->cfg, key, n ? joined : "[]", where, L->err);  // "[]": an empty list
}

// The entries of one mapping, after its MAPPING-START; prefix is its dotted path.
static rg_status load_mapping(yaml_load *L, const char *prefix, int depth) {
    if (depth > YAML_MAX_DEPTH)
        return rg_fail(L->err, RG_ERR_FORMAT, "%s: mappings nested deeper than %d under '%s'", L->path, YAML_MAX_DEPTH,
                       prefix);
    for (;;) {
        yaml_event_t kev, vev;
        rg_status st = next_event(L, &kev);
        if (st != RG_OK) return st;
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            return RG_OK;
        }
        size_t line = line_of(L, &kev);
        if (kev.type != YAML_SCALAR_EVENT) {
            yaml_event_delete(&kev);
            return rg_fail(L->err, RG_ERR_FORMAT, "%s:%zu: keys must be plain text (under '%s')", L->path, line,
                           prefix[0] ? prefix : "the top level");
        }
        char key[KEY_MAX];
        int w = snprintf(key, sizeof key, "%s%s%s", prefix, prefix[0] ? "." : "", (const char *)kev.data.scalar.value);
        bool empty_key = kev.data.scalar.length == 0;
        yaml_event_delete(&kev);
        if (w < 0 || (size_t)w >= sizeof key)
            return rg_fail(L->err, RG_ERR_FORMAT, "%s:%zu: key '%.60s...' is too long", L->path, line, key);
        if (empty_key) return rg_fail(L->err, RG_ERR_FORMAT, "%s:%zu: empty key under '%s'", L->path, line, prefix);
        char where[320];
        snprintf(where, sizeof where, "%.300s:%zu", L->path, line);

        if ((st = note_key(L, key, line)) != RG_OK) return st;
        if ((st = next_event(L, &vev)) != RG_OK) return st;
        switch (vev.type) {
        case YAML_SCALAR_EVENT: {
            // "training:" with nothing under it is an empty section.
            bool empty_section = vev.data.scalar.length == 0 && vev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                                 rg_config_is_section(key);
            if (!empty_section) st = rg_train_config_set(&L->cfg, key, (const char *)vev.data.scalar.value, where, L->err);
            yaml_event_delete(&vev);
            break;
        }
        case YAML_MAPPING_START_EVENT: {
            yaml_event_delete(&vev);
            if (rg_config_is_key(key)) {
                char type[160];
                rg_config_key_type(key, type, sizeof type);
                return rg_fail(L->err, RG_ERR_ARG, "%s: a mapping is not allowed here; expected %s (%s)", key, type,
                               where);
            }
            st = load_mapping(L, key, depth + 1);
            break;
        }
        case YAML_SEQUENCE_START_EVENT:
            yaml_event_delete(&vev);
            st = load_sequence(L, key, where);
            break;
        default:
            yaml_event_delete(&vev);
            st = rg_fail(L->err, RG_ERR_FORMAT, "%s: unexpected YAML event (%s)", key, where);
            break;
        }
        if (st != RG_OK) return st;
    }
}

// STREAM-START, at most one document whose root is a mapping (or empty), STREAM-END.
static rg_status load_stream(yaml_load *L) {
    int documents = 0;
    for (;;) {
        yaml_event_t ev;
        rg_status st = next_event(L, &ev);
        if (st != RG_OK) return st;
        yaml_event_type_t type = ev.type;
        size_t line = line_of(L, &ev);
        bool empty_scalar = type == YAML_SCALAR_EVENT && ev.data.scalar.length == 0 &&
                            ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        yaml_event_delete(&ev);
        switch (type) {
        case YAML_STREAM_START_EVENT:
        case YAML_DOCUMENT_END_EVENT: break;
        case YAML_STREAM_END_EVENT: return RG_OK;
        case YAML_DOCUMENT_START_EVENT:
            if (++documents > 1)
                return rg_fail(L->err, RG_ERR_FORMAT, "%s:%zu: more than one YAML document ('---'); use one", L->path,
                               line);
            break;
        case YAML_MAPPING_START_EVENT:
            if ((st = load_mapping(L, "", 0)) != RG_OK) return st;
            break;
        case YAML_SCALAR_EVENT:
            if (empty_scalar) break;  // an empty document
            /* fall through */
        default:
            return rg_fail(L->err, RG_ERR_FORMAT, "%s:%zu: the top level must be a mapping of keys (key: value)",
                           L->path, line);
        }
    }
}

// Every event of the file, applying nothing: syntax errors come first, before
// any key's complaint about a value the broken syntax produced.
static rg_status check_syntax(yaml_load *L) {
    for (;;) {
        yaml_event_t ev;
        rg_status st = next_event(L, &ev);
        if (st != RG_OK) return st;
        bool end = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
        if (end) return RG_OK;
    }
}

#define YAML_MAX_BYTES (16u << 20)

rg_status rg_train_config_load_yaml_text(rg_train_config *c, const char *path, const char *text, size_t len,
                                        rg_error *err) {
    if (len > YAML_MAX_BYTES)
        return rg_fail(err, RG_ERR_FORMAT, "%s: %zu bytes is too large for a config (at most %u)", path, len,
                       YAML_MAX_BYTES);
    yaml_load L = {.path = path, .cfg = *c, .n_lines = count_lines(text, len), .err = err};
    rg_status st = RG_OK;
    for (int pass = 0; pass < 2 && st == RG_OK; pass++) {
        if (!yaml_parser_initialize(&L.parser)) {
            st = rg_fail(err, RG_ERR_NOMEM, "%s: cannot start the YAML parser", path);
            break;
        }
        yaml_parser_set_input_string(&L.parser, (const unsigned char *)text, len);
        st = pass == 0 ? check_syntax(&L) : load_stream(&L);
        yaml_parser_delete(&L.parser);
    }
    free(L.seen);
    if (st == RG_OK) *c = L.cfg;
    return st;
}

rg_status rg_train_config_load_yaml(rg_train_config *c, const char *path, rg_error *err) {
    struct stat sb;
    if (stat(path, &sb) != 0) return rg_fail(err, RG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return rg_fail(err, RG_ERR_IO, "%s: not a regular file", path);
    if ((uint64_t)sb.st_size > YAML_MAX_BYTES)
        return rg_fail(err, RG_ERR_FORMAT, "%s: %lld bytes is too large for a config (at most %u)", path,
                       (long long)sb.st_size, YAML_MAX_BYTES);
    FILE *f = fopen(path, "rb");
    if (!f) return rg_fail(err, RG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *text = malloc((size_t)sb.st_size + 1);
    if (!text) {
        fclose(f);
        return rg_fail(err, RG_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t size = fread(text, 1, (size_t)sb.st_size, f);
    bool read_failed = ferror(f);
    fclose(f);
    rg_status st = read_failed ? rg_fail(err, RG_ERR_IO, "%s: read failed", path)
                               : rg_train_config_load_yaml_text(c, path, text, size, err);
    free(text);
    return st;
}

#else  // !RG_HAVE_YAML

rg_status rg_train_config_load_yaml_text(rg_train_config *c, const char *path, const char *text, size_t len,
                                        rg_error *err) {
    (void)c, (void)text, (void)len;
    return rg_fail(err, RG_ERR_UNSUPPORTED, "%s: this build has no YAML support (libyaml-dev was not found at build "
                   "time); use --set key=value", path ? path : "");
}

rg_status rg_train_config_load_yaml(rg_train_config *c, const char *path, rg_error *err) {
    return rg_train_config_load_yaml_text(c, path, NULL, 0, err);
}

#endif
