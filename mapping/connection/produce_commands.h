/* The module's two produce commands (part of append_module.c's one translation unit: they
 * append through its Append): a whole script call in one command, where a script call costs
 * Redis more than a small batch's records.
 *
 *   STREAMADAPTER.PRODUCE log state hw_channel appended producers producer_times txn_open now
 *                         ARGV...
 *   STREAMADAPTER.V1PRODUCE log state hw_channel appended now ARGV...
 *
 * PRODUCE is kafka/produce.lua's append of a Kafka RecordBatch: the seven keys and the ARGV
 * are the script's, for a batch the script would hand to STREAMADAPTER.APPEND: not
 * transactional (ARGV[9] '0'), on a partition that is not compacted (no compaction keys).
 * V1PRODUCE is partition/produce.lua's, for records packed in its arguments (ARGV[4] '1').
 * `now` is the append time in ms, or `*` for Redis' clock. The same state is read and
 * written, in the same order, as the script's: the refusals (a deleted topic, a follower),
 * the idempotent producer's checks (expired producers dropped first, the epoch, an open
 * transaction, a retry of one of the last five batches, a sequence at or below the last one,
 * a gap), the records (APPEND's ids, numbers and fields), the state hash's log end, record
 * count, size marks, followers' catch-up times, ISR and high watermark, the producer's last
 * batches and time, and the wake-ups PUBLISHed on the two channels. The reply is the
 * script's, or its error reply.
 *
 * Where a script call costs Redis some 200k instructions beyond its records (its arguments,
 * the interpreter, the state read and written through redis.call), this one's own work is
 * some 30k: a Kafka batch of 4 records costs Redis 1.8 times their plain XADDs, not 6.5
 * (docs/performance.md).
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
enum { S_DELETED, S_ROLE, S_SIZE_FROM, S_APPENDED, S_LOG_END, S_HW, S_ISR, STATE_FIELDS };
static const char *const state_texts[STATE_FIELDS] = {"deleted", "role",    "size.from", "appended",
                                                      "log_end", "hw",      "isr"};
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

/* The state hash's fields an append reads (lib/append.lua's read_append_state). */
typedef struct {
    int deleted, follower, marked; /* marked: size.from present, the size marks are kept */
    long long log_end, hw, numbered; /* numbered: 'appended' (ABSENT: not kept) */
    RedisModuleString *isr;          /* the ISR as stored ("0 1 ..."), NULL when absent */
    long long acked[MOST_REPLICAS], caught_up[MOST_REPLICAS]; /* per follower 1..rf-1 */
} PartitionState;

static void read_state(RedisModuleKey *state, int rf, PartitionState *s) {
    s->deleted = hash_text(state, state_fields[S_DELETED]) != NULL;
    RedisModuleString *role = hash_text(state, state_fields[S_ROLE]);
    s->follower = role != NULL && is_text(role, "follower");
    s->marked = hash_text(state, state_fields[S_SIZE_FROM]) != NULL;
    s->numbered = hash_number(state, state_fields[S_APPENDED], ABSENT);
    s->log_end = hash_number(state, state_fields[S_LOG_END], -1);
    s->hw = hash_number(state, state_fields[S_HW], -1);
    s->isr = hash_text(state, state_fields[S_ISR]);
    for (int r = 1; r < rf; r++) {
        s->acked[r] = hash_number(state, acked_fields[r], -1);
        s->caught_up[r] = hash_number(state, caught_up_fields[r], ABSENT);
    }
}

/* The state hash's fields to write, in the order the script writes them. */
typedef struct {
    int count;
    RedisModuleString *names[MOST_REPLICAS + SIZE_MAX_BITS + 8];
    RedisModuleString *values[MOST_REPLICAS + SIZE_MAX_BITS + 8];
} Writes;

static void write_text(Writes *w, RedisModuleString *name, RedisModuleString *value) {
    w->names[w->count] = name;
    w->values[w->count++] = value;
}

static void write_number(Writes *w, RedisModuleCtx *ctx, RedisModuleString *name, long long value) {
    write_text(w, name, RedisModule_CreateStringFromLongLong(ctx, value));
}

