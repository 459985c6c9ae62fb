/* The module's produce commands (part of append_module.c's one translation unit: they
 * append through its Append): a whole script call in one command, where a script call costs
 * Redis more than a small batch's records.
 *
 *   STREAMADAPTER.PRODUCE log state hw_channel appended producers producer_times txn_open now
 *                         ARGV...
 *   STREAMADAPTER.PRODUCEMANY (PRODUCE's keys) now bits rf lag_max_ms batch [batch ...]
 *   STREAMADAPTER.V1PRODUCE log state hw_channel appended now ARGV...
 *
 * PRODUCE is kafka/produce.lua's append of a Kafka RecordBatch: the seven keys and the ARGV
 * are the script's, for a batch the script would hand to STREAMADAPTER.APPEND: not
 * transactional (ARGV[9] '0'), on a partition that is not compacted (no compaction keys).
 * PRODUCEMANY is PRODUCE for several batches of a partition as sent, one argument each
 * (produce_many_command says how). V1PRODUCE is partition/produce.lua's, for records packed
 * in its arguments (ARGV[4] '1').
 * `now` is the append time in ms, or `*` for Redis' clock. The same state is read and
 * written as the script's: the refusals (a deleted topic, a follower),
 * the idempotent producer's checks (expired producers dropped first, the epoch, an open
 * transaction, a retry of one of the last five batches, a sequence at or below the last one,
 * a gap), the records (APPEND's ids, numbers and fields), the state hash's log end, record
 * count, size marks, followers' catch-up times, ISR and high watermark, the producer's last
 * batches and time, and the wake-ups PUBLISHed on the two channels. The state hash is read
 * once and its fields written once, when the call ends (PartitionState). The reply is the
 * script's, or its error reply.
 *
 * Where a script call costs Redis some 200k instructions beyond its records (its arguments,
 * the interpreter, the state read and written through redis.call), this one's own work is
 * some 30k: a Kafka batch of 4 records costs Redis 1.8 times their plain XADDs, not 6.5, and
 * 16 such batches in one PRODUCEMANY 0.85 times (docs/performance.md).
 *
 * Each is replicated and written to the AOF with `now` filled in (the clock read once), so a
 * replica or a reload writes the same entries and state; they PUBLISH nothing. */

#define PRODUCE_KEYS 7
#define PRODUCE_NOW (1 + PRODUCE_KEYS)
#define PRODUCE_ARGV (PRODUCE_NOW + 1) /* ARGV[1] */
#define PRODUCE_ARG(n) (PRODUCE_ARGV + (n)-1)
#define PRODUCE_FIRST_RECORD PRODUCE_ARG(12)
enum { KEY_LOG, KEY_STATE, KEY_HW_CHANNEL, KEY_APPENDED, KEY_PRODUCERS, KEY_PRODUCER_TIMES,
       KEY_TXN_OPEN };

/* Kafka's error codes (mapping/core/kafka_errors.py) and the V1 refusals
 * (mapping/core/errors.py), as the script answers them (tests/mapping/connection/
 * test_produce_command.py reads them here) */
#define OUT_OF_ORDER_SEQUENCE_NUMBER 45
#define INVALID_PRODUCER_EPOCH 47
#define INVALID_TXN_STATE 48
#define UNKNOWN_PRODUCER_ID 59
#define TOPIC_DELETED "UNKNOWN_TOPIC topic was deleted"
#define PARTITION_FOLLOWER "NOT_LEADER partition is a follower"
/* the size marks' range of k in 'size.<k>' (mapping/core/size_marks.py) */
#define SIZE_MIN_BITS 7
#define SIZE_MAX_BITS 24

#define EXPIRED_PER_CALL 8
#define SEQUENCE_LIMIT 2147483648LL
#define KEPT_BATCHES 5
#define MOST_REPLICAS 64 /* a topic's replication factor is at most 16 (topic_config.py) */
#define MOST_WORDS (1 + 4 * 64)
#define ABSENT (-1LL - 0x7fffffffffffffffLL) /* a field the hash lacks (Lua's nil) */

/* Lua's a % b for b > 0: never negative */
static long long floor_mod(long long a, long long b) { return ((a % b) + b) % b; }

/* The state hash's field names, made once (a name given as C text is a new string each
 * time): the fixed ones, size.<k>, and replica.<r>.acked_offset and .caught_up_ms. */
enum {
    S_DELETED, S_ROLE, S_SIZE_FROM, S_APPENDED, S_LOG_END, S_HW, S_ISR, S_LOG_START, STATE_FIELDS
};
static const char *const state_texts[STATE_FIELDS] = {"deleted", "role", "size.from", "appended",
                                                      "log_end", "hw",   "isr",       "log_start"};
static RedisModuleString *state_fields[STATE_FIELDS];
static RedisModuleString *size_fields[SIZE_MAX_BITS + 1];
static RedisModuleString *acked_fields[MOST_REPLICAS], *caught_up_fields[MOST_REPLICAS];

static RedisModuleString *field_text(const char *head, int number, const char *tail) {
    char text[48];
    size_t size = strlen(head);
    memcpy(text, head, size);
    size += decimal((unsigned long long)number, text + size);
    memcpy(text + size, tail, strlen(tail));
    return RedisModule_CreateString(NULL, text, size + strlen(tail));
}

