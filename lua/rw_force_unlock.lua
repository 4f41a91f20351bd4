-- Delete a read-write lock whoever holds it (administration, `redguard unlock --force`).
--
-- KEYS[1]  lock key (hash with a "mode" field)
-- ARGV[1]  message published on deletion ("1": every waiter may try)
-- ARGV[2]  "read" or "write" to delete only a lock in that mode, "" for either
-- ARGV[3]  the lock's channel "redisson_rwlock:{name}" (not a key: see unlock.lua)
--
-- The holders' per-read-hold timeout keys are left to expire with their leases.
--
-- Returns  1  the lock was deleted and ARGV[1] published
--          0  nothing deleted (no read-write lock there, or not in the mode asked for)
-- Errors   WRONGTYPE when a non-hash value is stored at KEYS[1], or a hash with a "mode" field
--          that is not a lock (lock_shape.lua); it is left untouched.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    return 0
end
if not is_lock(KEYS[1]) then
    return not_a_lock()
end
if ARGV[2] ~= '' and mode ~= ARGV[2] then
    return 0
end
redis.call('del', KEYS[1])
notify(ARGV[3], ARGV[1])
return 1
