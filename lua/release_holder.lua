-- Drop every hold of one holder at once (client shutdown releasing what it still holds).
--
-- KEYS[1]  lock key
-- KEYS[2]  (fair locks only) wait queue "redisson_lock_queue:{name}"
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  holder id
-- ARGV[3]  unlock channel (not a key: see unlock.lua)
--
-- Without KEYS[2] the message goes to ARGV[3]; with it, only to the queue head, on
-- ARGV[3] .. ':' .. <its holder id> (nothing when the queue is empty).
--
-- Returns  nil  the holder does not hold the lock
--          1    the holder's holds were dropped, the key deleted and ARGV[1] published (a hash
--               of more than 10,000 fields, no lock's, loses only the holder's field)
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
-- Fields planted beside the hold: no lock's (lock_shape.lua), and too many to free at once
-- (DEL frees every field). Only the holder's field goes; nobody is told.
if redis.call('hlen', KEYS[1]) > 10000 then
    redis.call('hdel', KEYS[1], ARGV[2])
    return 1
end
redis.call('del', KEYS[1])
if KEYS[2] then
    local head = redis.call('lindex', KEYS[2], 0)
    if head then
        notify(ARGV[3] .. ':' .. head, ARGV[1])
    end
else
    notify(ARGV[3], ARGV[1])
end
return 1
