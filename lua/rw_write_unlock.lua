-- Release one write hold (or, with ARGV[4] = "1", every write hold) of a read-write lock.
--
-- KEYS[1]  lock key (hash: "mode" plus one hold-count field per holder)
-- ARGV[1]  read-unlock message, published when the write side is released ("1": every
--          waiter may try, readers can all get in)
-- ARGV[2]  lease in milliseconds, re-applied while write holds remain
-- ARGV[3]  the holder's write field "<holder id>:write"
-- ARGV[4]  "1" to drop every write hold of the holder, "0" to drop one
-- ARGV[5]  the lock's channel "redisson_rwlock:{name}" (not a key: see unlock.lua)
--
-- When the last write hold goes and the same holder still holds the read side (it downgraded),
-- the lock stays in "read" mode for it; otherwise the key is deleted. Either way waiters are
-- told (Redisson publishes only on deletion; a message more is harmless to its waiters).
--
-- Returns  nil  the holder does not hold the write side (nothing changed)
--          0    one write hold released; the holder still holds the write side, lease refreshed
--          1    the write side released and ARGV[1] published
if redis.call('hget', KEYS[1], 'mode') ~= 'write' then
    return nil
end
local held = tonumber(redis.call('hget', KEYS[1], ARGV[3]) or '')
if held == nil or held < 1 then
    return nil
end
if held > 1 and ARGV[4] ~= '1' then
    redis.call('hincrby', KEYS[1], ARGV[3], -1)
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) <= 1 then
    redis.call('del', KEYS[1])
else
    redis.call('hset', KEYS[1], 'mode', 'read')
end
notify(ARGV[5], ARGV[1])
return 1