static void produce_init(void) {
    for (int i = 0; i < STATE_FIELDS; i++) {
        state_fields[i] = RedisModule_CreateString(NULL, state_texts[i], strlen(state_texts[i]));
    }
    for (int k = SIZE_MIN_BITS; k <= SIZE_MAX_BITS; k++) size_fields[k] = field_text("size.", k, "");
    for (int r = 1; r < MOST_REPLICAS; r++) {
        acked_fields[r] = field_text("replica.", r, ".acked_offset");
        caught_up_fields[r] = field_text("replica.", r, ".caught_up_ms");
    }
}

/* A hash field's value (NULL: the hash or the field is missing). */
static RedisModuleString *hash_text(RedisModuleKey *hash, RedisModuleString *field) {
    RedisModuleString *value = NULL;
    if (RedisModule_KeyType(hash) == REDISMODULE_KEYTYPE_HASH) {
        RedisModule_HashGet(hash, 0, field, &value, NULL);
    }
    return value;
}

/* A hash field's value as a number: `absent` when missing or not a whole number (Lua's
 * tonumber gives nil for the texts the scripts never write). */
static long long hash_number(RedisModuleKey *hash, RedisModuleString *field, long long absent) {
    RedisModuleString *value = hash_text(hash, field);
    long long number;
    if (value == NULL || !parse_long(value, &number)) return absent;
    return number;
}

/* The state hash's fields an append reads (lib/append.lua's read_append_state), then what
 * the call's batches changed, as numbers, written when the call ends (a field the batches
 * write again and again is written once, its last value). */
#define ISR_TEXT (MOST_REPLICAS * 4 + 2)
typedef struct {
    int deleted, follower, marked; /* marked: size.from present, the size marks are kept */
    long long log_end, hw, numbered; /* numbered: 'appended' (ABSENT: not kept) */
    long long log_start; /* -1: nothing was ever removed (Kafka's Produce answer reports it) */
    int isr_known;                   /* the ISR field is present: isr[0..isr_len) as stored */
    char isr[ISR_TEXT];
    size_t isr_len;
    long long acked[MOST_REPLICAS], caught_up[MOST_REPLICAS]; /* per follower 1..rf-1 */
    /* changed: the followers' caught_up_ms (now), log_end and 'appended', size.from, the size
     * marks (the log end to write at size.<k>; -1: none), hw and isr */
    int caught_up_set[MOST_REPLICAS], appended, size_from_set, hw_set;
    long long size_from, size_marks[SIZE_MAX_BITS + 1];
    /* the channels' last messages: the log end the appended channel tells (-1: none), the
     * hw channel's "hw ISR-size next-change" (announce 0: none) */
    long long wake_log_end;
    int announce;
    long long announce_hw, announce_isr_size, announce_next;
} PartitionState;

static void read_state(RedisModuleKey *state, int rf, PartitionState *s) {
    memset(s, 0, sizeof(*s));
    s->deleted = hash_text(state, state_fields[S_DELETED]) != NULL;
    RedisModuleString *role = hash_text(state, state_fields[S_ROLE]);
    s->follower = role != NULL && is_text(role, "follower");
    s->marked = hash_text(state, state_fields[S_SIZE_FROM]) != NULL;
    s->numbered = hash_number(state, state_fields[S_APPENDED], ABSENT);
    s->log_end = hash_number(state, state_fields[S_LOG_END], -1);
    s->hw = hash_number(state, state_fields[S_HW], -1);
    s->log_start = hash_number(state, state_fields[S_LOG_START], -1);
    RedisModuleString *isr = hash_text(state, state_fields[S_ISR]);
    if (isr != NULL) {
        const char *text = RedisModule_StringPtrLen(isr, &s->isr_len);
        s->isr_known = 1;
        if (s->isr_len < ISR_TEXT) {
            memcpy(s->isr, text, s->isr_len);
        } else { /* longer than any ISR written: differs from every one */
            s->isr_len = ISR_TEXT;
        }
    }
    for (int r = 1; r < rf; r++) {
        s->acked[r] = hash_number(state, acked_fields[r], -1);
        s->caught_up[r] = hash_number(state, caught_up_fields[r], ABSENT);
    }
    for (int k = 0; k <= SIZE_MAX_BITS; k++) s->size_marks[k] = -1;
    s->wake_log_end = -1;
}

/* lib/partition.lua's settle_hw (and refresh_hw's message) over `s` with the log end
 * `log_end` at `now`: the hw and the ISR's size; `s` as the script would write it. */
typedef struct {
    long long hw, isr_size;
} Settled;

static Settled settle_hw(PartitionState *s, long long log_end, int rf, long long lag_max_ms,
                         long long now) {
    Settled out = {log_end, 1};
    long long next_change = -1;
    char isr[ISR_TEXT] = "0";
    size_t isr_len = 1;
    for (int r = 1; r < rf; r++) {
        long long acked = s->acked[r], caught_up = s->caught_up[r];
        int in_sync = acked >= log_end;
        if (!in_sync && caught_up != ABSENT && now - caught_up <= lag_max_ms) {
            in_sync = 1;
            if (acked < out.hw) out.hw = acked;
            long long left = caught_up + lag_max_ms - now + 1;
            if (next_change < 0 || left < next_change) next_change = left;
        }
        if (in_sync) {
            out.isr_size += 1;
            isr[isr_len++] = ' ';
            isr_len += decimal((unsigned long long)r, isr + isr_len);
        }
    }
    if (out.hw < s->hw) out.hw = s->hw;
    int isr_changed = !s->isr_known || s->isr_len != isr_len || memcmp(s->isr, isr, isr_len) != 0;
    if (out.hw > s->hw || (s->isr_known && isr_changed)) {
        s->announce = 1;
        s->announce_hw = out.hw;
        s->announce_isr_size = out.isr_size;
        s->announce_next = next_change;
    }
    if (out.hw != s->hw || isr_changed) {
        s->hw_set = 1;
        s->hw = out.hw;
        memcpy(s->isr, isr, isr_len);
        s->isr_len = isr_len;
        s->isr_known = 1;
    }
    return out;
}

