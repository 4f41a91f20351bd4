-- Set the count of a count-down latch unless it is set (Redisson RCountDownLatch.trySetCount).
--
-- KEYS[1]  latch counter: a string holding the count
-- ARGV[1]  new-count message ("1")
-- ARGV[2]  the count (a positive integer)
-- ARGV[3]  the latch's channel "redisson_countdownlatch__channel__{name}" (not a key: see unlock.lua)
--
-- Returns  1   set, and ARGV[1] published
--          0   the latch is set already; nothing changed
-- Errors   WRONGTYPE when KEYS[1] holds a value that is not a count; it is left untouched.
local value = redis.call('get', KEYS[1])
if value ~= false then
    if tonumber(value) == nil then
        return redis.error_reply('WRONGTYPE the value at this key is not a latch count')
    end
    return 0
end
redis.call('set', KEYS[1], ARGV[2])
notify(ARGV[3], ARGV[1])
return 1
