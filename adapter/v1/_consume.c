/* V1 CONSUME's reply compiled: the ``<offset>:<escaped value>,...`` list straight from an
 * XRANGE reply still in its RESP bytes (mapping/connection/raw_replies.RawReply), without a
 * Python object per record. The same text as the pure path: mapping/core/records.entry_values
 * picking each entry's offset and value, adapter/v1/escaping.escape escaping the value,
 * adapter/v1/handlers/core.py joining them.
 *
 * A page holding anything the pure path notes for the transactions layer (a transactional
 * record, a marker) or anything this file does not read (an id that is not ms-seq within the
 * sequence bits, a field that is not a bulk string, more than MAX_FIELDS fields) returns None
 * and the pure path does the whole page: so this file only has to know where the value is.
 *
 * adapter/v1/raw_consume.py loads it; tests/v1/test_compiled_consume.py checks it against the
 * pure path byte for byte. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "raw_entries.h"

#define MAX_OFFSET_TEXT 20 /* digits of an offset below 2**63 */

/* ---- escaping (adapter/v1/escaping.escape) ----------------------------------------------- */

enum { COPY, ESCAPE, MULTIBYTE };
static unsigned char byte_kind[256];

static void kinds_init(void) {
    for (int b = 0; b < 256; b++)
        byte_kind[b] = b >= 0x80 ? MULTIBYTE : b <= 0x20 || b == 0x7F ? ESCAPE : COPY;
    byte_kind['%'] = byte_kind[','] = byte_kind['|'] = ESCAPE;
}

/* The valid UTF-8 sequence at p (n bytes there) as Python's strict decoder takes it: its
 * length and code point; 0: not one (the byte is escaped alone, as surrogateescape does). */
static int utf8_char(const unsigned char *p, Py_ssize_t n, uint32_t *code) {
    unsigned char b = p[0];
    int length;
    uint32_t c;
    unsigned char low = 0x80, high = 0xBF; /* the second byte's range */
    if (b >= 0xC2 && b <= 0xDF)
        length = 2, c = b & 0x1F;
    else if (b >= 0xE0 && b <= 0xEF) {
        length = 3, c = b & 0x0F;
        if (b == 0xE0) low = 0xA0;
        if (b == 0xED) high = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        length = 4, c = b & 0x07;
        if (b == 0xF0) low = 0x90;
        if (b == 0xF4) high = 0x8F; /* at most U+10FFFF */
    } else
        return 0;
    if (n < length || p[1] < low || p[1] > high) return 0;
    c = (c << 6) | (p[1] & 0x3F);
    for (int i = 2; i < length; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (p[i] & 0x3F);
    }
    *code = c;
    return length;
}

