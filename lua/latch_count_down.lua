-- Count a count-down latch down by one (Redisson RCountDownLatch.countDown).
--
-- KEYS[1]  latch counter (string: the count)
-- ARGV[1]  zero-count message ("0"), published once, when the count reaches zero
-- ARGV[2]  the latch's channel "redisson_countdownlatch__channel__{name}" (not a key: see unlock.lua)
--
-- At zero the counter is deleted: the latch is open and can be set again. An absent counter
-- (never set, or open already) is left alone.
--
-- Returns  the count after the call (0 once open)
-- Errors   WRONGTYPE when KEYS[1] holds a value that is not a count; it is left untouched.
local value = redis.call('get', KEYS[1])
if value == false then
    return 0
end
if tonumber(value) == nil then
    return redis.error_reply('WRONGTYPE the value at this key is not a latch count')
end
local left = redis.call('decr', KEYS[1])
if left <= 0 then
    redis.call('del', KEYS[1])
end
if left == 0 then
    notify(ARGV[2], ARGV[1])
end
if left < 0 then
    return 0
end
return left
