-- Claim a run-once key, or report who holds it or what it recorded.
--
-- The key has two lives. While a runner works it is a reentrant lock in Redisson's layout: a
-- hash of holder id -> hold count, PEXPIRE = the runner's lease, renewed by the watchdog and
-- released by the unlock script (abandon). Once the runner completes, the same key is a record:
-- a hash with the fields "outcome" (bytes), "at" (ms since the epoch, server clock) and "by"
-- (the runner's holder id), PEXPIRE = the record's ttl. A lock script sees the record as a lock
-- held by someone else, so nothing else can take the key while it is recorded.
--
-- KEYS[1]  the run-once key
-- KEYS[2]  its fencing-token counter "redisson_lock_token:{key}" (a string integer, shared
--          with a fenced lock of the same name). A claim that creates it starts it at the
--          server's clock in ms and gives it an expiry of the record's ttl or the lease,
--          whichever is longer (extended, never shortened, by later claims), so that a run-once
--          key leaves no counter behind; tokens still only ever grow, since a counter created
--          after one expired starts past every token the old one gave (fewer than one claim a
--          ms). A counter without expiry (a fenced lock's, Redisson's included) is left so.
-- ARGV[1]  lease in milliseconds (PEXPIRE applied when claimed)
-- ARGV[2]  holder id "<client uuid>:<thread id>"
-- KEYS[3]  its last-attempt record "redguard_once_attempt:{key}", a hash: state ("running",
--          later "done", "failed", "abandoned", "timed_out"), holder, host, pid, program,
--          started_at and ended_at (ms since the epoch, server clock), exit_status, signal
-- ARGV[3]  "1" to claim the key when it is free; "0" only to look (nothing is written)
-- ARGV[4]  ttl of the last-attempt record in milliseconds (claims only)
-- ARGV[5]  host, ARGV[6] pid, ARGV[7] program of the runner, for the last-attempt record
-- ARGV[8]  longest outcome sent, bytes; ARGV[9] longest "at" or "by" sent: a longer value
--          (someone else wrote it) is answered by its length, never its bytes
--
-- Returns  {1, token}                    claimed: the caller runs; token = the counter after INCR
--          {0, pttl, holder}             a runner holds the key: its remaining lease in ms (-1:
--                                        no expiry) and its holder id (the caller's own when the
--                                        calling thread is the runner: a claim is not reentrant)
--                                        (a claim also replaces KEYS[3] with a "running"
--                                        attempt started now, PEXPIRE = ARGV[4])
--          {2, outcome, at, by, pttl}    done: the record and its remaining ttl in ms (-1: none);
--                                        a value over its bound (ARGV[8], ARGV[9]) as its length
--          {3}                           free, and ARGV[3] is "0"
-- Errors   WRONGTYPE when a non-hash value is stored at KEYS[1], or a hash that is neither a
--          lock (lock_shape.lua) nor a record (only the fields above), left untouched; an error
--          from INCR when KEYS[2] holds no integer (raised before anything is written);
--          WRONGTYPE when a claim finds at KEYS[3] a hash of more than 10,000 fields or a list,
--          set, zset or stream (planted: too big to replace at once), left untouched.
redis.replicate_commands()
if redis.call('exists', KEYS[1]) == 0 then
    if ARGV[3] ~= '1' then
        return {3}
    end
    -- A last-attempt record has a few fields: one of more than 10,000 is planted, and too
    -- big to free at once (the claim replaces it).
    local attempt = redis.call('type', KEYS[3])['ok']
    if (attempt == 'hash' and redis.call('hlen', KEYS[3]) > 10000)
        or (attempt ~= 'hash' and attempt ~= 'string' and attempt ~= 'none') then
        return redis.error_reply('WRONGTYPE the last-attempt record of this key is not one; '
            .. 'left untouched')
    end
    local t = redis.call('time')
    local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local keep = math.max(tonumber(ARGV[4]), tonumber(ARGV[1]))
    local counter_ttl = redis.call('pttl', KEYS[2])
    if counter_ttl == -2 then
        redis.call('set', KEYS[2], string.format('%d', now_ms))
    end
    local token = redis.call('incr', KEYS[2])
    if counter_ttl == -2 or (counter_ttl >= 0 and counter_ttl < keep) then
        redis.call('pexpire', KEYS[2], keep)
    end
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    redis.call('del', KEYS[3])
    redis.call('hset', KEYS[3], 'state', 'running', 'holder', ARGV[2], 'host', ARGV[5],
        'pid', ARGV[6], 'program', ARGV[7],
        'started_at', string.format('%d', now_ms))
    redis.call('pexpire', KEYS[3], ARGV[4])
    return {1, token}
end
local pttl = redis.call('pttl', KEYS[1])
if redis.call('hexists', KEYS[1], 'outcome') == 1 then
    -- A record has these fields and no other: an application's hash that merely has an
    -- "outcome" field is not one.
    if not is_record(KEYS[1]) then
        return not_a_lock()
    end
    -- Each value's length before its bytes: a value over its bound never leaves the server.
    local function bounded(field, max, missing)
        local len = redis.call('hstrlen', KEYS[1], field)
        if len > max then
            return len
        end
        return redis.call('hget', KEYS[1], field) or missing
    end
    local max_field = tonumber(ARGV[9])
    return {2, bounded('outcome', tonumber(ARGV[8]), ''), bounded('at', max_field, '0'),
        bounded('by', max_field, ''), pttl}
end
if not is_lock(KEYS[1]) then
    return not_a_lock()
end
local holder = ''
local fields = redis.call('hscan', KEYS[1], '0', 'COUNT', SHAPE_SAMPLE)[2]
for i = 1, #fields, 2 do
    if fields[i] ~= 'mode' then
        holder = fields[i]
        break
    end
end
return {0, pttl, holder}
