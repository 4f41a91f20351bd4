-- Delete a lock whoever holds it (administration, `redguard unlock --force`).
--
-- KEYS[1]  lock key
-- KEYS[2]  unlock channel
-- ARGV[1]  unlock message ("0")
--
-- Returns  1  a lock was deleted and ARGV[1] published
--          0  there was nothing to delete
-- Errors   WRONGTYPE when a non-hash value is stored at KEYS[1]; it is left untouched.
if redis.call('exists', KEYS[1]) == 0 then
    return 0
end
if redis.call('type', KEYS[1])['ok'] ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
