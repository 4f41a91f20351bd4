-- Reads a holder record without sending any long field name or value:
-- a name or value longer than a record ever writes (someone else wrote it,
-- by hand or by mistake) is answered by its length, never its bytes, and
-- the fields read are bounded in number and in total size. Reads only.
--
-- KEYS[1]  the record key
-- ARGV[1]  longest field name sent, bytes
-- ARGV[2]  longest value sent, bytes
-- ARGV[3]  most fields a record may have to be read in full (its HLEN)
-- ARGV[4]  most bytes of names and values sent in all
-- ARGV[5]  which fields: 'all'; 'match' (the fixed fields and those whose
--          name starts with ARGV[6]); 'named' (the fixed fields and
--          ARGV[6..])
--
-- Returns  {pttl, partial, name, value, name, value, ...} where partial
--          is 1 when fields were left out (more than ARGV[3] fields: only
--          the fixed and named ones are read; or ARGV[4] bytes reached),
--          else 0; a pair is {name, value}, {name, length of a value too
--          long to send}, or {length of a name too long to send, its first
--          64 bytes}. Fields missing are left out.
local key = KEYS[1]
local max_name = tonumber(ARGV[1])
local max_value = tonumber(ARGV[2])
local max_fields = tonumber(ARGV[3])
local budget = tonumber(ARGV[4])
local mode = ARGV[5]
local out = {redis.call('pttl', key), 0}
local seen = {}

local function add(name)
    if seen[name] then
        return
    end
    seen[name] = true
    if #name > max_name then
        out[#out + 1] = #name
        out[#out + 1] = string.sub(name, 1, 64)
        budget = budget - 64
        return
    end
    local len = redis.call('hstrlen', key, name)
    if len > max_value then
        out[#out + 1] = name
        out[#out + 1] = len
        budget = budget - #name
        return
    end
    -- A field missing (HSTRLEN 0) reads as false: left out.
    local value = redis.call('hget', key, name)
    if value then
        out[#out + 1] = name
        out[#out + 1] = value
        budget = budget - #name - len
    end
end

for _, name in ipairs({'host', 'pid', 'program', 'version', 'started'}) do
    add(name)
end
if mode == 'named' then
    -- The caller's list, as long as it is: each name is checked as above.
    for i = 6, #ARGV do
        if budget <= 0 then
            out[2] = 1
            break
        end
        add(ARGV[i])
    end
    return out
end
if redis.call('hlen', key) > max_fields then
    out[2] = 1
    return out
end
local prefix = ARGV[6] or ''
for _, name in ipairs(redis.call('hkeys', key)) do
    if budget <= 0 then
        out[2] = 1
        break
    end
    if mode ~= 'match' or string.sub(name, 1, #prefix) == prefix then
        add(name)
    end
end
return out
