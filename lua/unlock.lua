-- Release one hold of a reentrant lock.
--
-- KEYS[1]  lock key
-- KEYS[2]  unlock channel "redisson_lock__channel:{name}"
-- ARGV[1]  unlock message published on full release ("0")
-- ARGV[2]  lease in milliseconds, re-applied while holds remain
-- ARGV[3]  holder id
--
-- Returns  nil   the holder does not hold the lock (nothing changed)
--          0     still held by the holder: hold count decremented, lease refreshed
--          1     fully released: key deleted and ARGV[1] published once
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local count = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if count > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
end
-- @prelude
redis.call('del', KEYS[1])
notify(KEYS[2], ARGV[1])
return 1
