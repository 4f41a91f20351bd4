-- Delete a count-down latch (Redisson RCountDownLatch.delete): its waiters see the count 0.
--
-- KEYS[1]  latch counter (string: the count)
-- KEYS[2]  the latch's channel "redisson_countdownlatch__channel__{name}"
-- ARGV[1]  new-count message ("1")
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
notify(KEYS[2], ARGV[1])
return 1