/* lib/partition.lua's settle_hw over `s` with the log end `log_end` at `now`: the hw and ISR
 * fields to write when they changed, and the hw channel's message (NULL: nothing to say). */
typedef struct {
    long long hw, isr_size;
    RedisModuleString *message;
} Settled;

static Settled settle_hw(RedisModuleCtx *ctx, const PartitionState *s, long long log_end, int rf,
                         long long lag_max_ms, long long now, Writes *w) {
    Settled out = {log_end, 1, NULL};
    long long next_change = -1;
    char isr[MOST_REPLICAS * 4 + 2] = "0";
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
    size_t old_len = 0;
    const char *old_isr = s->isr != NULL ? RedisModule_StringPtrLen(s->isr, &old_len) : NULL;
    int isr_changed = old_isr == NULL || old_len != isr_len || memcmp(old_isr, isr, isr_len) != 0;
    if (out.hw != s->hw || isr_changed) {
        write_number(w, ctx, state_fields[S_HW], out.hw);
        write_text(w, state_fields[S_ISR], RedisModule_CreateString(ctx, isr, isr_len));
    }
    if (out.hw > s->hw || (old_isr != NULL && isr_changed)) {
        char text[70];
        size_t size = signed_decimal(out.hw, text);
        text[size++] = ' ';
        size += signed_decimal(out.isr_size, text + size);
        text[size++] = ' ';
        size += signed_decimal(next_change, text + size);
        out.message = RedisModule_CreateString(ctx, text, size);
    }
    return out;
}

/* One call: its command and arguments (keys first, then `now`), its keys, its append time,
 * whether it wrote (and so is replicated), whether it may PUBLISH. */
typedef struct {
    RedisModuleCtx *ctx;
    const char *command;
    RedisModuleString **argv;
    int argc, key_count;
    RedisModuleString **names;
    RedisModuleKey *keys[PRODUCE_KEYS];
    long long now;
    int wrote, publishes;
} Produce;

static void apply_writes(Produce *p, Writes *w) {
    for (int i = 0; i < w->count; i++) {
        RedisModule_HashSet(p->keys[KEY_STATE], 0, w->names[i], w->values[i], NULL);
    }
    if (w->count > 0) p->wrote = 1;
    w->count = 0;
}

static void publish(Produce *p, int channel, RedisModuleString *message) {
    if (message != NULL && p->publishes) {
        RedisModule_PublishMessage(p->ctx, p->names[channel], message);
    }
}

/* settle_hw over the state and the log end `log_end`, then its fields (with those already in
 * `w`) written and the hw channel told (lib/partition.lua's refresh_hw). */
