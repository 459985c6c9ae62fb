/* streamadapter: a Redis module with five commands, the XADDs of an append in one call, a
 * whole Kafka produce (of one batch, or of several of one partition) or V1 PRODUCE in one
 * call (produce_commands.h) and the copy of a log's entries into a replica stream in one call.
 *
 *   STREAMADAPTER.APPEND log limit now ms seq numbered layout record...
 *   STREAMADAPTER.PRODUCE log state hw_channel appended producers producer_times txn_open now
 *                         ARGV...
 *   STREAMADAPTER.PRODUCEMANY (PRODUCE's keys) now bits rf lag_max_ms batch [batch ...]
 *   STREAMADAPTER.V1PRODUCE log state hw_channel appended now ARGV...
 *   STREAMADAPTER.COPY log replica after last count
 *
 * kafka/produce.lua, partition/produce.lua (V1 PRODUCE) and spark/sink_append.lua call APPEND
 * (through lib/append.lua's append_records) where they would call XADD once per record: a
 * call from a script costs Redis about twice the record's own XADD (arguments to Redis
 * strings, the command's lookup and its reply, the interpreter), and this one call per batch
 * writes exactly the entries the script's loop writes, through the server's own stream
 * append. The ids and numbers follow lib/append.lua's next_entry:
 * a record's id is (ms, seq) with ms = max(now, the last ms) and seq the next one on that
 * ms, rolling to the next ms when seq would reach `limit` (2^sequence bits); its 'n' field
 * is `numbered` + 1, + 2, ... With `layout` kafka, each record is one of kafka/produce.lua's
 * forms (mapping/core/records.py owns the fields and their order):
 *   -1 value create_ts               key null: value, ts, create_dt, null=key, n
 *   -2 key value create_ts           key, value, ts, create_dt, n
 *   count lead item1 .. item<count>  the lead items, ts, the other items, n
 *   -3 first_timestamp count records a Kafka RecordBatch's records as sent (uncompressed,
 *                                    after its header; no headers in them: kafka_record.h),
 *                                    each as record_items lays it out, its CreateTime the
 *                                    first timestamp + its delta
 * where a record's CreateTime is written as create_dt, its difference from `ts` (a
 * create_ts item of the long form too): the scripts' own XADDs write create_ts, and every
 * reader takes both (records.py).
 * with `layout` v1, a V1 record: key value (key, value, ts, n); and with `layout` packed,
 * V1 records packed into one argument (partition/produce.lua's, so that a record costs no
 * argument of its own in the script): each record its key and its value, each as a 4-byte
 * big-endian length and its bytes (mapping/core/records.py's packed_pairs).
 * `ts` is the append time, `now`'s own text. The records taken are those whole ones the
 * arguments hold (a script passes a window of its arguments: Lua unpacks at most 8000
 * values); every one is checked before the first is written. The reply:
 *   [arguments taken, records, first ms, first seq, last ms, last seq, numbered, largest]
 * (numbered: the last record's number; largest: the largest value's size in bytes).
 *
 * STREAMADAPTER.COPY is partition/replica_fetch.lua's copy of the leader log's entries into a
 * follower's replica stream (it would XRANGE them into the interpreter and XADD each one):
 * the entries of `log` after id `after` ('-': from the first) up to id `last`, at most
 * `count` of them, appended to `replica` with their ids and fields. The reply:
 *   [entries copied, the last one's ms, its seq] (-1, -1 when none was).
 *
 * Both commands are replicated and written to the AOF as called: each reads nothing but its
 * arguments and the streams, so a replica or a reload writes the same entries. */
#include <stdlib.h>
#include <string.h>

#include "kafka_record.h"
#include "module_api.h"

#define MODULE_NAME "streamadapter"
#define MODULE_VERSION 1
#define FIRST_RECORD 8
#define SHORT_NULL_KEY -1
#define SHORT_KEY_VALUE -2
#define RAW_BATCH -3
#define FEW_FIELDS 64
#define WRONG_TYPE "WRONGTYPE Operation against a key holding the wrong kind of value"
/* only a stream whose last id is past the state's log end: XADD fails the same way */
#define ID_TOO_SMALL "ERR The ID specified in XADD is equal or smaller than the target stream top item"

