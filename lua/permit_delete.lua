-- Delete an expiring-permit semaphore (Redisson RPermitExpirableSemaphore.delete): its permit
-- counter and the leases of its held permits. A holder finds its permit gone at its next
-- renewal; the next trySetPermits sets a count again.
--
-- KEYS[1]  permit counter (string: number of available permits)
-- KEYS[2]  permit leases "{name}:timeout" (zset: permit id -> lease end, ms epoch)
--
-- Returns  1  something was deleted
--          0  neither key existed
-- Errors   WRONGTYPE when KEYS[1] holds a value that is not a permit count, or KEYS[2] a value
--          that is not a zset or a zset of more than 10,000 leases (planted); both are left
--          untouched.
local counter = redis.call('type', KEYS[1])['ok']
if counter == 'string' then
    if tonumber(redis.call('get', KEYS[1])) == nil then
        return redis.error_reply('WRONGTYPE the value at this key is not a permit count')
    end
elseif counter ~= 'none' then
    return redis.error_reply('WRONGTYPE the value at this key is not a permit count')
end
local leases = redis.call('type', KEYS[2])['ok']
if leases ~= 'none' and leases ~= 'zset' then
    return redis.error_reply('WRONGTYPE the permit leases are not a sorted set')
end
-- More leases than keys::MAX_PERMITS_READ are planted, and too many to free at once.
if redis.call('zcard', KEYS[2]) > 10000 then
    return redis.error_reply('WRONGTYPE the permit leases hold more than 10000 permits; '
        .. 'left untouched')
end
if redis.call('del', KEYS[1], KEYS[2]) > 0 then
    return 1
end
return 0