/* A producer's entry in the producers hash as numbers (producer_words), kept for the rest of
 * a call once read: a call's batches of one producer read it once and write it once, at the
 * end (dirty: changed since). */
#define CALL_PRODUCERS 8
typedef struct {
    RedisModuleString *id;
    int word_count, dirty; /* word_count 0: no entry */
    long long words[MOST_WORDS];
} ProducerEntry;

/* One call: its command and arguments (keys first, then `now`), its keys, its append time
 * (and its text), whether it wrote (and so is replicated), whether it may PUBLISH, the
 * producers' entries it read. */
typedef struct {
    RedisModuleCtx *ctx;
    const char *command;
    RedisModuleString **argv;
    int argc, key_count;
    RedisModuleString **names;
    RedisModuleKey *keys[PRODUCE_KEYS];
    long long now;
    RedisModuleString *now_text;
    int wrote, publishes;
    int producer_count;
    ProducerEntry producers[CALL_PRODUCERS];
} Produce;

static void publish(Produce *p, int channel, RedisModuleString *message) {
    if (p->publishes) RedisModule_PublishMessage(p->ctx, p->names[channel], message);
}

/* Up to 4 of the state's fields in one HSET-like call. */
static void set_fields(RedisModuleKey *state, RedisModuleString **pairs, int count) {
    RedisModuleString **f = pairs;
    switch (count) {
    case 1: RedisModule_HashSet(state, 0, f[0], f[1], NULL); break;
    case 2: RedisModule_HashSet(state, 0, f[0], f[1], f[2], f[3], NULL); break;
    case 3: RedisModule_HashSet(state, 0, f[0], f[1], f[2], f[3], f[4], f[5], NULL); break;
    default: RedisModule_HashSet(state, 0, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], NULL);
    }
}

static int same_text(const RedisModuleString *a, const RedisModuleString *b) {
    size_t a_size, b_size;
    const char *a_text = RedisModule_StringPtrLen(a, &a_size);
    const char *b_text = RedisModule_StringPtrLen(b, &b_size);
    return a_size == b_size && memcmp(a_text, b_text, a_size) == 0;
}

/* The call's entry of producer `id` when it read it (NULL: not read). */
static ProducerEntry *cached_producer(Produce *p, const RedisModuleString *id) {
    for (int i = 0; i < p->producer_count; i++) {
        if (same_text(p->producers[i].id, id)) return &p->producers[i];
    }
    return NULL;
}

/* Drops (a few of) the producers idle since `before` or longer, as the script does before its
 * checks: the producers hash is bounded by the producers of the last expiration period. */
static void drop_expired(Produce *p, long long before) {
    RedisModuleKey *times = p->keys[KEY_PRODUCER_TIMES];
    if (RedisModule_KeyType(times) != REDISMODULE_KEYTYPE_ZSET) return;
    RedisModuleString *expired[EXPIRED_PER_CALL];
    int count = 0;
    if (RedisModule_ZsetFirstInScoreRange(times, -1.0 / 0.0, (double)before, 0, 0) ==
        REDISMODULE_OK) {
        while (count < EXPIRED_PER_CALL && !RedisModule_ZsetRangeEndReached(times)) {
            expired[count++] = RedisModule_ZsetRangeCurrentElement(times, NULL);
            RedisModule_ZsetRangeNext(times);
        }
        RedisModule_ZsetRangeStop(times);
    }
    if (count == 0) return;
    if (RedisModule_KeyType(p->keys[KEY_PRODUCERS]) == REDISMODULE_KEYTYPE_HASH) {
        for (int i = 0; i < count; i++) {
            RedisModule_HashSet(p->keys[KEY_PRODUCERS], 0, expired[i], REDISMODULE_HASH_DELETE,
                                NULL);
        }
    }
    for (int i = 0; i < count; i++) {
        int deleted;
        RedisModule_ZsetRem(times, expired[i], &deleted);
        ProducerEntry *e = cached_producer(p, expired[i]);
        if (e != NULL) e->word_count = e->dirty = 0; /* gone from the hash */
    }
    p->wrote = 1;
}

/* A producer's entry in the producers hash ("epoch first_seq last_seq base_offset
 * last_offset ..." for its last batches) as numbers: its word count (0: no entry, -1: an
 * entry the scripts never write). */
