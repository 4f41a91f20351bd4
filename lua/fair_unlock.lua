-- Release one hold of a fair lock; the last release wakes only the next waiter in the queue.
--
-- KEYS[1]  lock key
-- KEYS[2]  wait queue "redisson_lock_queue:{name}"
-- KEYS[3]  wait deadlines "redisson_lock_timeout:{name}"
-- ARGV[1]  unlock message published on full release ("0")
-- ARGV[2]  lease in milliseconds, re-applied while holds remain
-- ARGV[3]  holder id
-- ARGV[4]  unlock channel "redisson_lock__channel:{name}" (not a key: see unlock.lua); the next waiter
--          listens on ARGV[4] .. ':' .. <its holder id> (Redisson's layout)
--
-- Queue heads whose deadline (server clock) has passed, or that have none, are dropped first,
-- oldest first as Redisson's unlock does, so that the message goes to a live waiter.
--
-- Returns  nil   the holder does not hold the lock (nothing changed)
--          0     still held by the holder: hold count decremented, lease refreshed
--          1     fully released: key deleted, ARGV[1] published once, to the queue head only
-- Errors   WRONGTYPE when a non-hash value is stored at KEYS[1]; it is left untouched.
redis.replicate_commands()
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local count = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if count > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
end
redis.call('del', KEYS[1])

local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local head = redis.call('lindex', KEYS[2], 0)
while head do
    local deadline = redis.call('zscore', KEYS[3], head)
    if deadline and tonumber(deadline) > now then
        break
    end
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], head)
    head = redis.call('lindex', KEYS[2], 0)
end
if head then
    notify(ARGV[4] .. ':' .. head, ARGV[1])
end
return 1