enum { F_KEY, F_VALUE, F_TS, F_CREATE_TS, F_CREATE_DT, F_NULL, F_N, FIELD_NAMES };
static const char *const field_texts[FIELD_NAMES] = {"key",       "value", "ts", "create_ts",
                                                     "create_dt", "null",  "n"};
static RedisModuleString *field_names[FIELD_NAMES];
static RedisModuleString *null_both; /* the null field's "key value" */

/* A whole decimal number (optional '-') of `len` bytes at `p`; 0 when it is not one. */
static int parse_digits(const char *p, size_t len, long long *out) {
    size_t i = 0;
    int negative = 0;
    unsigned long long value = 0;
    if (len > 0 && p[0] == '-') {
        negative = 1;
        i = 1;
    }
    if (i == len || len - i > 18) return 0;
    for (; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        value = value * 10 + (unsigned long long)(p[i] - '0');
    }
    *out = negative ? -(long long)value : (long long)value;
    return 1;
}

/* A whole decimal number (optional '-'), or 0 when `text` is not one. */
static int parse_long(const RedisModuleString *text, long long *out) {
    size_t len;
    const char *p = RedisModule_StringPtrLen(text, &len);
    return parse_digits(p, len, out);
}

static int is_text(const RedisModuleString *name, const char *text) {
    size_t len;
    const char *p = RedisModule_StringPtrLen(name, &len);
    return len == strlen(text) && memcmp(p, text, len) == 0;
}

static size_t byte_size(const RedisModuleString *text) {
    size_t len;
    RedisModule_StringPtrLen(text, &len);
    return len;
}

enum { LAYOUT_KAFKA, LAYOUT_V1, LAYOUT_PACKED };

/* How many arguments a record of `form` (its first argument; any in the V1 layouts) takes. */
static int form_width(long long form, int layout) {
    if (layout == LAYOUT_V1) return 2;
    if (layout == LAYOUT_PACKED) return 1;
    if (form == RAW_BATCH) return 4;
    if (form == SHORT_NULL_KEY) return 3;
    if (form == SHORT_KEY_VALUE) return 4;
    return (int)(2 + form); /* count lead item1 .. item<count> */
}

/* A packed record's part (a 4-byte big-endian length, then its bytes) at *at, before end:
 * its bytes and size, *at moved past it; NULL when the part does not fit. */
static const unsigned char *packed_part(const unsigned char **at, const unsigned char *end,
                                        size_t *size) {
    if (end - *at < 4) return NULL;
    const unsigned char *p = *at;
    size_t length = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | (size_t)p[3];
    if ((size_t)(end - p - 4) < length) return NULL;
    *at = p + 4 + length;
    *size = length;
    return p + 4;
}

/* Whether `data` holds one or more whole packed records and nothing else. */
static int packed_records(const unsigned char *data, size_t size) {
    const unsigned char *at = data, *end = data + size;
    size_t part;
    if (at == end) return 0;
    while (at < end) {
        if (packed_part(&at, end, &part) == NULL || packed_part(&at, end, &part) == NULL) {
            return 0;
        }
    }
    return 1;
}

/* How many arguments the record at argv[at] takes (0: it does not fit in argc or is
 * malformed: *malformed says which). */
