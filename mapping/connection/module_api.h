/* The part of Redis' module API (Redis 6.2 and later) that the streamadapter module uses, declared
 * as the server hands it out: a module looks each function up by name through the getter
 * the server passes as the first word of the context, at load time. */
#ifndef STREAMADAPTER_MODULE_API_H
#define STREAMADAPTER_MODULE_API_H

#include <stddef.h>
#include <stdint.h>

#define REDISMODULE_OK 0
#define REDISMODULE_ERR 1
#define REDISMODULE_APIVER_1 1
#define REDISMODULE_READ (1 << 0)
#define REDISMODULE_WRITE (1 << 1)
#define REDISMODULE_KEYTYPE_EMPTY 0
#define REDISMODULE_KEYTYPE_HASH 3
#define REDISMODULE_KEYTYPE_ZSET 5
#define REDISMODULE_KEYTYPE_STREAM 7
#define REDISMODULE_HASH_DELETE ((RedisModuleString *)(long)1)
#define REDISMODULE_CTX_FLAGS_REPLICATED (1 << 12)
#define REDISMODULE_CTX_FLAGS_LOADING (1 << 13)

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleStreamID {
    uint64_t ms;
    uint64_t seq;
} RedisModuleStreamID;
typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

#define STREAMADAPTER_API(ret, name, args) static ret(*RedisModule_##name) args
STREAMADAPTER_API(int, GetApi, (const char *, void *));
STREAMADAPTER_API(void, SetModuleAttribs, (RedisModuleCtx *, const char *, int, int));
STREAMADAPTER_API(int, CreateCommand,
                  (RedisModuleCtx *, const char *, RedisModuleCmdFunc, const char *, int, int,
                   int));
STREAMADAPTER_API(void *, OpenKey, (RedisModuleCtx *, RedisModuleString *, int));
STREAMADAPTER_API(void, CloseKey, (RedisModuleKey *));
STREAMADAPTER_API(int, KeyType, (RedisModuleKey *));
STREAMADAPTER_API(int, StreamAdd,
                  (RedisModuleKey *, int, RedisModuleStreamID *, RedisModuleString **, int64_t));
STREAMADAPTER_API(int, StreamIteratorStart,
                  (RedisModuleKey *, int, RedisModuleStreamID *, RedisModuleStreamID *));
STREAMADAPTER_API(int, StreamIteratorStop, (RedisModuleKey *));
STREAMADAPTER_API(int, StreamIteratorNextID, (RedisModuleKey *, RedisModuleStreamID *, long *));
STREAMADAPTER_API(int, StreamIteratorNextField,
                  (RedisModuleKey *, RedisModuleString **, RedisModuleString **));
STREAMADAPTER_API(const char *, StringPtrLen, (const RedisModuleString *, size_t *));
STREAMADAPTER_API(RedisModuleString *, CreateString, (RedisModuleCtx *, const char *, size_t));
STREAMADAPTER_API(void, FreeString, (RedisModuleCtx *, RedisModuleString *));
STREAMADAPTER_API(int, ReplyWithLongLong, (RedisModuleCtx *, long long));
STREAMADAPTER_API(int, ReplyWithError, (RedisModuleCtx *, const char *));
STREAMADAPTER_API(int, ReplyWithArray, (RedisModuleCtx *, long));
STREAMADAPTER_API(int, WrongArity, (RedisModuleCtx *));
STREAMADAPTER_API(int, ReplicateVerbatim, (RedisModuleCtx *));
STREAMADAPTER_API(int, Replicate, (RedisModuleCtx *, const char *, const char *, ...));
STREAMADAPTER_API(void, AutoMemory, (RedisModuleCtx *));
STREAMADAPTER_API(long long, Milliseconds, (void));
STREAMADAPTER_API(int, GetContextFlags, (RedisModuleCtx *));
STREAMADAPTER_API(size_t, ValueLength, (RedisModuleKey *));
STREAMADAPTER_API(int, HashGet, (RedisModuleKey *, int, ...));
STREAMADAPTER_API(int, HashSet, (RedisModuleKey *, int, ...));
STREAMADAPTER_API(int, ZsetAdd, (RedisModuleKey *, double, RedisModuleString *, int *));
STREAMADAPTER_API(int, ZsetRem, (RedisModuleKey *, RedisModuleString *, int *));
STREAMADAPTER_API(int, ZsetFirstInScoreRange, (RedisModuleKey *, double, double, int, int));
STREAMADAPTER_API(RedisModuleString *, ZsetRangeCurrentElement, (RedisModuleKey *, double *));
STREAMADAPTER_API(int, ZsetRangeNext, (RedisModuleKey *));
STREAMADAPTER_API(int, ZsetRangeEndReached, (RedisModuleKey *));
STREAMADAPTER_API(void, ZsetRangeStop, (RedisModuleKey *));
STREAMADAPTER_API(int, PublishMessage, (RedisModuleCtx *, RedisModuleString *, RedisModuleString *));
STREAMADAPTER_API(RedisModuleString *, CreateStringFromLongLong, (RedisModuleCtx *, long long));

