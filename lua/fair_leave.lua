-- Take a waiter out of a fair lock's queue (it timed out, failed, or its client shut down).
--
-- KEYS[1]  lock key
-- KEYS[2]  wait queue "redisson_lock_queue:{name}"
-- KEYS[3]  wait deadlines "redisson_lock_timeout:{name}"
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  holder id of the leaving waiter
-- ARGV[3]  the leaving waiter's wait in milliseconds (as passed to fair_lock.lua)
-- ARGV[4]  unlock channel "redisson_lock__channel:{name}" (not a key: see unlock.lua)
--
-- As Redisson's acquireFailed does, the leaver's wait comes off the deadline of every waiter
-- behind it, which joined with it added. When the leaving waiter was the head and the lock is
-- free, the new head (after dropping heads whose deadline has passed, server clock) is woken on
-- ARGV[4] .. ':' .. <its id>, so that a wake-up meant for the leaver is passed on, never lost.
--
-- Returns  1  the waiter was queued and is gone
--          0  it was not queued (nothing changed)
redis.replicate_commands()
local queue = redis.call('lrange', KEYS[2], 0, -1)
local head = queue[1]
local behind = false
for _, id in ipairs(queue) do
    if behind then
        if id ~= ARGV[2] and redis.call('zscore', KEYS[3], id) then
            redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), id)
        end
    elseif id == ARGV[2] then
        behind = true
    end
end
local removed = redis.call('lrem', KEYS[2], 0, ARGV[2])
removed = removed + redis.call('zrem', KEYS[3], ARGV[2])
if removed == 0 then
    return 0
end
if head == ARGV[2] and redis.call('exists', KEYS[1]) == 0 then
    local t = redis.call('time')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local next = redis.call('lindex', KEYS[2], 0)
    while next do
        local deadline = redis.call('zscore', KEYS[3], next)
        if deadline and tonumber(deadline) > now then
            break
        end
        redis.call('lpop', KEYS[2])
        redis.call('zrem', KEYS[3], next)
        next = redis.call('lindex', KEYS[2], 0)
    end
    if next then
        notify(ARGV[4] .. ':' .. next, ARGV[1])
    end
end
return 1
