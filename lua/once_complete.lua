-- Record the outcome of a run and end the runner's hold, in one step, only if the runner still
-- holds the key: a runner whose lease was lost (expired, deleted, claimed by another runner)
-- can never write a record.
--
-- KEYS[1]  the run-once key (see once_claim.lua for its two layouts)
-- KEYS[2]  its last-attempt record (see once_claim.lua): when the runner's and still "running",
--          it becomes "done", ended at `at`, with PEXPIRE = ARGV[3] (a failure recorded on
--          purpose was ended as "failed" before, and stays so)
-- ARGV[1]  holder id of the runner
-- ARGV[2]  the outcome (any bytes)
-- ARGV[3]  ttl of the record in milliseconds
-- ARGV[4]  message published on ARGV[5] once recorded: "1" (Redisson's READ_UNLOCK_MESSAGE),
--          which wakes every waiter, not just one as the unlock message "0" does: each caller
--          waiting for the outcome reads the record (Redisson-style lock waiters find the key
--          taken by it and keep waiting)
-- ARGV[5]  its unlock channel "redisson_lock__channel:{key}" (not a key: see unlock.lua)
--
-- Returns  at  recorded, at `at` ms since the epoch (server clock, > 0): the key now holds the
--              hash {outcome = ARGV[2], at = at, by = ARGV[1]} with PEXPIRE = ARGV[3] (every
--              hold of the runner ends with it), and ARGV[4] was published once
--          0   refused: the holder does not hold the key; nothing changed
-- Errors   WRONGTYPE when a non-hash value is stored at KEYS[1], or a hash of more than 10,000
--          fields (no lock's: planted beside the claim); it is left untouched.
redis.replicate_commands()
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return 0
end
-- Fields planted beside the claim: no lock's (lock_shape.lua), and too many to free at once
-- (the record replaces the whole hash).
if redis.call('hlen', KEYS[1]) > 10000 then
    return redis.error_reply('WRONGTYPE the hash at this key is not a lock (more than 10000 '
        .. 'fields); left untouched')
end
local t = redis.call('time')
local at = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], 'outcome', ARGV[2], 'at', at, 'by', ARGV[1])
redis.call('pexpire', KEYS[1], ARGV[3])
local attempt = redis.call('hmget', KEYS[2], 'holder', 'state')
if attempt[1] == ARGV[1] and attempt[2] == 'running' then
    redis.call('hset', KEYS[2], 'state', 'done', 'ended_at', at)
    redis.call('pexpire', KEYS[2], ARGV[3])
end
notify(ARGV[5], ARGV[4])
return tonumber(at)
