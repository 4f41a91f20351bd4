-- Renew the leases of many expiring permits at once (the watchdog's batch for permits). All keys
-- must live on one server (for a cluster: in one slot).
--
-- KEYS[i]     permit leases "{name}:timeout" of the i-th renewal (zset: id -> lease end, ms epoch)
-- ARGV[2i-1]  new lease in milliseconds, counted from now (this server's clock), plus the
--             tolerated clock skew (see permit_acquire.lua)
-- ARGV[2i]    the permit id
--
-- A permit whose lease already ended is not revived: any acquirer may have counted it back.
--
-- Returns  an array with one integer per renewal, in order:
--          1   renewed
--          0   no live permit under this id (released, or its lease ended)
--          -1  KEYS[i] holds a value that is not a zset (left untouched)
redis.replicate_commands()
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local replies = {}
for i = 1, #KEYS do
    local ends = redis.pcall('zscore', KEYS[i], ARGV[2 * i])
    if type(ends) == 'table' then
        replies[i] = -1
    elseif ends == false or tonumber(ends) <= now then
        replies[i] = 0
    else
        redis.call('zadd', KEYS[i], now + tonumber(ARGV[2 * i - 1]), ARGV[2 * i])
        replies[i] = 1
    end
end
return replies
