-- Reads a lock hash, a fair lock's queue or a lease set without sending any
-- element longer than such a key ever stores: another tenant of a shared
-- Redis may write megabytes into any field, entry or member, and a status
-- or a listing must neither move nor print them. An element too long is
-- answered by its length (an integer) in its place, never its bytes; the
-- caller knows that no lock, waiter or permit has it. Reads only.
--
-- KEYS[1]  the key read
-- ARGV[1]  what: 'hash', 'queue' or 'zset'
-- ARGV[2]  longest element sent (field name, queue entry, member), bytes
--
-- 'hash'   ARGV[3] longest value sent, bytes; ARGV[4] the HSCAN cursor;
--          ARGV[5] its COUNT; ARGV[6] most fields (HLEN) worth a scan.
--          Returns {hlen, cursor, name, value, name, value, ...}: no pair
--          (cursor 0) when the hash has more than ARGV[6] fields.
-- 'queue'  KEYS[2] the deadlines (zset). ARGV[3] most entries read.
--          Returns {llen, zcard, entry, deadline, entry, deadline, ...},
--          first in line first; a deadline is its score, or nil for an
--          entry without one (or too long to be asked for).
-- 'zset'   ARGV[3] most members read. Returns {member, score, ...}, lowest
--          score first.
--
-- A key of another type fails as the plain command would (WRONGTYPE, which
-- the client tells in the script's error).
local key = KEYS[1]
local what = ARGV[1]
local max_len = tonumber(ARGV[2])

-- `s`, or its length when longer than `max`.
local function bounded(s, max)
    if #s > max then
        return #s
    end
    return s
end

if what == 'hash' then
    local max_value = tonumber(ARGV[3])
    local len = redis.call('hlen', key)
    local out = {len, '0'}
    if len > tonumber(ARGV[6]) then
        return out
    end
    local page = redis.call('hscan', key, ARGV[4], 'COUNT', ARGV[5])
    out[2] = page[1]
    local fields = page[2]
    for i = 1, #fields, 2 do
        out[#out + 1] = bounded(fields[i], max_len)
        out[#out + 1] = bounded(fields[i + 1], max_value)
    end
    return out
end
if what == 'queue' then
    local deadlines = KEYS[2]
    local out = {redis.call('llen', key), redis.call('zcard', deadlines)}
    for _, entry in ipairs(redis.call('lrange', key, 0, tonumber(ARGV[3]) - 1)) do
        if #entry > max_len then
            out[#out + 1] = #entry
            out[#out + 1] = false
        else
            out[#out + 1] = entry
            out[#out + 1] = redis.call('zscore', deadlines, entry)
        end
    end
    return out
end
if what == 'zset' then
    local out = {}
    local members = redis.call('zrange', key, 0, tonumber(ARGV[3]) - 1, 'WITHSCORES')
    for i = 1, #members, 2 do
        out[#out + 1] = bounded(members[i], max_len)
        out[#out + 1] = members[i + 1]
    end
    return out
end
return redis.error_reply('ERR bounded_read: unknown read ' .. tostring(what))