static int producer_words(RedisModuleKey *producers, RedisModuleString *producer_id,
                          long long *words) {
    RedisModuleString *entry = NULL;
    if (RedisModule_KeyType(producers) == REDISMODULE_KEYTYPE_HASH) {
        RedisModule_HashGet(producers, 0, producer_id, &entry, NULL);
    }
    if (entry == NULL) return 0;
    size_t size;
    const char *text = RedisModule_StringPtrLen(entry, &size);
    int count = 0;
    for (size_t at = 0; at < size;) {
        if (text[at] == ' ') {
            at++;
            continue;
        }
        size_t start = at;
        while (at < size && text[at] != ' ') at++;
        if (count == MOST_WORDS || !parse_digits(text + start, at - start, &words[count])) return -1;
        count++;
    }
    return count > 0 ? count : -1;
}

/* The producer's entry as the producers hash holds it: its words, spaces between. */
static RedisModuleString *entry_text(RedisModuleCtx *ctx, const long long *words, int count) {
    char text[22 * (1 + 4 * KEPT_BATCHES)];
    size_t size = 0;
    for (int i = 0; i < count && i < 1 + 4 * KEPT_BATCHES; i++) {
        if (i > 0) text[size++] = ' ';
        size += signed_decimal(words[i], text + size);
    }
    return RedisModule_CreateString(ctx, text, size);
}

/* The producer's words after an append, in place: its epoch and its last KEPT_BATCHES
 * batches, the first `batch_count` of `words`' (4 numbers each, after the epoch) then
 * `batch`; their count. */
static int next_words(long long *words, long long epoch, int batch_count, const long long *batch) {
    int first = batch_count + 1 > KEPT_BATCHES ? batch_count + 1 - KEPT_BATCHES : 0;
    int kept = batch_count - first;
    memmove(words + 1, words + 1 + 4 * first, sizeof(*words) * 4 * (size_t)kept);
    memcpy(words + 1 + 4 * kept, batch, sizeof(*words) * 4);
    words[0] = epoch;
    return 1 + 4 * (kept + 1);
}

/* The producer's entry for the rest of the call (read now if it was not), or NULL: no room
 * left (*malformed 0: the caller reads and writes the hash itself) or an entry the scripts
 * never write (*malformed 1). */
static ProducerEntry *producer_of(Produce *p, RedisModuleString *id, int *malformed) {
    *malformed = 0;
    ProducerEntry *e = cached_producer(p, id);
    if (e != NULL || p->producer_count == CALL_PRODUCERS) return e;
    e = &p->producers[p->producer_count];
    e->word_count = producer_words(p->keys[KEY_PRODUCERS], id, e->words);
    if (e->word_count < 0) {
        *malformed = 1;
        return NULL;
    }
    e->id = id;
    e->dirty = 0;
    p->producer_count++;
    return e;
}

/* The call's end: what its batches changed in the state hash and the producers' entries
 * written, the channels told their last message, the call replicated (with `now` filled in, when it wrote anything). */
static void produce_finish(Produce *p, PartitionState *s) {
    RedisModuleCtx *ctx = p->ctx;
    RedisModuleString *pairs[2 * (MOST_REPLICAS + SIZE_MAX_BITS + 8)];
    int count = 0;
#define PAIR(field, value) (pairs[2 * count] = (field), pairs[2 * count + 1] = (value), count++)
    for (int r = 1; r < MOST_REPLICAS; r++) {
        if (s->caught_up_set[r]) PAIR(caught_up_fields[r], p->now_text);
    }
    RedisModuleString *log_end_text = NULL;
    if (s->appended) {
        log_end_text = RedisModule_CreateStringFromLongLong(ctx, s->log_end);
        PAIR(state_fields[S_LOG_END], log_end_text);
        PAIR(state_fields[S_APPENDED], RedisModule_CreateStringFromLongLong(ctx, s->numbered));
    }
    if (s->size_from_set) {
        PAIR(state_fields[S_SIZE_FROM], RedisModule_CreateStringFromLongLong(ctx, s->size_from));
    }
    for (int k = SIZE_MIN_BITS; k <= SIZE_MAX_BITS; k++) {
        if (s->size_marks[k] < 0) continue;
        PAIR(size_fields[k], s->size_marks[k] == s->log_end && log_end_text != NULL
                                 ? log_end_text
                                 : RedisModule_CreateStringFromLongLong(ctx, s->size_marks[k]));
    }
    if (s->hw_set) {
        PAIR(state_fields[S_HW], RedisModule_CreateStringFromLongLong(ctx, s->hw));
        PAIR(state_fields[S_ISR], RedisModule_CreateString(ctx, s->isr, s->isr_len));
    }
#undef PAIR
    for (int i = 0; i < count; i += 4) {
        set_fields(p->keys[KEY_STATE], pairs + 2 * i, count - i < 4 ? count - i : 4);
    }
    if (count > 0) p->wrote = 1;
    if (s->wake_log_end >= 0) {
        publish(p, KEY_APPENDED, s->wake_log_end == s->log_end && log_end_text != NULL
                                     ? log_end_text
                                     : RedisModule_CreateStringFromLongLong(ctx, s->wake_log_end));
    }
    if (s->announce) {
        char text[70];
        size_t size = signed_decimal(s->announce_hw, text);
        text[size++] = ' ';
        size += signed_decimal(s->announce_isr_size, text + size);
        text[size++] = ' ';
        size += signed_decimal(s->announce_next, text + size);
        publish(p, KEY_HW_CHANNEL, RedisModule_CreateString(ctx, text, size));
    }
    for (int i = 0; i < p->producer_count; i++) {
        ProducerEntry *e = &p->producers[i];
        if (!e->dirty) continue;
        RedisModule_HashSet(p->keys[KEY_PRODUCERS], 0, e->id,
                            entry_text(ctx, e->words, e->word_count), NULL);
        p->wrote = 1;
    }
    if (p->wrote) {
        int args = 2 + p->key_count; /* the command's own arguments after `now` */
        RedisModule_Replicate(ctx, p->command, "vlv", p->argv + 1, (size_t)p->key_count, p->now,
                              p->argv + args, (size_t)(p->argc - args));
    }
}