#define STREAMADAPTER_GET_API(name) \
    (RedisModule_GetApi("RedisModule_" #name, (void *)&RedisModule_##name) == REDISMODULE_OK)

/* RedisModule_Init of the server's own header, for the functions above. */
static int module_api_init(RedisModuleCtx *ctx, const char *name, int version) {
    void *getter = ((void **)ctx)[0];
    RedisModule_GetApi = (int (*)(const char *, void *))(uintptr_t)getter;
    if (!(STREAMADAPTER_GET_API(SetModuleAttribs) && STREAMADAPTER_GET_API(CreateCommand) &&
          STREAMADAPTER_GET_API(OpenKey) && STREAMADAPTER_GET_API(CloseKey) &&
          STREAMADAPTER_GET_API(KeyType) && STREAMADAPTER_GET_API(StreamAdd) &&
          STREAMADAPTER_GET_API(StreamIteratorStart) && STREAMADAPTER_GET_API(StreamIteratorStop) &&
          STREAMADAPTER_GET_API(StreamIteratorNextID) &&
          STREAMADAPTER_GET_API(StreamIteratorNextField) &&
          STREAMADAPTER_GET_API(StringPtrLen) && STREAMADAPTER_GET_API(CreateString) &&
          STREAMADAPTER_GET_API(FreeString) && STREAMADAPTER_GET_API(ReplyWithLongLong) &&
          STREAMADAPTER_GET_API(ReplyWithError) && STREAMADAPTER_GET_API(ReplyWithArray) &&
          STREAMADAPTER_GET_API(WrongArity) && STREAMADAPTER_GET_API(ReplicateVerbatim) &&
          STREAMADAPTER_GET_API(Replicate) && STREAMADAPTER_GET_API(AutoMemory) &&
          STREAMADAPTER_GET_API(Milliseconds) && STREAMADAPTER_GET_API(GetContextFlags) &&
          STREAMADAPTER_GET_API(ValueLength) && STREAMADAPTER_GET_API(HashGet) &&
          STREAMADAPTER_GET_API(HashSet) && STREAMADAPTER_GET_API(ZsetAdd) &&
          STREAMADAPTER_GET_API(ZsetRem) && STREAMADAPTER_GET_API(ZsetFirstInScoreRange) &&
          STREAMADAPTER_GET_API(ZsetRangeCurrentElement) && STREAMADAPTER_GET_API(ZsetRangeNext) &&
          STREAMADAPTER_GET_API(ZsetRangeEndReached) && STREAMADAPTER_GET_API(ZsetRangeStop) &&
          STREAMADAPTER_GET_API(PublishMessage) &&
          STREAMADAPTER_GET_API(CreateStringFromLongLong))) {
        return REDISMODULE_ERR; /* a server older than the stream API (6.2) */
    }
    RedisModule_SetModuleAttribs(ctx, name, version, REDISMODULE_APIVER_1);
    return REDISMODULE_OK;
}

#endif
