-- Count the permits of an expiring-permit semaphore, first taking back those whose lease ended.
--
-- KEYS[1]  permit counter (string: number of available permits)
-- KEYS[2]  permit leases "{name}:timeout" (zset: permit id -> lease end, ms epoch)
-- ARGV[1]  tolerated clock skew in milliseconds (see permit_acquire.lua): a lease is taken back
--          only once it ended more than this ago
-- ARGV[2]  the semaphore's channel "redisson_sc:{name}" (not a key: see unlock.lua)
--
-- Returns  {available, held}: the counter (0 when never set) and the number of live permits
-- Errors   WRONGTYPE when KEYS[1] holds a value that is not a permit count, or KEYS[2] is not a
--          zset.
redis.replicate_commands()
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) == nil then
    return redis.error_reply('WRONGTYPE the value at this key is not a permit count')
end
local ended = redis.call('zrangebyscore', KEYS[2], 0, now - tonumber(ARGV[1]), 'limit', 0, 1000)
if #ended > 0 then
    for _, id in ipairs(ended) do
        redis.call('zrem', KEYS[2], id)
    end
    value = redis.call('incrby', KEYS[1], #ended)
    if value > 0 then
        notify(ARGV[2], value)
    end
end
return {tonumber(value or 0), redis.call('zcard', KEYS[2])}