static int record_width(RedisModuleString **argv, int argc, int at, int layout, int *malformed) {
    long long form = 0, lead, count;
    *malformed = 0;
    if (layout == LAYOUT_PACKED) {
        size_t size;
        const char *data = RedisModule_StringPtrLen(argv[at], &size);
        *malformed = !packed_records((const unsigned char *)data, size);
        return *malformed ? 0 : 1;
    }
    if (layout == LAYOUT_KAFKA && !parse_long(argv[at], &form)) {
        *malformed = 1;
        return 0;
    }
    int width = form_width(form, layout);
    if (layout == LAYOUT_V1 || form == SHORT_NULL_KEY || form == SHORT_KEY_VALUE) {
        return at + width <= argc ? width : 0;
    }
    if (form == RAW_BATCH) {
        if (at + width > argc) return 0;
        size_t size;
        const char *data = RedisModule_StringPtrLen(argv[at + 3], &size);
        if (!parse_long(argv[at + 1], &lead) || !parse_long(argv[at + 2], &count) ||
            lead >= KAFKA_TIME_BOUND || lead <= -KAFKA_TIME_BOUND ||
            !kafka_plain_records((const unsigned char *)data, size, count)) {
            *malformed = 1;
            return 0;
        }
        return width;
    }
    if (form < 0 || form % 2 != 0 || form > 1 << 20) {
        *malformed = 1;
        return 0;
    }
    if (at + 1 >= argc) return 0;
    if (!parse_long(argv[at + 1], &lead) || lead < 0 || lead > form || lead % 2 != 0) {
        *malformed = 1;
        return 0;
    }
    return at + width <= argc ? width : 0;
}

