-- Take permits of an expiring-permit semaphore (Redisson RPermitExpirableSemaphore layout).
--
-- KEYS[1]  permit counter: a string holding the number of available permits
-- KEYS[2]  permit leases "{name}:timeout": a zset of permit id -> lease end (ms epoch)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  tolerated clock skew in milliseconds (0: none), against other clients that stamp lease
--          ends with their own clocks (Redisson does)
-- ARGV[3]  the semaphore's channel "redisson_sc:{name}" (not a key: see unlock.lua)
-- ARGV[4..n]  the ids of the permits to take (16 random bytes each), one per permit
--
-- Lease ends come from this server's clock (TIME). Permits whose lease ended more than the skew
-- ago (their holder died or stopped renewing) are first given back to the counter, and the new
-- count published. Then, when enough permits are available, all n - 3 are taken at once, each
-- recorded under its id with the end of its lease plus the skew.
--
-- Returns  {1}       taken
--          {0, ms}   not enough permits: ms = time until the earliest lease can be taken back
--                    (-1: no lease recorded, or the semaphore was never set)
-- Errors   WRONGTYPE when KEYS[1] holds a value that is not a permit count, or KEYS[2] is not a
--          zset; both are left untouched.
redis.replicate_commands()
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) == nil then
    return redis.error_reply('WRONGTYPE the value at this key is not a permit count')
end
local skew = tonumber(ARGV[2])
local ended = redis.call('zrangebyscore', KEYS[2], 0, now - skew, 'limit', 0, 1000)
if #ended > 0 then
    for _, id in ipairs(ended) do
        redis.call('zrem', KEYS[2], id)
    end
    value = redis.call('incrby', KEYS[1], #ended)
    if value > 0 then
        notify(ARGV[3], value)
    end
end
local wanted = #ARGV - 3
if value ~= false and tonumber(value) >= wanted then
    redis.call('decrby', KEYS[1], wanted)
    local ends = now + tonumber(ARGV[1]) + skew
    for i = 4, #ARGV do
        redis.call('zadd', KEYS[2], ends, ARGV[i])
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    return {1}
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if first[1] ~= nil then
    return {0, math.max(tonumber(first[2]) + skew - now, 0)}
end
return {0, -1}
