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
-- oldest first as Redisson's unlock does, so that the message goes to a live waiter; at most
-- MAX_DROPS per call (later calls drop the rest).
--
-- Returns  nil   the holder does not hold the lock (nothing changed)
--          0     still held by the holder: hold count decremented, lease refreshed
--          1     fully released: key deleted, ARGV[1] published once, to the queue head only
--                (a hash of more than 10,000 fields, no lock's, loses only the holder's field)
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
local MAX_FIELDS = 10000
if redis.call('hlen', KEYS[1]) > MAX_FIELDS then
    -- Fields planted beside the hold: no lock's (lock_shape.lua), and too many to free
    -- at once. Only the hold goes; the hash keeps its expiry.
    redis.call('hdel', KEYS[1], ARGV[3])
    return 1
end
redis.call('del', KEYS[1])

-- At most MAX_DROPS dead heads, in four commands: a planted queue of a million costs no more;
-- its other dead heads go at later calls, and the head then told is one of them.
local MAX_DROPS = 100
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local heads = redis.call('lrange', KEYS[2], 0, MAX_DROPS)
if #heads == 0 then
    return 1
end
local deadlines = redis.call('zmscore', KEYS[3], unpack(heads))
local dead = 0
for i in ipairs(heads) do
    if i > MAX_DROPS or (deadlines[i] and tonumber(deadlines[i]) > now) then
        break
    end
    dead = i
end
if dead > 0 then
    redis.call('lpop', KEYS[2], dead)
    redis.call('zrem', KEYS[3], unpack(heads, 1, dead))
end
local head = heads[dead + 1]
if head then
    notify(ARGV[4] .. ':' .. head, ARGV[1])
end
return 1