/* A number's decimal text into buf (at least 21 bytes); its length. */
static size_t decimal(unsigned long long value, char *buf) {
    char digits[21];
    size_t n = 0;
    do {
        digits[n++] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    for (size_t i = 0; i < n; i++) buf[i] = digits[n - 1 - i];
    return n;
}

enum { SCRATCH_KEY, SCRATCH_VALUE, SCRATCH_NUMBER, SCRATCH_TEXTS };

/* An append in progress: the log, where its ids and numbers are, what it wrote. */
typedef struct {
    RedisModuleCtx *ctx;
    RedisModuleKey *log;
    long long limit, now, ms, seq, numbered;
    long long first_ms, first_seq, count;
    size_t largest;
    RedisModuleString *create_dt; /* the last record's create_dt text (most records share one) */
    long long create_time;        /* the CreateTime it was made for */
    RedisModuleString *now_text;  /* the records' ts: `now`'s text */
    RedisModuleString *scratch[SCRATCH_TEXTS]; /* scratch_text's */
} Append;

/* `bytes` as the append's scratch text `slot` (a key, a value, a record number): the string
 * made for an earlier record is written over where it has the same length, else made anew.
 * It is this module's own (made here, never shared: StreamAdd copies what it is given), so
 * writing over it is safe; most records of a batch have values of one length, and this
 * saves an allocation and a free a field (about a tenth of a small record's cost). */
static RedisModuleString *scratch_text(Append *a, int slot, const void *bytes, size_t size) {
    RedisModuleString *text = a->scratch[slot];
    if (text != NULL) {
        size_t length;
        char *buffer = (char *)RedisModule_StringPtrLen(text, &length);
        if (length == size) {
            memcpy(buffer, bytes, size);
            return text;
        }
        RedisModule_FreeString(a->ctx, text);
    }
    return a->scratch[slot] = RedisModule_CreateString(a->ctx, bytes, size);
}

/* An append's end: what it made for its records freed. */
static void append_done(Append *a) {
    if (a->create_dt != NULL) RedisModule_FreeString(a->ctx, a->create_dt);
    a->create_dt = NULL;
    for (int i = 0; i < SCRATCH_TEXTS; i++) {
        if (a->scratch[i] != NULL) RedisModule_FreeString(a->ctx, a->scratch[i]);
        a->scratch[i] = NULL;
    }
}

/* Appends one entry: `fields` (`used` of them, room for two more: 'n' and the number). */
static int add_entry(Append *a, RedisModuleString **fields, int used, size_t value_bytes) {
    a->seq += 1;
    if (a->now > a->ms) {
        a->ms = a->now;
        a->seq = 0;
    } else if (a->seq >= a->limit) {
        a->ms += 1;
        a->seq = 0;
    }
    char text[21];
    fields[used++] = field_names[F_N];
    fields[used++] = scratch_text(a, SCRATCH_NUMBER, text,
                                  decimal((unsigned long long)(a->numbered + 1), text));
    RedisModuleStreamID id = {(uint64_t)a->ms, (uint64_t)a->seq};
    if (RedisModule_StreamAdd(a->log, 0, &id, fields, used / 2) != REDISMODULE_OK) return 0;
    if (a->count == 0) {
        a->first_ms = a->ms;
        a->first_seq = a->seq;
    }
    a->count += 1;
    a->numbered += 1;
    if (value_bytes > a->largest) a->largest = value_bytes;
    return 1;
}

/* A signed number's decimal text into buf (at least 22 bytes); its length. */
static size_t signed_decimal(long long value, char *buf) {
    if (value >= 0) return decimal((unsigned long long)value, buf);
    buf[0] = '-';
    return 1 + decimal(0ULL - (unsigned long long)value, buf + 1);
}

/* A signed number's decimal text. */
static RedisModuleString *signed_text(RedisModuleCtx *ctx, long long value) {
    char text[22];
    return RedisModule_CreateString(ctx, text, signed_decimal(value, text));
}

/* The create_dt text of a record whose CreateTime is `create_time`: its difference from the
 * append time, a few milliseconds where create_ts would take 13 digits (Redis keeps either as
 * a number: 2 bytes instead of 9 in the listpack). Kept in `a` for the records that share it;
 * append_range frees the last one. */
static RedisModuleString *create_delta(Append *a, long long create_time) {
    if (a->create_dt == NULL || create_time != a->create_time) {
        if (a->create_dt != NULL) RedisModule_FreeString(a->ctx, a->create_dt);
        a->create_dt = signed_text(a->ctx, create_time - a->now);
        a->create_time = create_time;
    }
    return a->create_dt;
}

/* A batch's records as sent (`count` plain records from `at` to `end`, checked before
 * anything was written), each with the fields record_items gives it, the CreateTime (the
 * first timestamp + the record's delta) as create_dt:
 * [key K] [value V] ts T create_dt D [null which] n N. */
static int add_sent(Append *a, long long first_timestamp, long long count,
                    const unsigned char *at, const unsigned char *end, RedisModuleString *ts) {
    KafkaRecord record = {0, NULL, 0, NULL, 0};
    for (long long i = 0; i < count; i++) {
        kafka_plain_record(&at, end, &record); /* checked before anything was written */
        RedisModuleString *fields[12];
        RedisModuleString *key = NULL, *value = NULL;
        int used = 0;
        if (record.key != NULL) {
            key = scratch_text(a, SCRATCH_KEY, record.key, (size_t)record.key_size);
            fields[used++] = field_names[F_KEY];
            fields[used++] = key;
        }
        if (record.value != NULL) {
            value = scratch_text(a, SCRATCH_VALUE, record.value, (size_t)record.value_size);
            fields[used++] = field_names[F_VALUE];
            fields[used++] = value;
        }
        fields[used++] = field_names[F_TS];
        fields[used++] = ts;
        fields[used++] = field_names[F_CREATE_DT];
        fields[used++] = create_delta(a, first_timestamp + record.timestamp_delta);
        if (key == NULL || value == NULL) {
            fields[used++] = field_names[F_NULL];
            fields[used++] = key == NULL ? (value == NULL ? null_both : field_names[F_KEY])
                                         : field_names[F_VALUE];
        }
        if (!add_entry(a, fields, used, record.value != NULL ? (size_t)record.value_size : 0)) {
            return 0;
        }
    }
    return 1;
}

/* A raw batch's records (form -3: first timestamp, count, the records' bytes). */
static int add_batch(Append *a, RedisModuleString **argv, RedisModuleString *ts) {
    long long first_timestamp = 0, count = 0;
    parse_long(argv[1], &first_timestamp);
    parse_long(argv[2], &count);
    size_t size;
    const unsigned char *at = (const unsigned char *)RedisModule_StringPtrLen(argv[3], &size);
    return add_sent(a, first_timestamp, count, at, at + size, ts);
}

/* A packed argument's V1 records (checked before anything was written), each with the
 * fields key K value V ts T n N. */
static int add_packed(Append *a, RedisModuleString *packed, RedisModuleString *ts) {
    size_t size, key_size = 0, value_size = 0;
    const unsigned char *at = (const unsigned char *)RedisModule_StringPtrLen(packed, &size);
    const unsigned char *end = at + size;
    while (at < end) {
        const unsigned char *key = packed_part(&at, end, &key_size);
        const unsigned char *value = packed_part(&at, end, &value_size);
        RedisModuleString *fields[8] = {
            field_names[F_KEY], scratch_text(a, SCRATCH_KEY, key, key_size),
            field_names[F_VALUE], scratch_text(a, SCRATCH_VALUE, value, value_size),
            field_names[F_TS], ts,
        };
        if (!add_entry(a, fields, 6, value_size)) return 0;
    }
    return 1;
}

/* A record's CreateTime (`stamp`, as sent) as its two fields: create_dt (create_ts when it
 * is not a number, which the pods never send). */
static void create_fields(Append *a, RedisModuleString *stamp, RedisModuleString **fields) {
    long long create_time;
    if (parse_long(stamp, &create_time) && create_time < KAFKA_TIME_BOUND &&
        create_time > -KAFKA_TIME_BOUND) {
        fields[0] = field_names[F_CREATE_DT], fields[1] = create_delta(a, create_time);
    } else {
        fields[0] = field_names[F_CREATE_TS], fields[1] = stamp;
    }
}

/* One record given in arguments (a short or long form of kafka/produce.lua, or a V1 pair)
 * at argv[0]. */
static int add_record(Append *a, RedisModuleString **argv, RedisModuleString *ts, int layout,
                      RedisModuleString **fields) {
    long long form = 0;
    int v1 = layout == LAYOUT_V1;
    if (!v1) parse_long(argv[0], &form);
    size_t value_bytes = 0;
    int used = 0;
    if (v1) {
        fields[0] = field_names[F_KEY], fields[1] = argv[0];
        fields[2] = field_names[F_VALUE], fields[3] = argv[1];
        fields[4] = field_names[F_TS], fields[5] = ts;
        used = 6;
        value_bytes = byte_size(argv[1]);
    } else if (form == SHORT_NULL_KEY) {
        fields[0] = field_names[F_VALUE], fields[1] = argv[1];
        fields[2] = field_names[F_TS], fields[3] = ts;
        create_fields(a, argv[2], fields + 4);
        fields[6] = field_names[F_NULL], fields[7] = field_names[F_KEY];
        used = 8;
        value_bytes = byte_size(argv[1]);
    } else if (form == SHORT_KEY_VALUE) {
        fields[0] = field_names[F_KEY], fields[1] = argv[1];
        fields[2] = field_names[F_VALUE], fields[3] = argv[2];
        fields[4] = field_names[F_TS], fields[5] = ts;
        create_fields(a, argv[3], fields + 6);
        used = 8;
        value_bytes = byte_size(argv[2]);
    } else {
        long long lead = 0;
        parse_long(argv[1], &lead);
        RedisModuleString **items = argv + 2;
        for (long long j = 0; j < lead; j++) fields[used++] = items[j];
        for (long long j = 0; j < lead; j += 2) {
            if (is_text(items[j], "value")) value_bytes = byte_size(items[j + 1]);
        }
        fields[used++] = field_names[F_TS];
        fields[used++] = ts;
        for (long long j = lead; j < form; j += 2, used += 2) {
            if (is_text(items[j], "create_ts")) {
                create_fields(a, items[j + 1], fields + used);
            } else {
                fields[used] = items[j], fields[used + 1] = items[j + 1];
            }
        }
    }
    return add_entry(a, fields, used, value_bytes);
}

/* Where the whole records from argv[from] on end (at most argc); -1 when one is malformed.
 * *most_fields: room for the fields of the longest record given in arguments. */
static int records_end(RedisModuleString **argv, int argc, int from, int layout, int *most_fields) {
    int end = from;
    *most_fields = 0;
    while (end < argc) {
        int malformed;
        int width = record_width(argv, argc, end, layout, &malformed);
        if (malformed) return -1;
        if (width == 0) break;
        if (width > 4 && width + 2 > *most_fields) *most_fields = width + 2;
        end += width;
    }
    return end;
}

/* Appends the records of argv[from..end) (records_end checked them); 0 when the stream
 * refused an id (its last one is past the log end the caller gave). */
static int append_range(Append *a, RedisModuleString **argv, int from, int end, int layout,
                        int most_fields) {
    RedisModuleString *few[FEW_FIELDS];
    RedisModuleString **fields = few;
    if (most_fields > FEW_FIELDS) {
        fields = malloc(sizeof(*fields) * (size_t)most_fields);
        if (fields == NULL) return 0;
    }
    RedisModuleString *ts = a->now_text;
    int failed = 0;
    for (int at = from; at < end && !failed;) {
        long long form = 0;
        if (layout == LAYOUT_KAFKA) parse_long(argv[at], &form);
        if (layout == LAYOUT_PACKED) {
            failed = !add_packed(a, argv[at], ts);
        } else if (form == RAW_BATCH) {
            failed = !add_batch(a, argv + at, ts);
        } else {
            failed = !add_record(a, argv + at, ts, layout, fields);
        }
        at += form_width(form, layout);
    }
    if (fields != few) free(fields);
    append_done(a);
    return !failed;
}

/* A log open for an append, or NULL when the key holds something else (replied). */
static RedisModuleKey *open_log(RedisModuleCtx *ctx, RedisModuleString *name) {
    RedisModuleKey *log = RedisModule_OpenKey(ctx, name, REDISMODULE_READ | REDISMODULE_WRITE);
    int type = RedisModule_KeyType(log);
    if (type != REDISMODULE_KEYTYPE_EMPTY && type != REDISMODULE_KEYTYPE_STREAM) {
        RedisModule_CloseKey(log);
        RedisModule_ReplyWithError(ctx, WRONG_TYPE);
        return NULL;
    }
    return log;
}

static int append_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < FIRST_RECORD) return RedisModule_WrongArity(ctx);
    Append a = {ctx, NULL, 0, 0, 0, 0, 0, -1, -1, 0, 0, NULL, 0, argv[3]};
    if (!parse_long(argv[2], &a.limit) || !parse_long(argv[3], &a.now) ||
        !parse_long(argv[4], &a.ms) || !parse_long(argv[5], &a.seq) ||
        !parse_long(argv[6], &a.numbered) || a.limit < 1 || a.now < 0 || a.ms < -1 ||
        a.seq < 0 || a.numbered < 0) {
        return RedisModule_ReplyWithError(ctx, "ERR limit, now, ms, seq, numbered: whole numbers");
    }
    size_t layout_len;
    const char *layout_name = RedisModule_StringPtrLen(argv[7], &layout_len);
    int layout;
    if (layout_len == 5 && memcmp(layout_name, "kafka", 5) == 0) {
        layout = LAYOUT_KAFKA;
    } else if (layout_len == 2 && memcmp(layout_name, "v1", 2) == 0) {
        layout = LAYOUT_V1;
    } else if (layout_len == 6 && memcmp(layout_name, "packed", 6) == 0) {
        layout = LAYOUT_PACKED;
    } else {
        return RedisModule_ReplyWithError(ctx, "ERR the layout is kafka, v1 or packed");
    }
    /* the records that fit, each checked before anything is written */
    int most_fields;
    int end = records_end(argv, argc, FIRST_RECORD, layout, &most_fields);
    if (end < 0) return RedisModule_ReplyWithError(ctx, "ERR a malformed record");
    a.log = open_log(ctx, argv[1]);
    if (a.log == NULL) return REDISMODULE_OK;
    int appended = append_range(&a, argv, FIRST_RECORD, end, layout, most_fields);
    RedisModule_CloseKey(a.log);
    if (a.count > 0) RedisModule_ReplicateVerbatim(ctx);
    if (!appended) return RedisModule_ReplyWithError(ctx, ID_TOO_SMALL);
    RedisModule_ReplyWithArray(ctx, 8);
    RedisModule_ReplyWithLongLong(ctx, end - FIRST_RECORD);
    RedisModule_ReplyWithLongLong(ctx, a.count);
    RedisModule_ReplyWithLongLong(ctx, a.first_ms);
    RedisModule_ReplyWithLongLong(ctx, a.first_seq);
    RedisModule_ReplyWithLongLong(ctx, a.ms);
    RedisModule_ReplyWithLongLong(ctx, a.seq);
    RedisModule_ReplyWithLongLong(ctx, a.numbered);
    RedisModule_ReplyWithLongLong(ctx, (long long)a.largest);
    return REDISMODULE_OK;
}

