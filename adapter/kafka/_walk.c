/* The Fetch's hot loop compiled: one RecordBatch of the common plain records straight from
 * raw XRANGE entries, the same bytes as mapping/partition/record_walk.walk_entries' fast path
 * feeding aiokafka's builder and adapter/kafka/records.finish_batch (uncompressed, CreateTime,
 * not transactional). Anything else returns None and the pure-Python path does the batch, so
 * this file only has to know the two layouts (mapping/core/records.py):
 *
 *   value V ts T create_ts C null key n N          (a null key)
 *   key K value V ts T create_ts C n N             (a key and a value)
 *
 * each with the CreateTime as create_ts or, as the streamadapter module writes it, as
 * create_dt (its difference from ts).
 *
 * adapter/kafka/fetch_reads.encode_entries calls it through adapter/kafka/records.py, which
 * falls back to the pure path where this is not built (or ADAPTER_PURE_PYTHON is set). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "raw_entries.h"

#define RECORD_OVERHEAD 32                   /* record_walk.RECORD_OVERHEAD */
#define MAX_OFFSET_DELTA ((int64_t)INT32_MAX) /* record_walk.MAX_OFFSET_DELTA */
#define HEADER_BYTES 61                      /* a v2 batch without records */
#define ATTRIBUTES_AT 21                     /* the CRC covers the bytes from here on */
#define MAX_BATCH ((int64_t)1 << 31)         /* records.batch_builder's batch size */

/* ---- CRC-32C (Castagnoli, reflected 0x82F63B78), the RecordBatch checksum ---------------- */

static uint32_t crc_table[8][256]; /* slicing by 8: eight bytes a step without the instruction */

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            crc_table[t][n] = (crc_table[t - 1][n] >> 8) ^ crc_table[0][crc_table[t - 1][n] & 0xff];
}

static uint32_t crc_tables(uint32_t crc, const unsigned char *p, size_t n) {
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t low = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                              (uint32_t)p[3] << 24);
        crc = crc_table[7][low & 0xff] ^ crc_table[6][(low >> 8) & 0xff] ^
              crc_table[5][(low >> 16) & 0xff] ^ crc_table[4][low >> 24] ^ crc_table[3][p[4]] ^
              crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
    }
    while (n--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
/* SSE4.2's crc32 instruction computes the same polynomial several times faster than the
 * tables: a batch of 8,000 records is a megabyte to checksum. */
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const unsigned char *p,
                                                            size_t n) {
    uint64_t c = crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
    }
    crc = (uint32_t)c;
    while (n--) crc = _mm_crc32_u8(crc, *p++);
    return crc;
}
static int has_sse42;
#define CRC_PROBE() (has_sse42 = __builtin_cpu_supports("sse4.2"))
#else
#define CRC_PROBE() ((void)0)
#endif

static uint32_t crc32c(const unsigned char *p, size_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (has_sse42) return ~crc_sse42(~0u, p, n);
#endif
    return ~crc_tables(~0u, p, n);
}

/* ---- varints and big-endian fields, as the Kafka protocol writes them -------------------- */

static int varint_size(int64_t value) {
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63); /* zigzag */
    int size = 1;
    while (v >= 0x80) v >>= 7, size++;
    return size;
}

static unsigned char *put_varint(unsigned char *out, int64_t value) {
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (v >= 0x80) *out++ = (unsigned char)(v | 0x80), v >>= 7;
    *out++ = (unsigned char)v;
    return out;
}

static unsigned char *put_be(unsigned char *out, uint64_t value, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) out[i] = (unsigned char)value, value >>= 8;
    return out + bytes;
}

/* ---- reading the entries ----------------------------------------------------------------- */

static int is_name(PyObject *field, const char *name, Py_ssize_t size) {
    return PyBytes_CheckExact(field) && PyBytes_GET_SIZE(field) == size &&
           memcmp(PyBytes_AS_STRING(field), name, size) == 0;
}
#define IS(field, literal) is_name(field, literal, sizeof(literal) - 1)

static int parse_id(PyObject *id, int bits, int64_t *offset) {
    return PyBytes_CheckExact(id) &&
           parse_id_text(PyBytes_AS_STRING(id), PyBytes_GET_SIZE(id), bits, 61, offset);
}

typedef struct {
    int64_t delta, timestamp, timestamp_delta;
    const char *key, *value; /* within the entries (borrowed); key NULL: a null key */
    Py_ssize_t key_size, value_size;
} Taken;

