-- Renew the leases of many read holds at once (the watchdog's batch for read locks). All keys
-- must live on one server (for a cluster: in one slot).
--
-- KEYS[2i-1]  lock key of the i-th renewal
-- KEYS[2i]    that holder's timeout prefix "{name}:<holder id>:rwlock_timeout"
-- ARGV[2i-1]  new lease in milliseconds, counted from now
-- ARGV[2i]    holder id
--
-- Every read hold of the holder gets the new lease (its timeout key KEYS[2i] .. ':' .. n for
-- n = 1 .. hold count), and the lock key lives at least as long. A hold count above
-- MAX_HOLD_COUNT is no lock's (lock_shape.lua): the holder counts as no longer holding, and
-- nothing is looped over.
--
-- Returns  an array with one integer per renewal, in order:
--          1   renewed
--          0   the holder no longer holds the read side (nothing changed)
--          -1  a non-hash value is stored at the lock key (left untouched)
local MAX_HOLD_COUNT = 1000
local replies = {}
for i = 1, #KEYS / 2 do
    local key, prefix, lease = KEYS[2 * i - 1], KEYS[2 * i], ARGV[2 * i - 1]
    local held = redis.pcall('hget', key, ARGV[2 * i])
    if type(held) == 'table' then
        replies[i] = -1
    elseif held == false or tonumber(held) == nil or tonumber(held) > MAX_HOLD_COUNT then
        replies[i] = 0
    else
        for n = tonumber(held), 1, -1 do
            redis.call('pexpire', prefix .. ':' .. n, lease)
        end
        if redis.call('pttl', key) < tonumber(lease) then
            redis.call('pexpire', key, lease)
        end
        replies[i] = 1
    end
end
return replies
