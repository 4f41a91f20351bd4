-- Keep the read holds of a holder with a fixed lease for as long as they were granted (the
-- watchdog's periodic check of such holds). Other clients may shorten them: Redisson's read-lock
-- watchdog PEXPIREs the lock key to its own lockWatchdogTimeout at every renewal, and before
-- Redisson 4.4 every holder's timeout keys too; its read unlock then sets the lock key's expiry
-- to the longest remaining timeout key.
--
-- KEYS[1]  lock key (hash: "mode" plus one hold-count field per holder)
-- KEYS[2]  this holder's timeout prefix "{name}:<holder id>:rwlock_timeout"
-- ARGV[1]  milliseconds left of the holder's lease, by its own (conservative) clock
-- ARGV[2]  holder id
--
-- A timeout key, or the lock key, that would expire before ARGV[1] gets ARGV[1] back; nothing
-- gets more than that, and a key without expiry stays so.
--
-- A hold count above MAX_HOLD_COUNT is no lock's (lock_shape.lua): the hold counts as lost, and
-- nothing is looped over.
--
-- Returns  1  held (expiries restored where they had been shortened)
--          0  lost: the holder holds no read hold, or a timeout key of one of its holds is gone
--             (its lease was cut short and ran out: the hold no longer counts)
-- Errors   WRONGTYPE when KEYS[1] holds a non-hash value.
local MAX_HOLD_COUNT = 1000
local held = tonumber(redis.call('hget', KEYS[1], ARGV[2]) or '')
if held == nil or held < 1 or held > MAX_HOLD_COUNT then
    return 0
end
local keep = tonumber(ARGV[1])
for n = held, 1, -1 do
    local left = redis.call('pttl', KEYS[2] .. ':' .. n)
    if left == -2 then
        return 0
    end
    if left >= 0 and left < keep then
        redis.call('pexpire', KEYS[2] .. ':' .. n, keep)
    end
end
local left = redis.call('pttl', KEYS[1])
if left >= 0 and left < keep then
    redis.call('pexpire', KEYS[1], keep)
end
return 1