/* The partition's refusal (an error reply), or NULL. */
static const char *refusal(const PartitionState *s) {
    if (s->deleted) return TOPIC_DELETED;
    if (s->follower) return PARTITION_FOLLOWER;
    return NULL;
}

/* A call's start: its keys opened (`key_types[k]`: what key k may hold; EMPTY: a channel,
 * not opened), `now` read, the partition's state (of `rf` replicas) into `s`; 0 when it was
 * answered (an error, the partition's refusal). */
static int produce_start(Produce *p, PartitionState *s, RedisModuleCtx *ctx, const char *command,
                         RedisModuleString **argv, int argc, int key_count, const int *key_types,
                         long long rf) {
    /* (field by field: the producers' room is large and filled as they come) */
    p->ctx = ctx;
    p->command = command;
    p->argv = argv;
    p->argc = argc;
    p->key_count = key_count;
    p->names = argv + 1;
    memset(p->keys, 0, sizeof(p->keys));
    p->wrote = p->producer_count = 0;
    RedisModuleString *now = argv[1 + key_count];
    if (is_text(now, "*")) {
        p->now = RedisModule_Milliseconds();
    } else if (!parse_long(now, &p->now) || p->now < 0) {
        RedisModule_ReplyWithError(ctx, "ERR now is * or the time in ms");
        return 0;
    }
    p->now_text = RedisModule_CreateStringFromLongLong(ctx, p->now);
    p->publishes = !(RedisModule_GetContextFlags(ctx) &
                     (REDISMODULE_CTX_FLAGS_REPLICATED | REDISMODULE_CTX_FLAGS_LOADING));
    for (int k = 0; k < key_count; k++) {
        if (key_types[k] == REDISMODULE_KEYTYPE_EMPTY) continue; /* a channel */
        p->keys[k] = RedisModule_OpenKey(ctx, argv[1 + k], REDISMODULE_READ | REDISMODULE_WRITE);
        int type = RedisModule_KeyType(p->keys[k]);
        if (type != REDISMODULE_KEYTYPE_EMPTY && type != key_types[k]) {
            RedisModule_ReplyWithError(ctx, WRONG_TYPE);
            return 0;
        }
    }
    read_state(p->keys[KEY_STATE], (int)rf, s);
    if (refusal(s) != NULL) {
        RedisModule_ReplyWithError(ctx, refusal(s));
        return 0;
    }
    return 1;
}

/* A batch's records: those of argv[from..to) in `layout` (records_end checked them), or, with
 * `sent` set, `count` plain records as a producer sent them (checked too). */
typedef struct {
    int from, to, layout, most_fields;
    const unsigned char *sent;
    size_t sent_size;
    long long first_timestamp, count;
} Records;

/* What an append did: the hw and ISR after it, its first and last offsets (-1: none), or
 * failed (the stream refused an id: its last one is past the state's log end). */
typedef struct {
    Settled settled;
    long long first_offset, last_offset;
    int failed;
} Appended;

/* lib/append.lua's open_append, the records, close_append: the ids and numbers go on from
 * the state's, the followers that had everything caught up until now, then the log end, the
 * record count, the size marks, the hw and ISR, the wake-ups (all into `s`). */
static Appended append_partition(Produce *p, PartitionState *s, const Records *records,
                                 long long bits, int rf, long long lag_max_ms) {
    long long limit = 1LL << bits, now = p->now;
    Appended out = {{-1, 0}, -1, -1, 0};
    Append a = {p->ctx, p->keys[KEY_LOG], limit, now, -1, limit - 1, s->numbered, -1, -1, 0, 0,
                NULL, 0, p->now_text};
    if (s->numbered == ABSENT) {
        a.numbered = s->log_end < 0 ? 0 : (long long)RedisModule_ValueLength(a.log);
    }
    if (s->log_end >= 0) {
        a.ms = s->log_end / limit;
        a.seq = s->log_end - a.ms * limit;
    }
    int wake = 0;
    for (int r = 1; r < rf; r++) {
        if (s->acked[r] >= s->log_end) {
            s->caught_up_set[r] = 1;
            s->caught_up[r] = now;
            wake = 1;
        }
    }
    int appended;
    if (records->sent != NULL) {
        appended = add_sent(&a, records->first_timestamp, records->count, records->sent,
                            records->sent + records->sent_size, p->now_text);
        append_done(&a);
    } else {
        appended = append_range(&a, p->argv, records->from, records->to, records->layout,
                                records->most_fields);
    }
    if (a.count > 0) p->wrote = 1;
    if (!appended) {
        out.failed = 1;
        return out;
    }
    long long last = s->log_end;
    if (a.count > 0) {
        out.first_offset = a.first_ms * limit + a.first_seq;
        last = out.last_offset = a.ms * limit + a.seq;
        s->appended = 1;
        if (!s->marked) {
            s->size_from_set = s->marked = 1;
            s->size_from = s->log_end < 0 ? 0 : out.first_offset;
        }
        for (int k = SIZE_MIN_BITS; k <= SIZE_MAX_BITS && a.largest > (size_t)1 << k; k++) {
            s->size_marks[k] = last;
        }
        s->log_end = last;
        s->numbered = a.numbered;
        if (wake) s->wake_log_end = last;
    }
    out.settled = settle_hw(s, last, rf, lag_max_ms, now);
    return out;
}

