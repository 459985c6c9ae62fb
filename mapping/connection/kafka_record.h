/* Reading one record of a Kafka RecordBatch (magic 2, uncompressed): its fields after the
 * batch's 61-byte header, as the streamadapter module (append_module.c) appends them and the
 * pod's Produce (adapter/kafka/_produce.c) checks them before sending a batch's records
 * whole. Only a plain record is read: a key (or null), a value (or null), no headers; its
 * length, varints and sizes exactly as the batch says, nothing left over. */
#ifndef STREAMADAPTER_KAFKA_RECORD_H
#define STREAMADAPTER_KAFKA_RECORD_H

#include <stddef.h>
#include <stdint.h>

/* A plain record's timestamp delta, and a batch's first timestamp sent with plain records,
 * are within (-2^62, 2^62): their sum never leaves an int64. */
#define KAFKA_TIME_BOUND ((int64_t)1 << 62)

typedef struct {
    int64_t timestamp_delta;
    const unsigned char *key; /* NULL: a null key */
    int64_t key_size;
    const unsigned char *value; /* NULL: a null value (a tombstone) */
    int64_t value_size;
} KafkaRecord;

/* A zigzag varint (at most 10 bytes) at *at, before end; 0 when it does not end there. */
static inline int kafka_varint(const unsigned char **at, const unsigned char *end, int64_t *out) {
    uint64_t value = 0;
    for (int shift = 0; shift < 70 && *at < end; shift += 7) {
        unsigned char byte = *(*at)++;
        value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
            return 1;
        }
    }
    return 0;
}

/* A length-prefixed field (-1: null) at *at, within end. */
static inline int kafka_bytes(const unsigned char **at, const unsigned char *end,
                              const unsigned char **data, int64_t *size) {
    if (!kafka_varint(at, end, size) || *size < -1 || *size > end - *at) return 0;
    if (*size < 0) {
        *data = NULL;
    } else {
        *data = *at;
        *at += *size;
    }
    return 1;
}

/* The plain record at *at (moved past it), or 0: malformed, or headers. */
static inline int kafka_plain_record(const unsigned char **at, const unsigned char *end,
                                     KafkaRecord *record) {
    int64_t length, offset_delta, headers;
    if (!kafka_varint(at, end, &length) || length < 1 || length > end - *at) return 0;
    const unsigned char *record_end = *at + length;
    /* attributes (unused): an int8, which aiokafka, the pod's other reader, takes as a
     * varint; one byte below 0x80 is the same either way */
    if (**at & 0x80) return 0;
    (*at)++;
    if (!kafka_varint(at, record_end, &record->timestamp_delta) ||
        !kafka_varint(at, record_end, &offset_delta) ||
        !kafka_bytes(at, record_end, &record->key, &record->key_size) ||
        !kafka_bytes(at, record_end, &record->value, &record->value_size) ||
        !kafka_varint(at, record_end, &headers)) {
        return 0;
    }
    return headers == 0 && *at == record_end && record->timestamp_delta < KAFKA_TIME_BOUND &&
           record->timestamp_delta > -KAFKA_TIME_BOUND;
}

/* Whether data[0:size] is exactly `count` plain records. */
static inline int kafka_plain_records(const unsigned char *data, size_t size, int64_t count) {
    const unsigned char *at = data, *end = data + size;
    KafkaRecord record;
    for (int64_t i = 0; i < count; i++) {
        if (!kafka_plain_record(&at, end, &record)) return 0;
    }
    return count > 0 && at == end;
}

#endif
