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
-- Errors   WRONGTYPE when the queue or the deadlines hold more than MAX_QUEUE entries (no
--          lock's: planted; fair_lock.lua queues nobody there); nothing is changed.
redis.replicate_commands()
local MAX_QUEUE = 1000
if redis.call('llen', KEYS[2]) > MAX_QUEUE or redis.call('zcard', KEYS[3]) > MAX_QUEUE then
    return redis.error_reply('WRONGTYPE the wait queue of this lock holds more than '
        .. MAX_QUEUE .. ' waiters (not a lock\'s); left untouched')
end
local queue = redis.call('lrange', KEYS[2], 0, -1)
local head = queue[1]
-- Each waiter behind the leaver loses the leaver's wait once per time it is queued behind it
-- (once, unless planted): one ZMSCORE, one ZADD of the new scores.
local ids, times = {}, {}
local behind = false
for _, id in ipairs(queue) do
    if behind then
        if id ~= ARGV[2] then
            if not times[id] then
                ids[#ids + 1] = id
                times[id] = 0
            end
            times[id] = times[id] + 1
        end
    elseif id == ARGV[2] then
        behind = true
    end
end
if #ids > 0 then
    local scores = redis.call('zmscore', KEYS[3], unpack(ids))
    local args = {}
    for i, id in ipairs(ids) do
        if scores[i] then
            args[#args + 1] = tonumber(scores[i]) - tonumber(ARGV[3]) * times[id]
            args[#args + 1] = id
        end
    end
    if #args > 0 then
        redis.call('zadd', KEYS[3], unpack(args))
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
    -- At most MAX_DROPS dead heads per call (later calls drop the rest).
    local MAX_DROPS = 100
    local rest = redis.call('lrange', KEYS[2], 0, MAX_DROPS)
    local next
    if #rest > 0 then
        local deadlines = redis.call('zmscore', KEYS[3], unpack(rest))
        local dead = 0
        for i in ipairs(rest) do
            if i > MAX_DROPS or (deadlines[i] and tonumber(deadlines[i]) > now) then
                break
            end
            dead = i
        end
        if dead > 0 then
            redis.call('lpop', KEYS[2], dead)
            redis.call('zrem', KEYS[3], unpack(rest, 1, dead))
        end
        next = rest[dead + 1]
    end
    if next then
        notify(ARGV[4] .. ':' .. next, ARGV[1])
    end
end
return 1
