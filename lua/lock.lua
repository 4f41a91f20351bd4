-- Acquire or re-enter a reentrant lock (Redisson RLock layout).
--
-- KEYS[1]  lock key: a hash of holder id -> hold count
-- ARGV[1]  lease in milliseconds (PEXPIRE applied on success)
-- ARGV[2]  holder id "<client uuid>:<thread id>"
--
-- Returns  nil   acquired, or re-entered (hold count incremented)
--          int   remaining ttl in ms of the current holder (-1: the key has no expiry)
-- Errors   WRONGTYPE when a non-hash value is stored at KEYS[1], or a hash that is not a lock
--          (lock_shape.lua) nor a run-once record (waited on as held); it is left untouched.
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], '1')
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
-- @prelude
if not is_lock(KEYS[1]) and not is_record(KEYS[1]) then
    return not_a_lock()
end
return redis.call('pttl', KEYS[1])
