-- Acquire or re-enter the read side of a read-write lock (Redisson RReadWriteLock layout).
--
-- KEYS[1]  lock key: a hash with field "mode" ("read" or "write") and one field per holder
--          (hold count); readers under their holder id, the writer under "<holder id>:write"
-- KEYS[2]  this holder's timeout prefix "{name}:<holder id>:rwlock_timeout"; read hold number n
--          lives as the string key KEYS[2] .. ':' .. n, whose expiry is that hold's lease
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id "<client uuid>:<thread id>"
-- ARGV[3]  the same holder's write field "<holder id>:write"
--
-- Readers share the lock; a holder of the write side may also take the read side (downgrade).
-- The lock key lives at least as long as its longest read hold.
--
-- Returns  nil   acquired (or re-entered: the hold count grows and a new timeout key is made)
--          int   not acquired: the remaining ttl in ms of the lock (-1: the key has no expiry)
-- Errors   WRONGTYPE when KEYS[1] holds a non-hash value, or a hash that is not a read-write
--          lock (no "mode" field, or fields of another shape: lock_shape.lua); it is left
--          untouched.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    if redis.call('exists', KEYS[1]) == 1 then
        return redis.error_reply('WRONGTYPE the hash at this key is not a read-write lock')
    end
    redis.call('hset', KEYS[1], 'mode', 'read', ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':1', 1, 'px', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
-- A holder that holds nothing here yet joins (or waits for) only a hash of a lock's shape.
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 and redis.call('hexists', KEYS[1], ARGV[3]) == 0
    and not is_lock(KEYS[1]) then
    return not_a_lock()
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':' .. n, 1, 'px', ARGV[1])
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    return nil
end
return redis.call('pttl', KEYS[1])
