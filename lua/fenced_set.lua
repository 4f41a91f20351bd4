-- Write a value guarded by a fencing token: refused when a newer token has been seen at the key
-- (Kleppmann's fencing check, done by the storage side).
--
-- KEYS[1]  a hash with fields "value" and "token" (the highest token accepted so far)
-- ARGV[1]  the writer's fencing token: a decimal integer without leading zeros (u64)
-- ARGV[2]  the value
--
-- A token equal to the last one is accepted (the same holder writing twice). Tokens are
-- compared as decimal strings (length, then bytes), exact over the whole u64 range.
--
-- Returns  {1, token}  written; the stored token is now ARGV[1]
--          {0, last}   refused: the key has seen a newer token `last`; nothing changed
-- Errors   WRONGTYPE when a non-hash value is stored at KEYS[1].
local last = redis.call('hget', KEYS[1], 'token')
if last then
    local older = #ARGV[1] < #last or (#ARGV[1] == #last and ARGV[1] < last)
    if older then
        return {0, last}
    end
end
redis.call('hset', KEYS[1], 'value', ARGV[2], 'token', ARGV[1])
return {1, ARGV[1]}