static void take_bytes(PyObject *field, const char **at, Py_ssize_t *size) {
    *at = PyBytes_AS_STRING(field), *size = PyBytes_GET_SIZE(field);
}

/* A record's CreateTime from its fields at `at` (ts T, then create_ts C or create_dt D),
 * given as bytes' text and size each: 0 when they are not that. */
static int create_time(const char *const *text, const Py_ssize_t *size, int64_t *out) {
    static const char ts[] = "ts", create_ts[] = "create_ts", create_dt[] = "create_dt";
    int64_t append_time, stamp;
    if (size[0] != 2 || memcmp(text[0], ts, 2) != 0 || size[2] != 9) return 0;
    if (!parse_decimal(text[3], size[3], 1, &stamp)) return 0;
    if (memcmp(text[2], create_ts, 9) == 0) {
        *out = stamp;
        return 1;
    }
    if (memcmp(text[2], create_dt, 9) != 0 || !parse_decimal(text[1], size[1], 0, &append_time))
        return 0;
    *out = append_time + stamp;
    return 1;
}

/* create_time over four fields of an XRANGE entry's list. */
static int create_time_of(PyObject **fields, int64_t *out) {
    const char *text[4];
    Py_ssize_t size[4];
    for (int i = 0; i < 4; i++) {
        if (!PyBytes_CheckExact(fields[i])) return 0;
        text[i] = PyBytes_AS_STRING(fields[i]), size[i] = PyBytes_GET_SIZE(fields[i]);
    }
    return create_time(text, size, out);
}

/* The common layouts (record_walk's fast path): 1 with *taken filled, 0 not one of them. */
static int fast_record(PyObject **fields, Py_ssize_t count, Taken *taken) {
    PyObject *value;
    PyObject **times; /* ts T create_ts C (or create_dt D) */
    if (count != 10 || !IS(fields[8], "n")) return 0;
    if (IS(fields[0], "value")) {
        if (!IS(fields[6], "null")) return 0;
        taken->key = NULL, taken->key_size = 0, value = fields[1], times = fields + 2;
    } else {
        if (!IS(fields[0], "key") || !IS(fields[2], "value")) return 0;
        value = fields[3], times = fields + 4;
        if (!PyBytes_CheckExact(fields[1])) return 0;
        take_bytes(fields[1], &taken->key, &taken->key_size);
    }
    if (!PyBytes_CheckExact(value)) return 0;
    take_bytes(value, &taken->value, &taken->value_size);
    return create_time_of(times, &taken->timestamp);
}

/* Whether an entry that is not a fast one ends a plain batch in walk_entries: a transaction
 * marker or a transactional record (their own batches). Another (headers, a tombstone...)
 * would join the batch through the general path: the whole batch is left to the pure path. */
static int ends_plain_batch(PyObject **fields, Py_ssize_t size) {
    if (size >= 2 && IS(fields[size - 2], "n")) size -= 2;
    if (size > 0 && IS(fields[0], "ctl")) return 1;
    return size >= 4 && IS(fields[size - 4], "pid");
}

static int sequence_of(PyObject *item, PyObject ***items, Py_ssize_t *count) {
    if (PyList_CheckExact(item)) {
        *items = ((PyListObject *)item)->ob_item, *count = PyList_GET_SIZE(item);
        return 1;
    }
    if (PyTuple_CheckExact(item)) {
        *items = ((PyTupleObject *)item)->ob_item, *count = PyTuple_GET_SIZE(item);
        return 1;
    }
    return 0;
}

/* ---- the batch --------------------------------------------------------------------------- */

/* A record's bytes after its length: attributes, timestamp and offset deltas, key (length -1:
 * null), value, header count (0). */
static int64_t record_body(const Taken *t) {
    int64_t size = 1 + varint_size(t->timestamp_delta) + varint_size(t->delta);
    if (t->key == NULL)
        size += 1;
    else
        size += varint_size(t->key_size) + t->key_size;
    return size + varint_size(t->value_size) + t->value_size + 1;
}

/* aiokafka's DefaultRecordBatchBuilder layout, as finish_batch leaves it: the base offset set,
 * producer -1, no attributes (the leader epoch, 0 here, is set after). NULL with no error set:
 * too big for one batch (the pure path's). */
