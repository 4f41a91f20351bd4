-- Drop every hold of one holder at once (client shutdown releasing what it still holds).
--
-- KEYS[1]  lock key
-- KEYS[2]  unlock channel
-- KEYS[3]  (fair locks only) wait queue "redisson_lock_queue:{name}"
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  holder id
--
-- Without KEYS[3] the message goes to KEYS[2]; with it, only to the queue head, on
-- KEYS[2] .. ':' .. <its holder id> (nothing when the queue is empty).
--
-- Returns  nil  the holder does not hold the lock
--          1    the holder's holds were dropped, the key deleted and ARGV[1] published
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
redis.call('del', KEYS[1])
if KEYS[3] then
    local head = redis.call('lindex', KEYS[3], 0)
    if head then
        notify(KEYS[2] .. ':' .. head, ARGV[1])
    end
else
    notify(KEYS[2], ARGV[1])
end
return 1