/* An entry id's text ("ms-seq", both parts whole numbers) into *id; 0 when it is not one. */
static int parse_id(const RedisModuleString *text, RedisModuleStreamID *id) {
    size_t len;
    const char *p = RedisModule_StringPtrLen(text, &len);
    const char *dash = memchr(p, '-', len);
    if (dash == NULL || dash == p || dash == p + len - 1) return 0;
    unsigned long long parts[2] = {0, 0};
    const char *ends[2] = {dash, p + len};
    const char *at = p;
    for (int part = 0; part < 2; part++, at = dash + 1) {
        for (; at < ends[part]; at++) {
            if (*at < '0' || *at > '9') return 0;
            unsigned long long digit = (unsigned long long)(*at - '0');
            if (parts[part] > (UINT64_MAX - digit) / 10) return 0; /* past 64 bits */
            parts[part] = parts[part] * 10 + digit;
        }
    }
    id->ms = parts[0];
    id->seq = parts[1];
    return 1;
}

/* Appends the entry the iterator of `source` stands on (`numfields` fields) to `replica`,
 * under `id`. */
static int copy_entry(RedisModuleCtx *ctx, RedisModuleKey *source, RedisModuleKey *replica,
                      RedisModuleStreamID *id, long numfields, RedisModuleString **few) {
    RedisModuleString **fields = few;
    if (numfields * 2 > FEW_FIELDS) {
        fields = malloc(sizeof(*fields) * (size_t)numfields * 2);
        if (fields == NULL) return 0;
    }
    long taken = 0;
    while (taken < numfields &&
           RedisModule_StreamIteratorNextField(source, &fields[2 * taken], &fields[2 * taken + 1]) ==
               REDISMODULE_OK) {
        taken++;
    }
    int added = taken == numfields &&
                RedisModule_StreamAdd(replica, 0, id, fields, numfields) == REDISMODULE_OK;
    for (long i = 0; i < 2 * taken; i++) RedisModule_FreeString(ctx, fields[i]);
    if (fields != few) free(fields);
    return added;
}

