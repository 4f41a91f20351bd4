-- Delete a count-down latch (Redisson RCountDownLatch.delete): its waiters see the count 0.
--
-- KEYS[1]  latch counter (string: the count)
-- ARGV[1]  zero-count message ("0"): a deleted latch reads as count 0, which is open, so every
--          waiter, Java ones included, is told to wake and read the count again. (Redisson's own
--          delete publishes the new-count message "1", on which a Java waiter keeps sleeping.)
-- ARGV[2]  the latch's channel "redisson_countdownlatch__channel__{name}" (not a key: see unlock.lua)
--
-- Returns  1  a latch was deleted and ARGV[1] published
--          0  there was none
-- Errors   WRONGTYPE when KEYS[1] holds a value that is not a count; it is left untouched.
local value = redis.call('get', KEYS[1])
if value == false then
    return 0
end
if tonumber(value) == nil then
    return redis.error_reply('WRONGTYPE the value at this key is not a latch count')
end
redis.call('del', KEYS[1])
notify(ARGV[2], ARGV[1])
return 1
