-- Acquire or re-enter a fair lock (Redisson RFairLock layout), first come first served.
--
-- KEYS[1]  lock key: a hash of holder id -> hold count
-- KEYS[2]  wait queue "redisson_lock_queue:{name}": list of waiting holder ids, head first
-- KEYS[3]  wait deadlines "redisson_lock_timeout:{name}": zset holder id -> deadline (ms epoch)
-- ARGV[1]  lease in milliseconds (PEXPIRE applied on success)
-- ARGV[2]  holder id "<client uuid>:<thread id>"
-- ARGV[3]  wait timeout in milliseconds: a waiter that has not attempted for this long is
--          presumed dead and pruned
-- ARGV[4]  "1" to join (or stay in) the queue when the lock cannot be had; "0" to leave no trace
--
-- Deadlines come from this server's clock (TIME), never from a client's: every attempt of a
-- queued waiter moves its own deadline to now + ARGV[3], so a live waiter keeps its place and a
-- dead one is pruned ARGV[3] after its last attempt. Every call prunes the waiters whose
-- deadline has passed (other than the caller).
--
-- Returns  {1}        acquired (removed from the queue), or re-entered (hold count incremented)
--          {0, ms}    not acquired; ms = how long until the situation can change: the lock's
--                     remaining ttl while it is held (-1: the key has no expiry), else the time
--                     until the queue head's deadline
-- Errors   WRONGTYPE when a non-hash value is stored at KEYS[1], or a hash that is not a lock
--          (lock_shape.lua) nor a run-once record (waited on as held); it is left untouched
--          and the caller is not queued.
redis.replicate_commands()
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me = ARGV[2]

local stale = redis.call('zrangebyscore', KEYS[3], '-inf', now)
for _, id in ipairs(stale) do
    if id ~= me then
        redis.call('zrem', KEYS[3], id)
        redis.call('lrem', KEYS[2], 0, id)
    end
end
-- A queue entry without a deadline (written by someone else) cannot be judged: drop it when it
-- reaches the head, so it never blocks the queue.
local head = redis.call('lindex', KEYS[2], 0)
while head and head ~= me and not redis.call('zscore', KEYS[3], head) do
    redis.call('lpop', KEYS[2])
    head = redis.call('lindex', KEYS[2], 0)
end

if redis.call('exists', KEYS[1]) == 0 then
    if not head or head == me then
        redis.call('lrem', KEYS[2], 0, me)
        redis.call('zrem', KEYS[3], me)
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
    if redis.call('zadd', KEYS[3], now + tonumber(ARGV[3]), me) == 1 then
        redis.call('rpush', KEYS[2], me)
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
