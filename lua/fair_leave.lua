-- Take a waiter out of a fair lock's queue (it timed out, failed, or its client shut down).
--
-- KEYS[1]  lock key
-- KEYS[2]  wait queue "redisson_lock_queue:{name}"
-- KEYS[3]  wait deadlines "redisson_lock_timeout:{name}"
-- KEYS[4]  unlock channel "redisson_lock__channel:{name}"
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  holder id of the leaving waiter
--
-- When the leaving waiter was the head and the lock is free, the new head (after pruning
-- waiters whose deadline has passed, server clock) is woken on KEYS[4] .. ':' .. <its id>, so
-- that a wake-up meant for the leaver is passed on, never lost.
--
-- Returns  1  the waiter was queued and is gone
--          0  it was not queued (nothing changed)
redis.replicate_commands()
local head = redis.call('lindex', KEYS[2], 0)
local removed = redis.call('lrem', KEYS[2], 0, ARGV[2])
removed = removed + redis.call('zrem', KEYS[3], ARGV[2])
if removed == 0 then
    return 0
end
if head == ARGV[2] and redis.call('exists', KEYS[1]) == 0 then
    local t = redis.call('time')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local stale = redis.call('zrangebyscore', KEYS[3], '-inf', now)
    for _, id in ipairs(stale) do
        redis.call('zrem', KEYS[3], id)
        redis.call('lrem', KEYS[2], 0, id)
    end
    local next = redis.call('lindex', KEYS[2], 0)
    if next then
        notify(KEYS[4] .. ':' .. next, ARGV[1])
    end
end
return 1