static PyObject *build_batch(Taken *taken, Py_ssize_t count, int64_t base) {
    /* The first and max timestamps as aiokafka's compiled builder keeps them: a first of -1
     * (no timestamp) counts as none yet, and the next record's takes its place. */
    int64_t first_timestamp = -1, max_timestamp = -1;
    int64_t size = HEADER_BYTES;
    for (Py_ssize_t i = 0; i < count; i++) {
        Taken *t = &taken[i];
        if (first_timestamp == -1) {
            first_timestamp = max_timestamp = t->timestamp;
            t->timestamp_delta = 0;
        } else {
            t->timestamp_delta = t->timestamp - first_timestamp;
            if (t->timestamp > max_timestamp) max_timestamp = t->timestamp;
        }
        int64_t body = record_body(t);
        size += varint_size(body) + body;
    }
    if (size > MAX_BATCH) return NULL;
    PyObject *batch = PyBytes_FromStringAndSize(NULL, size);
    if (batch == NULL) return NULL;
    unsigned char *start = (unsigned char *)PyBytes_AS_STRING(batch), *out = start;
    out = put_be(out, (uint64_t)base, 8);
    out = put_be(out, (uint64_t)(size - 12), 4);
    out = put_be(out, 0, 4); /* the partition leader epoch */
    *out++ = 2; /* magic */
    out = put_be(out, 0, 4); /* the CRC, once the rest is written */
    out = put_be(out, 0, 2); /* attributes */
    out = put_be(out, (uint64_t)taken[count - 1].delta, 4); /* the last offset delta */
    out = put_be(out, (uint64_t)first_timestamp, 8);
    out = put_be(out, (uint64_t)max_timestamp, 8);
    out = put_be(out, (uint64_t)-1, 8); /* producer id */
    out = put_be(out, (uint64_t)-1, 2); /* producer epoch */
    out = put_be(out, (uint64_t)-1, 4); /* base sequence */
    out = put_be(out, (uint64_t)count, 4);
    for (Py_ssize_t i = 0; i < count; i++) {
        const Taken *t = &taken[i];
        out = put_varint(out, record_body(t));
        *out++ = 0; /* the record's attributes */
        out = put_varint(out, t->timestamp_delta);
        out = put_varint(out, t->delta);
        if (t->key == NULL) {
            out = put_varint(out, -1);
        } else {
            out = put_varint(out, t->key_size);
            memcpy(out, t->key, t->key_size);
            out += t->key_size;
        }
        out = put_varint(out, t->value_size);
        memcpy(out, t->value, t->value_size);
        out += t->value_size;
        *out++ = 0; /* no headers */
    }
    put_be(start + 17, crc32c(start + ATTRIBUTES_AT, size - ATTRIBUTES_AT), 4);
    return batch;
}

/* A bound as a C integer. Python's may be any size: one beyond +-2**62 is as good as
 * unbounded, offsets taken here being under 2**61 (parse_id) and deltas under 2**31. */
static int clamped(PyObject *number, int64_t *out) {
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(number, &overflow);
    if (value == -1 && PyErr_Occurred()) return 0;
    const int64_t bound = (int64_t)1 << 62;
    *out = overflow > 0 || value > bound ? bound : overflow < 0 || value < -bound ? -bound : value;
    return 1;
}

/* The batch of ``taken`` with the leader epoch of its last record (KIP-320), asked once the
 * entries are read (epoch_at is Python code) and written into the new batch before anyone sees
 * it: it is not under the CRC. A new reference, None (too big: the pure path's) or NULL. */
static PyObject *finish_batch(Taken *taken, Py_ssize_t n, int64_t base, int64_t last_offset,
                              int bits, PyObject *epoch_at) {
    PyObject *batch = build_batch(taken, n, base);
    if (batch == NULL) return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    if (epoch_at != Py_None) {
        PyObject *found = PyObject_CallFunction(epoch_at, "L", (long long)(last_offset >> bits));
        long epoch = found == NULL ? -1 : PyLong_AsLong(found);
        Py_XDECREF(found);
        if (epoch == -1 && PyErr_Occurred()) {
            Py_DECREF(batch);
            return NULL;
        }
        if (epoch < INT32_MIN || epoch > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "leader epoch out of int32 range");
            Py_DECREF(batch);
            return NULL;
        }
        put_be((unsigned char *)PyBytes_AS_STRING(batch) + 12, (uint64_t)epoch, 4);
    }
    return batch;
}

/* plain_batch(entries, start, bits, high_watermark, budget, take_first, epoch_at)
 * -> (batch, end, used, done) or None: see adapter/kafka/records.py. */