static int copy_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 6) return RedisModule_WrongArity(ctx);
    RedisModuleStreamID after = {0, 0}, last;
    size_t after_len;
    const char *after_text = RedisModule_StringPtrLen(argv[3], &after_len);
    int from_first = after_len == 1 && after_text[0] == '-';
    long long count;
    if ((!from_first && !parse_id(argv[3], &after)) || !parse_id(argv[4], &last) ||
        !parse_long(argv[5], &count) || count < 1) {
        return RedisModule_ReplyWithError(
            ctx, "ERR after and last are entry ids (after may be -), count a whole number > 0");
    }
    size_t source_len, replica_len;
    const char *source_name = RedisModule_StringPtrLen(argv[1], &source_len);
    const char *replica_name = RedisModule_StringPtrLen(argv[2], &replica_len);
    if (source_len == replica_len && memcmp(source_name, replica_name, source_len) == 0) {
        return RedisModule_ReplyWithError(ctx, "ERR the log and the replica are one key");
    }
    RedisModuleKey *source = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ);
    RedisModuleKey *replica = RedisModule_OpenKey(ctx, argv[2], REDISMODULE_READ | REDISMODULE_WRITE);
    int source_type = RedisModule_KeyType(source), replica_type = RedisModule_KeyType(replica);
    if ((source_type != REDISMODULE_KEYTYPE_EMPTY && source_type != REDISMODULE_KEYTYPE_STREAM) ||
        (replica_type != REDISMODULE_KEYTYPE_EMPTY && replica_type != REDISMODULE_KEYTYPE_STREAM)) {
        RedisModule_CloseKey(source);
        RedisModule_CloseKey(replica);
        return RedisModule_ReplyWithError(ctx, WRONG_TYPE);
    }
    long long copied = 0;
    RedisModuleStreamID id = {0, 0}, added = {0, 0};
    int failed = 0;
    /* the first id after `after` (the iterator's exclusive flag would exclude `last` too) */
    int past_every_id = !from_first && after.ms == UINT64_MAX && after.seq == UINT64_MAX;
    if (!from_first && !past_every_id) {
        after.seq += 1;
        if (after.seq == 0) after.ms += 1;
    }
    if (source_type == REDISMODULE_KEYTYPE_STREAM && !past_every_id &&
        RedisModule_StreamIteratorStart(source, 0, from_first ? NULL : &after, &last) ==
            REDISMODULE_OK) {
        RedisModuleString *few[FEW_FIELDS];
        long numfields;
        while (copied < count && RedisModule_StreamIteratorNextID(source, &id, &numfields) ==
                                     REDISMODULE_OK) {
            RedisModuleStreamID target = id;
            if (!copy_entry(ctx, source, replica, &target, numfields, few)) {
                failed = 1;
                break;
            }
            added = id;
            copied++;
        }
        RedisModule_StreamIteratorStop(source);
    }
    RedisModule_CloseKey(source);
    RedisModule_CloseKey(replica);
    if (copied > 0) RedisModule_ReplicateVerbatim(ctx);
    if (failed && copied == 0) {
        /* the replica holds an entry at or past the first one to copy: XADD fails alike */
        return RedisModule_ReplyWithError(ctx, ID_TOO_SMALL);
    }
    RedisModule_ReplyWithArray(ctx, 3);
    RedisModule_ReplyWithLongLong(ctx, copied);
    RedisModule_ReplyWithLongLong(ctx, copied > 0 ? (long long)added.ms : -1);
    RedisModule_ReplyWithLongLong(ctx, copied > 0 ? (long long)added.seq : -1);
    return REDISMODULE_OK;
}

