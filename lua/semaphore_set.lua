-- Set the number of permits of a semaphore unless it was set before (Redisson trySetPermits).
--
-- KEYS[1]  permit counter (string: number of available permits)
-- ARGV[1]  permits (a positive integer)
-- ARGV[2]  the semaphore's channel "redisson_sc:{name}" (not a key: see unlock.lua)
--
-- Returns  1  set, and ARGV[1] published on ARGV[2]
--          0  the counter exists already; nothing changed
-- Errors   WRONGTYPE when KEYS[1] holds a value that is not a permit count; it is left untouched.
local value = redis.call('get', KEYS[1])
if value ~= false then
    if tonumber(value) == nil then
        return redis.error_reply('WRONGTYPE the value at this key is not a permit count')
    end
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
notify(ARGV[2], ARGV[1])
return 1