static PyObject *plain_batch(PyObject *module, PyObject *args) {
    PyObject *entries, *epoch_at, *high_watermark_arg, *budget_arg;
    Py_ssize_t start;
    int bits, take_first;
    if (!PyArg_ParseTuple(args, "OniO!O!pO", &entries, &start, &bits, &PyLong_Type,
                          &high_watermark_arg, &PyLong_Type, &budget_arg, &take_first, &epoch_at))
        return NULL;
    int64_t high_watermark, budget;
    if (!PyList_CheckExact(entries) || !clamped(high_watermark_arg, &high_watermark) ||
        !clamped(budget_arg, &budget))
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    Py_ssize_t count = PyList_GET_SIZE(entries);
    if (start < 0 || start >= count || bits < 1 || bits > 20) Py_RETURN_NONE;

    Taken *taken = PyMem_Malloc(sizeof(Taken) * (size_t)(count - start));
    if (taken == NULL) return PyErr_NoMemory();
    Py_ssize_t n = 0;
    int64_t base = -1, limit = 0, used = 0, last_offset = 0;
    int done = 0, pure = 0;
    Py_ssize_t i;
    for (i = start; i < count; i++) {
        PyObject **pair, **fields;
        Py_ssize_t pair_size, field_count;
        int64_t offset;
        if (!sequence_of(PyList_GET_ITEM(entries, i), &pair, &pair_size) || pair_size != 2 ||
            !sequence_of(pair[1], &fields, &field_count) || !parse_id(pair[0], bits, &offset)) {
            pure = 1;
            break;
        }
        if (base < 0) {
            base = offset;
            limit = high_watermark - base < MAX_OFFSET_DELTA ? high_watermark - base
                                                             : MAX_OFFSET_DELTA;
        }
        Taken *t = &taken[n];
        t->delta = offset - base;
        if (t->delta > limit) {
            done = t->delta + base > high_watermark;
            break;
        }
        if (!fast_record(fields, field_count, t)) {
            pure = n == 0 || !ends_plain_batch(fields, field_count);
            break;
        }
        int64_t length = t->key_size + t->value_size + RECORD_OVERHEAD;
        if (used + length > budget && (n > 0 || !take_first)) {
            done = 1;
            break;
        }
        used += length;
        last_offset = offset;
        n++;
    }
    PyObject *result = NULL;
    if (pure || n == 0) { /* the pure path's batch (or its reason to take nothing) */
        result = Py_NewRef(Py_None);
        goto out;
    }
    result = finish_batch(taken, n, base, last_offset, bits, epoch_at);
    if (result != NULL && result != Py_None) {
        PyObject *batch = result;
        result = Py_BuildValue("(NnLO)", batch, i, (long long)used, done ? Py_True : Py_False);
    }
out:
    PyMem_Free(taken);
    return result;
}

/* ---- the same from the XRANGE reply's RESP bytes (mapping/connection/raw_replies.py) ----- */

static int fast_record_raw(const Field *fields, Py_ssize_t count, Taken *taken) {
    const Field *times;
    if (count != 10 || !FIELD_IS(fields[8], "n")) return 0;
    if (FIELD_IS(fields[0], "value")) {
        if (!FIELD_IS(fields[6], "null")) return 0;
        taken->key = NULL, taken->key_size = 0, times = fields + 2;
        taken->value = fields[1].at, taken->value_size = fields[1].size;
    } else {
        if (!FIELD_IS(fields[0], "key") || !FIELD_IS(fields[2], "value")) return 0;
        taken->key = fields[1].at, taken->key_size = fields[1].size;
        taken->value = fields[3].at, taken->value_size = fields[3].size;
        times = fields + 4;
    }
    const char *text[4] = {times[0].at, times[1].at, times[2].at, times[3].at};
    const Py_ssize_t size[4] = {times[0].size, times[1].size, times[2].size, times[3].size};
    return create_time(text, size, &taken->timestamp);
}

static int ends_plain_batch_raw(const Field *fields, Py_ssize_t size) {
    if (size >= 2 && FIELD_IS(fields[size - 2], "n")) size -= 2;
    if (size > 0 && FIELD_IS(fields[0], "ctl")) return 1;
    return size >= 4 && FIELD_IS(fields[size - 4], "pid");
}

/* plain_batch_raw(data, pos, index, count, bits, high_watermark, budget, take_first, epoch_at)
 * -> (batch, end, end_pos, used, done) or None: plain_batch over entries index.. of a raw
 * XRANGE reply (``data``: its bytes, entry ``index`` at byte ``pos``, ``count`` entries),
 * ``end_pos`` where entry ``end`` starts. */
static PyObject *walk_raw(const char *buf, Py_ssize_t size, Py_ssize_t pos, Py_ssize_t start,
                          Py_ssize_t count, int bits, int64_t high_watermark, int64_t budget,
                          int take_first, PyObject *epoch_at);

