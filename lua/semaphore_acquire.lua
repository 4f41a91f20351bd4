-- Take permits of a semaphore (Redisson RSemaphore layout).
--
-- KEYS[1]  permit counter: a string holding the number of available permits
-- ARGV[1]  permits to take (a positive integer)
--
-- Nothing is taken unless all ARGV[1] permits are available at once.
--
-- Returns  1  taken: the counter was decremented by ARGV[1]
--          0  not enough permits available (or the semaphore was never set); nothing changed
-- Errors   WRONGTYPE when KEYS[1] holds a value that is not a permit count; it is left untouched.
local value = redis.call('get', KEYS[1])
if value == false then
    return 0
end
local available = tonumber(value)
if available == nil then
    return redis.error_reply('WRONGTYPE the value at this key is not a permit count')
end
if available >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    return 1
end
return 0
