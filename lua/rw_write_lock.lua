-- Acquire or re-enter the write side of a read-write lock (Redisson RReadWriteLock layout).
--
-- KEYS[1]  lock key: a hash with field "mode" and one field per holder (hold count)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  the holder's write field "<holder id>:write"
--
-- A writer excludes everyone: it gets the lock only when the key is absent, or re-enters when it
-- holds the write side already. A holder of the read side cannot take the write side (no
-- upgrade): its own read hold keeps the mode at "read".
--
-- Returns  nil   acquired, or re-entered (hold count incremented)
--          int   not acquired: the remaining ttl in ms of the lock (-1: the key has no expiry)
-- Errors   WRONGTYPE when KEYS[1] holds a non-hash value, or a hash that is not a read-write
--          lock (no "mode" field, or fields of another shape: lock_shape.lua); it is left
--          untouched.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    if redis.call('exists', KEYS[1]) == 1 then
        return redis.error_reply('WRONGTYPE the hash at this key is not a read-write lock')
    end
    redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    return nil
end
if not is_lock(KEYS[1]) then
    return not_a_lock()
end
return redis.call('pttl', KEYS[1])
