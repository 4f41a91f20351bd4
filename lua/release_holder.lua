-- Drop every hold of one holder at once (client shutdown releasing what it still holds).
--
-- KEYS[1]  lock key
-- KEYS[2]  unlock channel
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  holder id
--
-- Returns  nil  the holder does not hold the lock
--          1    the holder's holds were dropped, the key deleted and ARGV[1] published
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
