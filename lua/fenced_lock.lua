-- Acquire or re-enter a fenced lock (Redisson RFencedLock layout): a reentrant lock whose every
-- acquisition, re-entry included, draws the next fencing token.
--
-- KEYS[1]  lock key: a hash of holder id -> hold count
-- KEYS[2]  token counter "redisson_lock_token:{name}" (a string integer, never expires: one a
--          run-once claim of the same name gave an expiry loses it here)
-- ARGV[1]  lease in milliseconds (PEXPIRE applied on success)
-- ARGV[2]  holder id "<client uuid>:<thread id>"
--
-- Returns  {1, token}  acquired or re-entered; token = the counter after INCR (>= 1)
--          {0, ms}     held by someone else; ms = its remaining ttl (-1: the key has no expiry)
-- Errors   WRONGTYPE when a non-hash value is stored at KEYS[1], or a hash that is not a lock
--          (lock_shape.lua) nor a run-once record (waited on as held), left untouched; an error
--          from INCR when KEYS[2] holds no integer (raised before anything is written).
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local token = redis.call('incr', KEYS[2])
    redis.call('persist', KEYS[2])
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, token}
end
if not is_lock(KEYS[1]) and not is_record(KEYS[1]) then
    return not_a_lock()
end
return {0, redis.call('pttl', KEYS[1])}
