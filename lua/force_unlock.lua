-- Delete a lock whoever holds it (administration, `redguard unlock --force`).
--
-- KEYS[1]  lock key
-- KEYS[2]  (fair locks only) wait queue "redisson_lock_queue:{name}"
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  unlock channel (not a key: see unlock.lua)
--
-- The message goes to ARGV[2], where a redguard holder listens for a force unlock; with
-- KEYS[2] also to the queue head, on ARGV[2] .. ':' .. <its holder id> (Redisson's fair
-- force unlock publishes only there).
--
-- Returns  1  a lock was deleted and ARGV[1] published
--          0  there was nothing to delete
-- Errors   WRONGTYPE when a non-hash value is stored at KEYS[1], or a hash that is not a lock
--          (lock_shape.lua); it is left untouched and nothing is published.
if redis.call('exists', KEYS[1]) == 0 then
    return 0
end
if redis.call('type', KEYS[1])['ok'] ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
if not is_lock(KEYS[1]) then
    return not_a_lock()
end
redis.call('del', KEYS[1])
if KEYS[2] then
    local head = redis.call('lindex', KEYS[2], 0)
    if head then
        notify(ARGV[2] .. ':' .. head, ARGV[1])
    end
end
notify(ARGV[2], ARGV[1])
return 1