/* ``data`` is any bytes-like object (the batcher hands over its read buffer, a bytearray,
 * without copying the reply out of it): held as a buffer for the call, so it cannot be
 * resized meanwhile (epoch_at runs Python code). */
static PyObject *plain_batch_raw(PyObject *module, PyObject *args) {
    Py_buffer view;
    PyObject *epoch_at, *high_watermark_arg, *budget_arg;
    Py_ssize_t pos, start, count;
    int bits, take_first;
    if (!PyArg_ParseTuple(args, "y*nnniO!O!pO", &view, &pos, &start, &count, &bits,
                          &PyLong_Type, &high_watermark_arg, &PyLong_Type, &budget_arg,
                          &take_first, &epoch_at))
        return NULL;
    int64_t high_watermark, budget;
    PyObject *result = NULL;
    if (clamped(high_watermark_arg, &high_watermark) && clamped(budget_arg, &budget))
        result = walk_raw(view.buf, view.len, pos, start, count, bits, high_watermark, budget,
                          take_first, epoch_at);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *walk_raw(const char *buf, Py_ssize_t size, Py_ssize_t pos, Py_ssize_t start,
                          Py_ssize_t count, int bits, int64_t high_watermark, int64_t budget,
                          int take_first, PyObject *epoch_at) {
    if (start < 0 || start >= count || pos < 0 || pos >= size || bits < 1 || bits > 20)
        Py_RETURN_NONE;

    Taken *taken = PyMem_Malloc(sizeof(Taken) * (size_t)(count - start));
    if (taken == NULL) return PyErr_NoMemory();
    Field id, fields[MAX_FIELDS];
    Py_ssize_t field_count, n = 0, i;
    int64_t base = -1, limit = 0, used = 0, last_offset = 0;
    int done = 0, pure = 0;
    for (i = start; i < count; i++) {
        Py_ssize_t next = pos;
        int64_t offset;
        if (!raw_entry(buf, size, &next, &id, fields, &field_count) ||
            !parse_id_text(id.at, id.size, bits, 61, &offset)) {
            pure = 1;
            break;
        }
        if (base < 0) {
            base = offset;
            limit = high_watermark - base < MAX_OFFSET_DELTA ? high_watermark - base
                                                             : MAX_OFFSET_DELTA;
        }
        Taken *t = &taken[n];
        t->delta = offset - base;
        if (t->delta > limit) {
            done = t->delta + base > high_watermark;
            break;
        }
        if (!fast_record_raw(fields, field_count, t)) {
            pure = n == 0 || !ends_plain_batch_raw(fields, field_count);
            break;
        }
        int64_t length = t->key_size + t->value_size + RECORD_OVERHEAD;
        if (used + length > budget && (n > 0 || !take_first)) {
            done = 1;
            break;
        }
        used += length;
        last_offset = offset;
        pos = next;
        n++;
    }
    PyObject *result;
    if (pure || n == 0) {
        result = Py_NewRef(Py_None);
    } else {
        result = finish_batch(taken, n, base, last_offset, bits, epoch_at);
        if (result != NULL && result != Py_None) {
            PyObject *batch = result;
            result = Py_BuildValue("(NnnLO)", batch, i, pos, (long long)used,
                                   done ? Py_True : Py_False);
        }
    }
    PyMem_Free(taken);
    return result;
}

/* crc32c(buffer, tables=False): the checksum the batches carry; ``tables``: by the tables
 * even where the instruction is there (the tests check both against aiokafka's). */
static PyObject *checksum(PyObject *module, PyObject *args) {
    Py_buffer view;
    int tables = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &view, &tables)) return NULL;
    uint32_t crc = tables ? ~crc_tables(~0u, view.buf, (size_t)view.len)
                          : crc32c(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"plain_batch", plain_batch, METH_VARARGS,
     "One uncompressed RecordBatch of the common plain records from entries[start] on, or "
     "None (the pure path's batch)."},
    {"plain_batch_raw", plain_batch_raw, METH_VARARGS,
     "plain_batch over a raw XRANGE reply's entries from entries[index] at byte pos on, or "
     "None."},
    {"crc32c", checksum, METH_VARARGS, "The CRC-32C of a buffer (the tests check it)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef walk_module = {
    PyModuleDef_HEAD_INIT, "_walk", "The Fetch's RecordBatch encoding of the common records.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__walk(void) {
    crc_init();
    CRC_PROBE();
    return PyModule_Create(&walk_module);
}
