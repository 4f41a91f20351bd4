-- Acquire or re-enter a fair lock (Redisson RFairLock layout and queue arithmetic), first come
-- first served.
--
-- KEYS[1]  lock key: a hash of holder id -> hold count
-- KEYS[2]  wait queue "redisson_lock_queue:{name}": list of waiting holder ids, head first
-- KEYS[3]  wait deadlines "redisson_lock_timeout:{name}": zset holder id -> deadline (ms epoch)
-- ARGV[1]  lease in milliseconds (PEXPIRE applied on success)
-- ARGV[2]  holder id "<client uuid>:<thread id>"
-- ARGV[3]  this waiter's wait in milliseconds (Redisson's threadWaitTime): what it adds to the
--          queue's deadlines when it joins and takes off them when it is granted; a waiter that
--          has not attempted for this long is presumed dead once it heads the queue
-- ARGV[4]  "1" to join (or stay in) the queue when the lock cannot be had; "0" to leave no trace
--
-- The deadlines follow Redisson's arithmetic, so that Java and redguard waiters can share one
-- queue and keep their order:
--   * a waiter joins with the tail's deadline plus its wait (with the lock's expiry plus its
--     wait when the queue is empty);
--   * a grant takes the granted waiter's wait off every deadline;
--   * a waiter that gives up takes its wait off every deadline behind it (fair_leave.lua);
--   * every call drops the queue heads whose deadline has passed, and heads without one
--     (at most MAX_DROPS of them: see below).
-- Two things differ, and neither changes what Redisson's scripts find: "now" is this server's
-- clock (TIME), never a client's; and the caller, alive since it calls, is never dropped: each
-- attempt of a queued waiter raises its deadline to at least now + ARGV[3], and every deadline
-- behind it by as much, so that the gaps between deadlines (each waiter's wait, which later
-- grants and leaves take off) stay as Redisson's arithmetic made them.
--
-- Returns  {1}        acquired (removed from the queue), or re-entered (hold count incremented)
--          {0, ms}    not acquired; ms = how long until the situation can change: the lock's
--                     remaining ttl while it is held (-1: the key has no expiry), else the time
--                     until the queue head's deadline
-- Errors   WRONGTYPE when a non-hash value is stored at KEYS[1], or a hash that is not a lock
--          (lock_shape.lua) nor a run-once record (waited on as held); or when the queue or the
--          deadlines hold more than MAX_QUEUE entries (no lock's: planted, as this script queues
--          nobody past MAX_QUEUE). Everything is left untouched and the caller is not queued.
--
-- Bounded: at most MAX_DROPS dead heads go per call (the next call drops more; a waiter told
-- to retry at once meanwhile), every loop runs over at most MAX_QUEUE entries, and the queue
-- is read and its deadlines changed in a few commands of at most MAX_QUEUE entries each
-- (LRANGE, ZMSCORE, ZADD of the new scores), not in one command per waiter.
redis.replicate_commands()
local MAX_QUEUE = 1000
local MAX_DROPS = 100
if redis.call('llen', KEYS[2]) > MAX_QUEUE or redis.call('zcard', KEYS[3]) > MAX_QUEUE then
    return redis.error_reply('WRONGTYPE the wait queue of this lock holds more than '
        .. MAX_QUEUE .. ' waiters (not a lock\'s); left untouched')
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me = ARGV[2]
local wait = tonumber(ARGV[3])

-- Drop dead heads, oldest first, as Redisson does; an entry without a deadline (written by
-- someone else) cannot be judged and is dropped too, so that it never blocks the queue.
local heads = redis.call('lrange', KEYS[2], 0, MAX_DROPS)
local deadlines = {}
if #heads > 0 then
    deadlines = redis.call('zmscore', KEYS[3], unpack(heads))
end
local dead = 0
for i, id in ipairs(heads) do
    if i > MAX_DROPS or id == me or (deadlines[i] and tonumber(deadlines[i]) > now) then
        break
    end
    dead = i
end
if dead > 0 then
    redis.call('lpop', KEYS[2], dead)
    redis.call('zrem', KEYS[3], unpack(heads, 1, dead))
end
local head = heads[dead + 1]

if redis.call('exists', KEYS[1]) == 0 then
    if not head or head == me then
        if head then
            redis.call('lpop', KEYS[2])
        end
        redis.call('zrem', KEYS[3], me)
        -- Every deadline less this waiter's wait: one ZADD of the new scores.
        local scores = redis.call('zrange', KEYS[3], 0, -1, 'withscores')
        if #scores > 0 then
            local args = {}
            for i = 1, #scores, 2 do
                args[i] = tonumber(scores[i + 1]) - wait
                args[i + 1] = scores[i]
            end
            redis.call('zadd', KEYS[3], unpack(args))
        end
        redis.call('hincrby', KEYS[1], me, 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {1}
    end
elseif redis.call('hexists', KEYS[1], me) == 1 then
    redis.call('hincrby', KEYS[1], me, 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1}
elseif not is_lock(KEYS[1]) and not is_record(KEYS[1]) then
    -- Nobody is let into the queue of a name whose value is not a lock.
    return not_a_lock()
end

if ARGV[4] == '1' then
    local queue = redis.call('lrange', KEYS[2], 0, -1)
    local at
    for i, id in ipairs(queue) do
        if id == me then
            at = i
            break
        end
    end
    -- A full queue takes nobody more: the caller waits unqueued, told when to try again as any
    -- waiter is, so that a busy lock's queue never grows past the bound that makes it no lock's.
    if at or (#queue < MAX_QUEUE and redis.call('zcard', KEYS[3]) < MAX_QUEUE) then
        local mine = redis.call('zscore', KEYS[3], me)
        if not at then
            local tail = queue[#queue]
            local from = tail and redis.call('zscore', KEYS[3], tail)
            if from then
                from = tonumber(from)
            else
                from = now + math.max(redis.call('pttl', KEYS[1]), 0)
            end
            mine = from + wait
            redis.call('zadd', KEYS[3], mine, me)
            redis.call('rpush', KEYS[2], me)
            queue[#queue + 1] = me
            at = #queue
        elseif not mine then
            mine = now + wait
            redis.call('zadd', KEYS[3], mine, me)
        else
            mine = tonumber(mine)
        end
        local raise = now + wait - mine
        if raise > 0 then
            -- Each deadline from this waiter on goes up by `raise` for each time its id is queued
            -- (once, unless planted): one ZMSCORE, one ZADD of the new scores.
            local ids, times = {}, {}
            for i = at, #queue do
                local id = queue[i]
                if not times[id] then
                    ids[#ids + 1] = id
                    times[id] = 0
                end
                times[id] = times[id] + 1
            end
            local scores = redis.call('zmscore', KEYS[3], unpack(ids))
            local args = {}
            for i, id in ipairs(ids) do
                if scores[i] then
                    args[#args + 1] = tonumber(scores[i]) + raise * times[id]
                    args[#args + 1] = id
                end
            end
            if #args > 0 then
                redis.call('zadd', KEYS[3], unpack(args))
            end
        end
    end
end
if redis.call('exists', KEYS[1]) == 1 then
    return {0, redis.call('pttl', KEYS[1])}
end
head = redis.call('lindex', KEYS[2], 0)
local deadline = head and tonumber(redis.call('zscore', KEYS[3], head))
if not deadline or head == me then
    return {0, 0}
end
return {0, math.max(deadline - now, 0)}
