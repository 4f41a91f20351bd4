-- is_lock(key): whether the hash at `key` has the shape of a lock, so that a script never
-- waits on, joins, changes or deletes an application's hash (`HSET cart:42 sku123 2`) as if it
-- were one. Put before the text of every script that meets a hash it did not write: the acquire
-- scripts on their contended path (the key exists and the caller holds no field of it) and the
-- force unlocks, before anything is written.
--
-- A lock hash (Redisson's layout, every kind: reentrant, fair, fenced, read-write, a run-once
-- claim) has only these fields:
--   <holder id>          -> hold count
--   <holder id>:write    -> hold count
--   mode                 -> "read" or "write"
-- with a hold count a decimal integer of at most MAX_HOLD_COUNT (scripts loop over a reader's
-- holds: a larger count is no lock's). A holder id is "<uuid>:<thread>", the uuid in its
-- 8-4-4-4-12 hex form (the client's id), the thread part either a decimal integer of at most
-- MAX_THREAD_DIGITS digits, a sign allowed (redguard's thread number, Redisson's Java long,
-- goRedisson's goroutine id), or a second uuid (node-redisson: "<executor uuid>:<handle uuid>").
-- Anything else is not a lock.
--
-- Bounded: HLEN, then one HSCAN with a small COUNT. A hash with more than MAX_LOCK_FIELDS
-- fields is not a lock (a lock has one field per holder thread, plus `mode`). A small hash
-- (listpack encoding) comes back whole from one HSCAN; of a larger one, a sample is judged.
-- A field longer than MAX_FIELD_LEN (two uuids and ":write") is refused before any pattern.
-- A value that is not a hash raises WRONGTYPE (HLEN's own error).
local MAX_LOCK_FIELDS = 10000
local SHAPE_SAMPLE = 16
local MAX_FIELD_LEN = 79
local MAX_THREAD_DIGITS = 20
local MAX_HOLD_COUNT = 1000
local UUID = '%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x'
local HOLDER_THREAD = '^' .. UUID .. ':%-?(%d+)$'
local HOLDER_HANDLE = '^' .. UUID .. ':' .. UUID .. '$'

local function holder_id(id)
    local digits = string.match(id, HOLDER_THREAD)
    if digits then
        return #digits <= MAX_THREAD_DIGITS
    end
    return string.match(id, HOLDER_HANDLE) ~= nil
end

local function lock_field(field, value)
    if field == 'mode' then
        return value == 'read' or value == 'write'
    end
    if #field > MAX_FIELD_LEN or #value > 20 or not string.match(value, '^%d+$')
        or tonumber(value) > MAX_HOLD_COUNT then
        return false
    end
    if string.sub(field, -6) == ':write' then
        field = string.sub(field, 1, -7)
    end
    return holder_id(field)
end

local function is_lock(key)
    local n = redis.call('hlen', key)
    if n > MAX_LOCK_FIELDS then
        return false
    end
    local fields = redis.call('hscan', key, '0', 'COUNT', SHAPE_SAMPLE)[2]
    for i = 1, #fields, 2 do
        if not lock_field(fields[i], fields[i + 1]) then
            return false
        end
    end
    return true
end

-- is_record(key): whether the hash at `key` is a run-once record (once_complete.lua): the
-- field "outcome", with "at" and "by" or not, and no other. HEXISTS and HLEN: bounded, and
-- no value is copied into the script (someone else's may be huge).
local function is_record(key)
    if redis.call('hexists', key, 'outcome') == 0 then
        return false
    end
    local present = 1 + redis.call('hexists', key, 'at') + redis.call('hexists', key, 'by')
    return redis.call('hlen', key) == present
end

-- The refusal of a hash that is not a lock; the scripts return it before writing anything.
local function not_a_lock()
    return redis.error_reply('WRONGTYPE the hash at this key is not a lock (its fields are not '
        .. 'holder ids with hold counts); left untouched')
end