static Settled refresh_hw(Produce *p, const PartitionState *s, long long log_end, int rf,
                          long long lag_max_ms, Writes *w) {
    Settled settled = settle_hw(p->ctx, s, log_end, rf, lag_max_ms, p->now, w);
    apply_writes(p, w);
    publish(p, KEY_HW_CHANNEL, settled.message);
    return settled;
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

/* The producer's entry after an append: its epoch and its last KEPT_BATCHES batches,
 * `batches` (4 numbers each) then this one. */
static RedisModuleString *producer_entry(RedisModuleCtx *ctx, long long epoch,
                                         const long long *batches, int batch_count,
                                         const long long *batch) {
    char text[22 * (1 + 4 * KEPT_BATCHES)];
    size_t size = signed_decimal(epoch, text);
    int first = batch_count + 1 > KEPT_BATCHES ? batch_count + 1 - KEPT_BATCHES : 0;
    for (int b = first; b <= batch_count; b++) {
        const long long *numbers = b < batch_count ? batches + 4 * b : batch;
        for (int i = 0; i < 4; i++) {
            text[size++] = ' ';
            size += signed_decimal(numbers[i], text + size);
        }
    }
    return RedisModule_CreateString(ctx, text, size);
}

/* Replicated (and written to the AOF) with `now` filled in, when the call wrote anything. */
static void replicate(Produce *p) {
    if (!p->wrote) return;
    int args = 2 + p->key_count; /* the command's own arguments after `now` */
    RedisModule_Replicate(p->ctx, p->command, "vlv", p->argv + 1, (size_t)p->key_count, p->now,
                          p->argv + args, (size_t)(p->argc - args));
}

/* A call's start: its keys opened (`key_types[k]`: what key k may hold; EMPTY: a channel,
 * not opened), `now` read; 0 when it was answered (an error). */
static int produce_start(Produce *p, RedisModuleCtx *ctx, const char *command,
                         RedisModuleString **argv, int argc, int key_count, const int *key_types) {
    Produce start = {ctx, command, argv, argc, key_count, argv + 1, {NULL}, 0, 0, 0};
    *p = start;
    RedisModuleString *now = argv[1 + key_count];
    if (is_text(now, "*")) {
        p->now = RedisModule_Milliseconds();
    } else if (!parse_long(now, &p->now) || p->now < 0) {
        RedisModule_ReplyWithError(ctx, "ERR now is * or the time in ms");
        return 0;
    }
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
    return 1;
}

/* The partition's refusal (an error reply), or NULL. */
static const char *refusal(const PartitionState *s) {
    if (s->deleted) return TOPIC_DELETED;
    if (s->follower) return PARTITION_FOLLOWER;
    return NULL;
}

/* What an append did: the hw and ISR after it, its first and last offsets (-1: none), or
 * failed (the stream refused an id: its last one is past the state's log end). */
typedef struct {
    Settled settled;
    long long first_offset, last_offset;
    int failed;
} Appended;

/* lib/append.lua's open_append, the records of argv[from..argc) in `layout`, close_append:
 * the ids and numbers go on from the state's, the followers that had everything caught up
 * until now, then the log end, the record count, the size marks, the hw and ISR, the
 * wake-ups. */
static Appended append_partition(Produce *p, PartitionState *s, int from, int layout,
                                 int most_fields, long long bits, int rf, long long lag_max_ms) {
    RedisModuleCtx *ctx = p->ctx;
    long long limit = 1LL << bits, now = p->now;
    Appended out = {{-1, 0, NULL}, -1, -1, 0};
    Append a = {ctx, p->keys[KEY_LOG], limit, now, -1, limit - 1, s->numbered, -1, -1, 0, 0, NULL, 0,
                RedisModule_CreateStringFromLongLong(ctx, now)};
    if (s->numbered == ABSENT) {
        a.numbered = s->log_end < 0 ? 0 : (long long)RedisModule_ValueLength(a.log);
    }
    if (s->log_end >= 0) {
        a.ms = s->log_end / limit;
        a.seq = s->log_end - a.ms * limit;
    }
    Writes w = {0};
    int wake = 0;
    for (int r = 1; r < rf; r++) {
        if (s->acked[r] >= s->log_end) {
            write_text(&w, caught_up_fields[r], a.now_text);
            s->caught_up[r] = now;
            wake = 1;
        }
    }
    apply_writes(p, &w);
    int appended = append_range(&a, p->argv, from, p->argc, layout, most_fields);
    if (a.count > 0) p->wrote = 1;
    if (!appended) {
        out.failed = 1;
        return out;
    }
    long long last = s->log_end;
    RedisModuleString *log_end_text = NULL;
    if (a.count > 0) {
        out.first_offset = a.first_ms * limit + a.first_seq;
        last = out.last_offset = a.ms * limit + a.seq;
        log_end_text = RedisModule_CreateStringFromLongLong(ctx, last);
        write_text(&w, state_fields[S_LOG_END], log_end_text);
        write_number(&w, ctx, state_fields[S_APPENDED], a.numbered);
        if (!s->marked) {
            write_number(&w, ctx, state_fields[S_SIZE_FROM], s->log_end < 0 ? 0 : out.first_offset);
        }
        for (int k = SIZE_MIN_BITS; k <= SIZE_MAX_BITS && a.largest > (size_t)1 << k; k++) {
            write_text(&w, size_fields[k], log_end_text);
        }
    }
    /* refresh_hw's work, with the appended channel told between the write and the hw
     * channel, as close_append does */
    out.settled = settle_hw(ctx, s, last, rf, lag_max_ms, now, &w);
    apply_writes(p, &w);
    if (wake && log_end_text != NULL) publish(p, KEY_APPENDED, log_end_text);
    publish(p, KEY_HW_CHANNEL, out.settled.message);
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

static int produce_reply(Produce *p, int status, Settled settled, long long base_offset,
                         long long last_offset) {
    RedisModuleCtx *ctx = p->ctx;
    replicate(p);
    RedisModule_ReplyWithArray(ctx, status == 0 ? 6 : 5);
    RedisModule_ReplyWithLongLong(ctx, status);
    RedisModule_ReplyWithLongLong(ctx, settled.hw);
    RedisModule_ReplyWithLongLong(ctx, settled.isr_size);
    RedisModule_ReplyWithLongLong(ctx, base_offset);
    RedisModule_ReplyWithLongLong(ctx, last_offset);
    if (status == 0) RedisModule_ReplyWithLongLong(ctx, p->now);
    return REDISMODULE_OK;
}

/* A batch not appended (expired producers may have been dropped first): the script's
 * {code, -1, 0, -1, -1}. */
static int produce_refused(Produce *p, long long code) {
    Settled none = {-1, 0, NULL};
    return produce_reply(p, (int)code, none, -1, -1);
}

/* An error reply after what the call wrote (replicated first). */
static int produce_error(Produce *p, const char *message) {
    replicate(p);
    return RedisModule_ReplyWithError(p->ctx, message);
}

static const int kafka_key_types[PRODUCE_KEYS] = {
    REDISMODULE_KEYTYPE_STREAM, REDISMODULE_KEYTYPE_HASH, REDISMODULE_KEYTYPE_EMPTY,
    REDISMODULE_KEYTYPE_EMPTY,  REDISMODULE_KEYTYPE_HASH, REDISMODULE_KEYTYPE_ZSET,
    REDISMODULE_KEYTYPE_HASH};

static int produce_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc <= PRODUCE_FIRST_RECORD) return RedisModule_WrongArity(ctx); /* a record at least */
    RedisModule_AutoMemory(ctx);
    long long bits, rf, lag_max_ms, count, epoch = -1, base_seq = -1, expiration_ms = 0;
    RedisModuleString *producer_id = argv[PRODUCE_ARG(4)];
    int idempotent = !is_text(producer_id, "-1");
    if (!partition_head(argv + PRODUCE_ARG(1), &bits, &rf, &lag_max_ms) ||
        !parse_long(argv[PRODUCE_ARG(7)], &count) ||
        (idempotent && (!parse_long(argv[PRODUCE_ARG(5)], &epoch) ||
                        !parse_long(argv[PRODUCE_ARG(6)], &base_seq) ||
                        !parse_long(argv[PRODUCE_ARG(8)], &expiration_ms)))) {
        return RedisModule_ReplyWithError(ctx, "ERR kafka/produce.lua's ARGV: whole numbers");
    }
    if (!is_text(argv[PRODUCE_ARG(9)], "0")) {
        return RedisModule_ReplyWithError(ctx, "ERR a transactional batch goes to kafka/produce.lua");
    }
    int lost_gap = is_text(argv[PRODUCE_ARG(10)], "1");
    int most_fields;
    if (records_end(argv, argc, PRODUCE_FIRST_RECORD, LAYOUT_KAFKA, &most_fields) != argc) {
        return RedisModule_ReplyWithError(ctx, "ERR a malformed record");
    }
    Produce p;
    if (!produce_start(&p, ctx, "streamadapter.produce", argv, argc, PRODUCE_KEYS,
                       kafka_key_types)) {
        return REDISMODULE_OK;
    }
    long long now = p.now;
    PartitionState s;
    read_state(p.keys[KEY_STATE], (int)rf, &s);
    if (refusal(&s) != NULL) return RedisModule_ReplyWithError(ctx, refusal(&s));

    /* the idempotent producer's checks (kafka/produce.lua says why each) */
    long long words[MOST_WORDS]; /* the epoch, then 4 numbers a batch */
    int batch_count = 0;
    long long last_seq = floor_mod(base_seq + count - 1, SEQUENCE_LIMIT);
    if (idempotent) {
        drop_expired(&p, now - expiration_ms);
        int word_count = producer_words(p.keys[KEY_PRODUCERS], producer_id, words);
        if (word_count < 0) return produce_error(&p, "ERR a malformed producer entry");
        long long stored_epoch = word_count > 0 ? words[0] : -1;
        if (epoch < stored_epoch) return produce_refused(&p, INVALID_PRODUCER_EPOCH);
        RedisModuleString *open = NULL;
        if (RedisModule_KeyType(p.keys[KEY_TXN_OPEN]) == REDISMODULE_KEYTYPE_HASH) {
            RedisModule_HashGet(p.keys[KEY_TXN_OPEN], 0, producer_id, &open, NULL);
        }
        if (open != NULL) return produce_refused(&p, INVALID_TXN_STATE);
        if (word_count > 0 && epoch == stored_epoch) {
            for (int j = 1; j + 3 < word_count; j += 4) {
                if (words[j] == base_seq && words[j + 1] == last_seq) { /* a retry */
                    Writes w = {0};
                    Settled settled = refresh_hw(&p, &s, s.log_end, (int)rf, lag_max_ms, &w);
                    return produce_reply(&p, 1, settled, words[j + 2], words[j + 3]);
                }
                batch_count++;
            }
            if (batch_count > 0) {
                long long ahead = floor_mod(base_seq - words[word_count - 3] - 1, SEQUENCE_LIMIT);
                if (ahead >= SEQUENCE_LIMIT / 2) { /* at or below the last sequence stored */
                    return produce_refused(&p, OUT_OF_ORDER_SEQUENCE_NUMBER);
                }
                if (ahead > 0 && !lost_gap) return produce_refused(&p, UNKNOWN_PRODUCER_ID);
            }
        } else if (word_count > 0 && base_seq != 0 && !lost_gap) {
            /* a newer epoch past its first batch: that batch was stored and taken back */
            return produce_refused(&p, UNKNOWN_PRODUCER_ID);
        }
    }

    Appended appended = append_partition(&p, &s, PRODUCE_FIRST_RECORD, LAYOUT_KAFKA, most_fields,
                                         bits, (int)rf, lag_max_ms);
    if (appended.failed) return produce_error(&p, ID_TOO_SMALL);
    if (idempotent) {
        long long batch[4] = {base_seq, last_seq, appended.first_offset, appended.last_offset};
        RedisModuleString *entry = producer_entry(ctx, epoch, words + 1, batch_count, batch);
        RedisModule_HashSet(p.keys[KEY_PRODUCERS], 0, producer_id, entry, NULL);
        int flags = 0;
        RedisModule_ZsetAdd(p.keys[KEY_PRODUCER_TIMES], (double)now, producer_id, &flags);
        p.wrote = 1;
    }
    return produce_reply(&p, 0, appended.settled, appended.first_offset, appended.last_offset);
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
    if (!produce_start(&p, ctx, "streamadapter.v1produce", argv, argc, V1_KEYS, v1_key_types)) {
        return REDISMODULE_OK;
    }
    PartitionState s;
    read_state(p.keys[KEY_STATE], (int)rf, &s);
    if (refusal(&s) != NULL) return RedisModule_ReplyWithError(ctx, refusal(&s));
    Appended appended =
        append_partition(&p, &s, V1_FIRST_RECORD, LAYOUT_PACKED, most_fields, bits, (int)rf, lag_max_ms);
    if (appended.failed) return produce_error(&p, ID_TOO_SMALL);
    replicate(&p);
    RedisModule_ReplyWithArray(ctx, 4);
    RedisModule_ReplyWithLongLong(ctx, appended.settled.hw);
    RedisModule_ReplyWithLongLong(ctx, appended.settled.isr_size);
    RedisModule_ReplyWithLongLong(ctx, appended.first_offset);
    return RedisModule_ReplyWithLongLong(ctx, appended.last_offset);
}
