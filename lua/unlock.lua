-- Release one hold of a reentrant lock.
--
-- KEYS[1]  lock key
-- ARGV[1]  unlock message published on full release ("0")
-- ARGV[2]  lease in milliseconds, re-applied while holds remain
-- ARGV[3]  holder id
-- ARGV[4]  unlock channel "redisson_lock__channel:{name}" (not a key: in KEYS, Redis would refuse
--          the script with TRYAGAIN while the lock's slot migrates, as the channel never exists)
--
-- Returns  nil   the holder does not hold the lock (nothing changed)
--          0     still held by the holder: hold count decremented, lease refreshed
--          1     fully released: key deleted and ARGV[1] published once (a hash of more than
--                10,000 fields, no lock's, loses only the holder's field)
local held = redis.call('hget', KEYS[1], ARGV[3])
if not held then
    return nil
end
-- More holds than this one; or a value no lock writes, which HINCRBY
-- refuses with nothing changed.
local count = tonumber(held)
if count == nil or count > 1 then
    redis.call('hincrby', KEYS[1], ARGV[3], '-1')
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
end
-- @prelude
-- Fields planted beside the hold: no lock's (lock_shape.lua), and too many to free at once
-- (DEL frees every field). Only the hold goes; the hash keeps its expiry, nobody is told.
if redis.call('hlen', KEYS[1]) > 10000 then
    redis.call('hdel', KEYS[1], ARGV[3])
    return 1
end
redis.call('del', KEYS[1])
notify(ARGV[4], ARGV[1])
return 1
