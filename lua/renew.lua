-- Renew (or extend) the lease of a held lock.
--
-- KEYS[1]  lock key
-- ARGV[1]  new lease in milliseconds, counted from now
-- ARGV[2]  holder id
--
-- Returns  1  renewed
--          0  the holder no longer holds the lock (nothing changed)
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    return 1
end
return 0