/* The partition head's arguments (ARGV[1..3]: sequence bits, replication factor, the ISR's
 * lag bound); 0 when they are not whole numbers in range. */
static int partition_head(RedisModuleString **argv, long long *bits, long long *rf,
                          long long *lag_max_ms) {
    if (!parse_long(argv[0], bits) || !parse_long(argv[1], rf) || !parse_long(argv[2], lag_max_ms) ||
        *bits < 0 || *bits > 40 || *rf < 1 || *rf > MOST_REPLICAS) {
        return 0;
    }
    if (*rf == 1) *lag_max_ms = 0; /* only followers lag */
    return 1;
}

/* A Kafka batch: its producer (producer_id NULL: not idempotent) and its records. */
typedef struct {
    long long count, epoch, base_seq, expiration_ms;
    RedisModuleString *producer_id;
    int lost_gap;
    Records records;
} Batch;

/* PRODUCE's batch: kafka/produce.lua's ARGV from argv[at] (ARGV[1]) to argv[end - 1] (a
 * record at least); the partition head into bits, rf, lag_max_ms. An error reply's text when
 * it is not one these commands append. */
static const char *parse_batch(RedisModuleString **argv, int at, int end, Batch *b,
                               long long *bits, long long *rf, long long *lag_max_ms) {
    b->epoch = b->base_seq = -1;
    b->expiration_ms = 0;
    b->producer_id = is_text(argv[at + 3], "-1") ? NULL : argv[at + 3];
    if (!partition_head(argv + at, bits, rf, lag_max_ms) || !parse_long(argv[at + 6], &b->count) ||
        (b->producer_id != NULL && (!parse_long(argv[at + 4], &b->epoch) ||
                                    !parse_long(argv[at + 5], &b->base_seq) ||
                                    !parse_long(argv[at + 7], &b->expiration_ms)))) {
        return "ERR kafka/produce.lua's ARGV: whole numbers";
    }
    if (!is_text(argv[at + 8], "0")) return "ERR a transactional batch goes to kafka/produce.lua";
    b->lost_gap = is_text(argv[at + 9], "1");
    Records records = {at + 11, end, LAYOUT_KAFKA, 0, NULL, 0, 0, 0};
    if (records_end(argv, end, records.from, LAYOUT_KAFKA, &records.most_fields) != end) {
        return "ERR a malformed record";
    }
    b->records = records;
    return NULL;
}

/* PRODUCEMANY's batch: one argument, a head of big-endian numbers (producer id 8 bytes, -1:
 * not idempotent; producer epoch 4; base sequence 4; record count 4; the producer id
 * expiration in ms 8; the lost-gap flag 1; the first timestamp 8), then the batch's records
 * as the producer sent them (after the RecordBatch's header; plain records only). */
#define SENT_HEAD 37

static long long big_endian(const unsigned char *p, int size) {
    unsigned long long value = 0;
    for (int i = 0; i < size; i++) value = value << 8 | p[i];
    if (size < 8 && (value >> (8 * size - 1)) != 0) value -= 1ULL << (8 * size); /* negative */
    return (long long)value;
}

static const char *parse_sent_batch(RedisModuleCtx *ctx, RedisModuleString *arg, Batch *b) {
    size_t size;
    const unsigned char *p = (const unsigned char *)RedisModule_StringPtrLen(arg, &size);
    if (size < SENT_HEAD) return "ERR a malformed batch";
    long long producer_id = big_endian(p, 8);
    b->epoch = big_endian(p + 8, 4);
    b->base_seq = big_endian(p + 12, 4);
    b->count = big_endian(p + 16, 4);
    b->expiration_ms = big_endian(p + 20, 8);
    b->lost_gap = p[28] == 1;
    long long first_timestamp = big_endian(p + 29, 8);
    if (b->count < 1 || first_timestamp >= KAFKA_TIME_BOUND ||
        first_timestamp <= -KAFKA_TIME_BOUND ||
        !kafka_plain_records(p + SENT_HEAD, size - SENT_HEAD, b->count)) {
        return "ERR a malformed record";
    }
    b->producer_id =
        producer_id == -1 ? NULL : RedisModule_CreateStringFromLongLong(ctx, producer_id);
    if (b->producer_id == NULL) b->epoch = b->base_seq = -1;
    Records records = {0, 0, LAYOUT_KAFKA, 0, p + SENT_HEAD, size - SENT_HEAD, first_timestamp,
                       b->count};
    b->records = records;
    return NULL;
}

/* What a batch got: the script's reply {status, hw, ISR size, first offset, last offset[,
 * append time]}, or an error reply's text. */
typedef struct {
    const char *error;
    long long status;
    Settled settled;
    long long base_offset, last_offset;
} Outcome;

static Outcome refused(long long code) {
    Outcome out = {NULL, code, {-1, 0}, -1, -1};
    return out;
}

/* kafka/produce.lua's work for one batch on the partition whose state is `s`: the idempotent
 * producer's checks, then the append. */