#include "produce_commands.h"

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (module_api_init(ctx, MODULE_NAME, MODULE_VERSION) != REDISMODULE_OK) return REDISMODULE_ERR;
    for (int i = 0; i < FIELD_NAMES; i++) {
        field_names[i] = RedisModule_CreateString(NULL, field_texts[i], strlen(field_texts[i]));
    }
    null_both = RedisModule_CreateString(NULL, "key value", 9);
    produce_init();
    if (RedisModule_CreateCommand(ctx, "streamadapter.append", append_command, "write deny-oom", 1,
                                  1, 1) != REDISMODULE_OK) {
        return REDISMODULE_ERR;
    }
    if (RedisModule_CreateCommand(ctx, "streamadapter.produce", produce_command, "write deny-oom", 1,
                                  PRODUCE_KEYS, 1) != REDISMODULE_OK ||
        RedisModule_CreateCommand(ctx, "streamadapter.producemany", produce_many_command,
                                  "write deny-oom", 1, PRODUCE_KEYS, 1) != REDISMODULE_OK ||
        RedisModule_CreateCommand(ctx, "streamadapter.v1produce", v1_produce_command,
                                  "write deny-oom", 1, V1_KEYS, 1) != REDISMODULE_OK) {
        return REDISMODULE_ERR;
    }
    return RedisModule_CreateCommand(ctx, "streamadapter.copy", copy_command, "write deny-oom", 1, 2,
                                     1);
}
