-- Renew the leases of many held locks at once (the watchdog's batch). All keys
-- must live on one server (for a cluster: in one slot).
--
-- KEYS[1] .. KEYS[n]   lock keys (KEYS[i]: the i-th renewal)
-- ARGV[2i-1]           its new lease in milliseconds, counted from now
-- ARGV[2i]             its holder id
--
-- Returns  an array with one integer per key, in KEYS order:
--          1   renewed
--          0   the holder no longer holds the lock (nothing changed)
--          -1  a non-hash value is stored at the key (left untouched)
local replies = {}
for i = 1, #KEYS do
    local held = redis.pcall('hexists', KEYS[i], ARGV[2 * i])
    if type(held) == 'table' then
        replies[i] = -1
    elseif held == 1 then
        redis.call('pexpire', KEYS[i], ARGV[2 * i - 1])
        replies[i] = 1
    else
        replies[i] = 0
    end
end
return replies
