/* XRANGE entries read straight from a reply's RESP bytes (mapping/connection/raw_replies.py):
 * what the compiled readers of raw pages share, adapter/kafka/_walk.c (the Fetch's
 * RecordBatches) and adapter/v1/_consume.c (V1 CONSUME's text). Each extension is one C
 * file that includes this one (setup.py's include_dirs). Every reader returns 0 for text it
 * does not read strictly: its caller leaves the page to the pure path. */
#ifndef RAW_ENTRIES_H
#define RAW_ENTRIES_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_FIELDS 64 /* an entry with more is left to the pure path */

typedef struct {
    const char *at;
    Py_ssize_t size;
} Field;

#define FIELD_IS(f, literal) \
    ((f).size == sizeof(literal) - 1 && memcmp((f).at, literal, sizeof(literal) - 1) == 0)

/* Decimal digits only (an optional '-' where allowed), at most 18 of them: what Redis and the
 * append scripts write. Anything else is left to the pure path's int(). */
static inline int parse_decimal(const char *text, Py_ssize_t size, int negative_ok,
                                int64_t *out) {
    int negative = 0;
    if (size > 0 && text[0] == '-' && negative_ok) negative = 1, text++, size--;
    if (size < 1 || size > 18) return 0;
    int64_t value = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        if (text[i] < '0' || text[i] > '9') return 0;
        value = value * 10 + (text[i] - '0');
    }
    *out = negative ? -value : value;
    return 1;
}

/* An entry id as its offset (mapping/core/codec.entry_offset) below 2**offset_bits; 0: not
 * ms-seq text within the sequence bits and that bound (the pure path's). */
static inline int parse_id_text(const char *text, Py_ssize_t size, int bits, int offset_bits,
                                int64_t *offset) {
    const char *dash = memchr(text, '-', size);
    int64_t ms, seq;
    if (dash == NULL || !parse_decimal(text, dash - text, 0, &ms) ||
        !parse_decimal(dash + 1, size - (dash + 1 - text), 0, &seq))
        return 0;
    if (seq >> bits || ms >> (offset_bits - bits)) return 0;
    *offset = (ms << bits) | seq;
    return 1;
}

/* "<type><digits>\r\n" at *pos: its number, *pos after it; 0: not that. */
static inline int raw_header(const char *buf, Py_ssize_t size, Py_ssize_t *pos, char type,
                             int64_t *out) {
    Py_ssize_t p = *pos;
    if (p >= size || buf[p] != type) return 0;
    Py_ssize_t end = p + 1; /* the '\r' */
    while (end < size && buf[end] != '\r' && end - p <= 20) end++;
    if (end + 1 >= size || buf[end] != '\r' || buf[end + 1] != '\n') return 0;
    if (!parse_decimal(buf + p + 1, end - (p + 1), 0, out)) return 0;
    *pos = end + 2;
    return 1;
}

/* A bulk string at *pos: *field set, *pos after it; 0: not one. */
static inline int raw_bulk(const char *buf, Py_ssize_t size, Py_ssize_t *pos, Field *field) {
    int64_t length;
    if (!raw_header(buf, size, pos, '$', &length) || length > size - *pos - 2) return 0;
    field->at = buf + *pos, field->size = (Py_ssize_t)length;
    if (buf[*pos + length] != '\r' || buf[*pos + length + 1] != '\n') return 0;
    *pos += (Py_ssize_t)length + 2;
    return 1;
}

/* One XRANGE entry at *pos (an array of its id and its fields' array): *pos after it; 0: not
 * one read here. */
static inline int raw_entry(const char *buf, Py_ssize_t size, Py_ssize_t *pos, Field *id,
                            Field *fields, Py_ssize_t *count) {
    int64_t two, n;
    if (!raw_header(buf, size, pos, '*', &two) || two != 2 || !raw_bulk(buf, size, pos, id) ||
        !raw_header(buf, size, pos, '*', &n) || n > MAX_FIELDS)
        return 0;
    for (int64_t f = 0; f < n; f++)
        if (!raw_bulk(buf, size, pos, &fields[f])) return 0;
    *count = (Py_ssize_t)n;
    return 1;
}

#endif
