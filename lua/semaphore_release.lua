-- Give permits back to a semaphore, or add new ones (Redisson RSemaphore layout).
--
-- KEYS[1]  permit counter (string: number of available permits)
-- ARGV[1]  permits to add (an integer; negative takes permits away, as Redisson's addPermits)
-- ARGV[2]  the semaphore's channel "redisson_sc:{name}" (not a key: see unlock.lua)
--
-- The new number of available permits is published on ARGV[2] when it grew (Redisson's waiters
-- read it as how many of them may try). An absent counter counts as 0.
--
-- Returns  the new number of available permits
-- Errors   WRONGTYPE when KEYS[1] holds a value that is not a permit count; it is left untouched.
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) == nil then
    return redis.error_reply('WRONGTYPE the value at this key is not a permit count')
end
local now = redis.call('incrby', KEYS[1], ARGV[1])
if tonumber(ARGV[1]) > 0 then
    notify(ARGV[2], now)
end
return now
