-- Give back one permit of an expiring-permit semaphore (Redisson RPermitExpirableSemaphore).
--
-- KEYS[1]  permit counter (string: number of available permits)
-- KEYS[2]  permit leases "{name}:timeout" (zset: permit id -> lease end, ms epoch)
-- ARGV[1]  the permit id
-- ARGV[2]  the semaphore's channel "redisson_sc:{name}" (not a key: see unlock.lua)
--
-- Returns  1  the permit was held under this id and is back: the counter grew by one and its
--             new value was published on ARGV[2]
--          0  no permit is held under this id (released before, or its lease ended and it was
--             taken back); nothing changed
-- Errors   WRONGTYPE when KEYS[2] is not a zset or KEYS[1] not a permit count.
if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then
    return 0
end
local value = redis.call('incrby', KEYS[1], 1)
notify(ARGV[2], value)
return 1