static Outcome produce_batch(Produce *p, PartitionState *s, const Batch *b, long long bits,
                             int rf, long long lag_max_ms) {
    Outcome out = {NULL, 0, {-1, 0}, -1, -1};
    long long own_words[MOST_WORDS];
    long long *words = own_words; /* the epoch, then 4 numbers a batch */
    ProducerEntry *entry = NULL;
    int batch_count = 0;
    long long last_seq = floor_mod(b->base_seq + b->count - 1, SEQUENCE_LIMIT);
    /* the idempotent producer's checks (kafka/produce.lua says why each) */
    if (b->producer_id != NULL) {
        drop_expired(p, p->now - b->expiration_ms);
        int malformed, word_count;
        entry = producer_of(p, b->producer_id, &malformed);
        if (entry != NULL) {
            words = entry->words;
            word_count = entry->word_count;
        } else {
            word_count = malformed ? -1 : producer_words(p->keys[KEY_PRODUCERS], b->producer_id,
                                                         words);
        }
        if (word_count < 0) {
            out.error = "ERR a malformed producer entry";
            return out;
        }
        long long stored_epoch = word_count > 0 ? words[0] : -1;
        if (b->epoch < stored_epoch) return refused(INVALID_PRODUCER_EPOCH);
        RedisModuleString *open = NULL;
        if (RedisModule_KeyType(p->keys[KEY_TXN_OPEN]) == REDISMODULE_KEYTYPE_HASH) {
            RedisModule_HashGet(p->keys[KEY_TXN_OPEN], 0, b->producer_id, &open, NULL);
        }
        if (open != NULL) return refused(INVALID_TXN_STATE);
        if (word_count > 0 && b->epoch == stored_epoch) {
            for (int j = 1; j + 3 < word_count; j += 4) {
                if (words[j] == b->base_seq && words[j + 1] == last_seq) { /* a retry */
                    out.status = 1;
                    out.settled = settle_hw(s, s->log_end, rf, lag_max_ms, p->now);
                    out.base_offset = words[j + 2];
                    out.last_offset = words[j + 3];
                    return out;
                }
                batch_count++;
            }
            if (batch_count > 0) {
                long long ahead = floor_mod(b->base_seq - words[word_count - 3] - 1, SEQUENCE_LIMIT);
                if (ahead >= SEQUENCE_LIMIT / 2) { /* at or below the last sequence stored */
                    return refused(OUT_OF_ORDER_SEQUENCE_NUMBER);
                }
                if (ahead > 0 && !b->lost_gap) return refused(UNKNOWN_PRODUCER_ID);
            }
        } else if (word_count > 0 && b->base_seq != 0 && !b->lost_gap) {
            /* a newer epoch past its first batch: that batch was stored and taken back */
            return refused(UNKNOWN_PRODUCER_ID);
        }
    }

    Appended appended = append_partition(p, s, &b->records, bits, rf, lag_max_ms);
    if (appended.failed) {
        out.error = ID_TOO_SMALL;
        return out;
    }
    if (b->producer_id != NULL) {
        long long batch[4] = {b->base_seq, last_seq, appended.first_offset, appended.last_offset};
        int word_count = next_words(words, b->epoch, batch_count, batch);
        if (entry != NULL) { /* written when the call ends */
            entry->word_count = word_count;
            entry->dirty = 1;
        } else {
            RedisModule_HashSet(p->keys[KEY_PRODUCERS], 0, b->producer_id,
                                entry_text(p->ctx, words, word_count), NULL);
        }
        /* (its time at once: a later batch's drop_expired must see it) */
        int flags = 0;
        RedisModule_ZsetAdd(p->keys[KEY_PRODUCER_TIMES], (double)p->now, b->producer_id, &flags);
        p->wrote = 1;
    }
    out.settled = appended.settled;
    out.base_offset = appended.first_offset;
    out.last_offset = appended.last_offset;
    return out;
}

/* kafka/produce.lua's reply: status, hw, ISR size, base and last offset, the append time
 * (-1 unless appended now) and the log start. */
static void reply_outcome(RedisModuleCtx *ctx, const Outcome *o, long long now,
                          long long log_start) {
    if (o->error != NULL) {
        RedisModule_ReplyWithError(ctx, o->error);
        return;
    }
    RedisModule_ReplyWithArray(ctx, 7);
    RedisModule_ReplyWithLongLong(ctx, o->status);
    RedisModule_ReplyWithLongLong(ctx, o->settled.hw);
    RedisModule_ReplyWithLongLong(ctx, o->settled.isr_size);
    RedisModule_ReplyWithLongLong(ctx, o->base_offset);
    RedisModule_ReplyWithLongLong(ctx, o->last_offset);
    RedisModule_ReplyWithLongLong(ctx, o->status == 0 ? now : -1);
    RedisModule_ReplyWithLongLong(ctx, log_start);
}

static const int kafka_key_types[PRODUCE_KEYS] = {
    REDISMODULE_KEYTYPE_STREAM, REDISMODULE_KEYTYPE_HASH, REDISMODULE_KEYTYPE_EMPTY,
    REDISMODULE_KEYTYPE_EMPTY,  REDISMODULE_KEYTYPE_HASH, REDISMODULE_KEYTYPE_ZSET,
    REDISMODULE_KEYTYPE_HASH};