/* A non-ASCII character escape() escapes: C1 controls and Unicode whitespace (str.isspace). */
static int escaped_char(uint32_t c) {
    if (c <= 0xA0) return 1; /* C1 controls, U+0085, U+00A0 */
    return c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

static const char HEX[] = "0123456789ABCDEF";

static char *put_escaped_byte(char *out, unsigned char b) {
    *out++ = '%', *out++ = HEX[b >> 4], *out++ = HEX[b & 15];
    return out;
}

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull
#define ANY_ZERO(x) (((x) - ONES) & ~(x) & HIGHS)
#define ANY_BELOW(x, n) (((x) - ONES * (n)) & ~(x) & HIGHS) /* n <= 128 */

/* Whether the eight bytes at p are all copied as they are (printable ASCII but '%' ',' '|'):
 * the common value's bytes, checked a word at a time. */
static int all_copied(const unsigned char *p) {
    uint64_t x;
    memcpy(&x, p, 8);
    return !(ANY_BELOW(x, 0x21) | (x & HIGHS) | ANY_ZERO(x ^ (ONES * 0x7F)) |
             ANY_ZERO(x ^ (ONES * '%')) | ANY_ZERO(x ^ (ONES * ',')) | ANY_ZERO(x ^ (ONES * '|')));
}

static char *put_value(char *out, const unsigned char *p, Py_ssize_t size) {
    Py_ssize_t i = 0;
    while (i < size) {
        Py_ssize_t run = i;
        while (run + 8 <= size && all_copied(p + run)) run += 8;
        while (run < size && byte_kind[p[run]] == COPY) run++;
        memcpy(out, p + i, run - i);
        out += run - i, i = run;
        if (i == size) break;
        if (byte_kind[p[i]] == ESCAPE) {
            out = put_escaped_byte(out, p[i++]);
            continue;
        }
        uint32_t code;
        int length = utf8_char(p + i, size - i, &code);
        if (length == 0) {
            out = put_escaped_byte(out, p[i++]);
        } else if (escaped_char(code)) {
            for (int k = 0; k < length; k++) out = put_escaped_byte(out, p[i++]);
        } else {
            memcpy(out, p + i, length);
            out += length, i += length;
        }
    }
    return out;
}

static char *put_offset(char *out, int64_t offset) {
    char digits[MAX_OFFSET_TEXT];
    int n = 0;
    uint64_t v = (uint64_t)offset;
    do digits[n++] = (char)('0' + v % 10), v /= 10;
    while (v);
    while (n) *out++ = digits[--n];
    return out;
}

/* ---- the page ---------------------------------------------------------------------------- */

typedef struct {
    int64_t offset;
    const unsigned char *value;
    Py_ssize_t size;
} Taken;

/* format_values(data, pos, count, bits, high_watermark) -> (text, records, after_first,
 * smallest) or None: see adapter/v1/raw_consume.py. */
static PyObject *format_in(const char *buf, Py_ssize_t size, Py_ssize_t pos, Py_ssize_t count,
                           int bits, long long high_watermark);

/* ``data`` is any bytes-like object (the batcher's read buffer, a bytearray, handed over
 * without copying the reply out of it), held as a buffer for the call. */
static PyObject *format_values(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, count;
    int bits;
    long long high_watermark;
    if (!PyArg_ParseTuple(args, "y*nniL", &view, &pos, &count, &bits, &high_watermark))
        return NULL;
    PyObject *result = format_in(view.buf, view.len, pos, count, bits, high_watermark);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *format_in(const char *buf, Py_ssize_t size, Py_ssize_t pos, Py_ssize_t count,
                           int bits, long long high_watermark) {
    if (count < 0 || pos < 0 || pos > size || bits < 1 || bits > 20) Py_RETURN_NONE;
    if (count == 0) return Py_BuildValue("(snnn)", "", (Py_ssize_t)0, (Py_ssize_t)0, (Py_ssize_t)0);

    Taken *taken = PyMem_Malloc(sizeof(Taken) * (size_t)count);
    if (taken == NULL) return PyErr_NoMemory();
    Field id, fields[MAX_FIELDS];
    Py_ssize_t field_count, n = 0, bound = 0, after_first = 0, smallest = 0;
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t offset;
        if (!raw_entry(buf, size, &pos, &id, fields, &field_count) ||
            !parse_id_text(id.at, id.size, bits, 62, &offset))
            goto pure;
        if (offset > high_watermark) break;
        Field value = {"", 0};
        Py_ssize_t f = field_count;
        if (f >= 6 && FIELD_IS(fields[f - 6], "pid")) goto pure; /* transactional */
        if (f > 3 && FIELD_IS(fields[2], "value")) {
            value = fields[3]; /* key K value V ...: as the appends write */
        } else if (f > 0 && FIELD_IS(fields[0], "ctl")) {
            goto pure; /* a marker */
        } else {
            for (Py_ssize_t k = 0; k + 1 < f; k += 2) /* the last one, as dict() keeps */
                if (FIELD_IS(fields[k], "value")) value = fields[k + 1];
        }
        taken[n].offset = offset;
        taken[n].value = (const unsigned char *)value.at, taken[n].size = value.size;
        if (n > 0) after_first += value.size;
        if (n == 0 || value.size < smallest) smallest = value.size;
        if (value.size > (PY_SSIZE_T_MAX - bound) / 4 - MAX_OFFSET_TEXT) goto pure;
        bound += MAX_OFFSET_TEXT + 2 + 3 * value.size;
        n++;
    }
    char *text = PyMem_Malloc(bound + 1);
    if (text == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    char *out = text;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i) *out++ = ',';
        out = put_offset(out, taken[i].offset);
        *out++ = ':';
        out = put_value(out, taken[i].value, taken[i].size);
    }
    /* valid UTF-8 by construction: ASCII is copied, not decoded */
    PyObject *decoded = PyUnicode_DecodeUTF8(text, out - text, NULL);
    PyMem_Free(text);
    if (decoded != NULL) result = Py_BuildValue("(Nnnn)", decoded, n, after_first, smallest);
    goto out;
pure:
    result = Py_NewRef(Py_None);
out:
    PyMem_Free(taken);
    return result;
}

static PyMethodDef methods[] = {
    {"format_values", format_values, METH_VARARGS,
     "V1 CONSUME's '<offset>:<escaped value>,...' of a raw XRANGE reply's entries up to the "
     "high watermark, with the records' count, the value bytes after the first and the "
     "smallest value's size; None: the pure path's page."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef consume_module = {
    PyModuleDef_HEAD_INIT, "_consume", "V1 CONSUME's reply from raw XRANGE replies.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__consume(void) {
    kinds_init();
    return PyModule_Create(&consume_module);
}