static int produce_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc <= PRODUCE_FIRST_RECORD) return RedisModule_WrongArity(ctx); /* a record at least */
    RedisModule_AutoMemory(ctx);
    Batch b;
    long long bits, rf, lag_max_ms;
    const char *invalid = parse_batch(argv, PRODUCE_ARGV, argc, &b, &bits, &rf, &lag_max_ms);
    if (invalid != NULL) return RedisModule_ReplyWithError(ctx, invalid);
    Produce p;
    PartitionState s;
    if (!produce_start(&p, &s, ctx, "streamadapter.produce", argv, argc, PRODUCE_KEYS,
                       kafka_key_types, rf)) {
        return REDISMODULE_OK;
    }
    Outcome outcome = produce_batch(&p, &s, &b, bits, (int)rf, lag_max_ms);
    produce_finish(&p, &s);
    reply_outcome(ctx, &outcome, p.now, s.log_start);
    return REDISMODULE_OK;
}

/* STREAMADAPTER.PRODUCEMANY log state hw_channel appended producers producer_times txn_open now
 *                           bits rf lag_max_ms batch [batch ...]
 * PRODUCE's work for batches of one partition as sent (each one argument: parse_sent_batch),
 * with the partition head (ARGV[1..3]) once: the batches are appended in order, as PRODUCE
 * calls one after another with the same `now` would, with the state read once, its fields
 * written once and each channel told once, its last message, at the end. The reply holds
 * each batch's PRODUCE reply, or its error reply (a malformed batch: nothing of it written). */
#define MANY_BATCHES (PRODUCE_ARGV + 3)

static int produce_many_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc <= MANY_BATCHES) return RedisModule_WrongArity(ctx); /* a batch at least */
    RedisModule_AutoMemory(ctx);
    long long bits, rf, lag_max_ms;
    if (!partition_head(argv + PRODUCE_ARGV, &bits, &rf, &lag_max_ms)) {
        return RedisModule_ReplyWithError(ctx, "ERR kafka/produce.lua's ARGV: whole numbers");
    }
    Produce p;
    PartitionState s;
    if (!produce_start(&p, &s, ctx, "streamadapter.producemany", argv, argc, PRODUCE_KEYS,
                       kafka_key_types, rf)) {
        return REDISMODULE_OK;
    }
    RedisModule_ReplyWithArray(ctx, argc - MANY_BATCHES);
    for (int at = MANY_BATCHES; at < argc; at++) {
        Batch b;
        Outcome outcome = refused(0);
        outcome.error = parse_sent_batch(ctx, argv[at], &b);
        if (outcome.error == NULL) outcome = produce_batch(&p, &s, &b, bits, (int)rf, lag_max_ms);
        reply_outcome(ctx, &outcome, p.now, s.log_start);
    }
    produce_finish(&p, &s);
    return REDISMODULE_OK;
}

/* STREAMADAPTER.V1PRODUCE log state hw_channel appended now ARGV...: partition/produce.lua
 * for records packed in its arguments (ARGV[4] '1', a partition that is not compacted): the
 * same refusals, entries, state and wake-ups; the reply {hw, ISR size, first offset, last
 * offset}. */
#define V1_KEYS 4
#define V1_ARGV (V1_KEYS + 2)
#define V1_FIRST_RECORD (V1_ARGV + 4)

static const int v1_key_types[V1_KEYS] = {REDISMODULE_KEYTYPE_STREAM, REDISMODULE_KEYTYPE_HASH,
                                          REDISMODULE_KEYTYPE_EMPTY, REDISMODULE_KEYTYPE_EMPTY};

static int v1_produce_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc <= V1_FIRST_RECORD) return RedisModule_WrongArity(ctx); /* a record at least */
    RedisModule_AutoMemory(ctx);
    long long bits, rf, lag_max_ms;
    if (!partition_head(argv + V1_ARGV, &bits, &rf, &lag_max_ms)) {
        return RedisModule_ReplyWithError(ctx, "ERR partition/produce.lua's ARGV: whole numbers");
    }
    if (!is_text(argv[V1_ARGV + 3], "1")) {
        return RedisModule_ReplyWithError(ctx, "ERR records as pairs go to partition/produce.lua");
    }
    int most_fields;
    if (records_end(argv, argc, V1_FIRST_RECORD, LAYOUT_PACKED, &most_fields) != argc) {
        return RedisModule_ReplyWithError(ctx, "ERR a malformed record");
    }
    Produce p;
    PartitionState s;
    if (!produce_start(&p, &s, ctx, "streamadapter.v1produce", argv, argc, V1_KEYS, v1_key_types,
                       rf)) {
        return REDISMODULE_OK;
    }
    Records records = {V1_FIRST_RECORD, argc, LAYOUT_PACKED, most_fields, NULL, 0, 0, 0};
    Appended appended = append_partition(&p, &s, &records, bits, (int)rf, lag_max_ms);
    produce_finish(&p, &s);
    if (appended.failed) return RedisModule_ReplyWithError(ctx, ID_TOO_SMALL);
    RedisModule_ReplyWithArray(ctx, 4);
    RedisModule_ReplyWithLongLong(ctx, appended.settled.hw);
    RedisModule_ReplyWithLongLong(ctx, appended.settled.isr_size);
    RedisModule_ReplyWithLongLong(ctx, appended.first_offset);
    return RedisModule_ReplyWithLongLong(ctx, appended.last_offset);
}
