-- Delete the record of a run-once key, so that the next claim runs again. A key held by a
-- runner is left alone: forgetting is for what is done, not for what is running.
--
-- KEYS[1]  the run-once key (see once_claim.lua for its two layouts)
--
-- Returns  1   the record was deleted
--          0   nothing was stored at the key
--          -1  a runner holds the key (left untouched)
-- Errors   WRONGTYPE when a non-hash value is stored at KEYS[1]; it is left untouched.
if redis.call('exists', KEYS[1]) == 0 then
    return 0
end
if redis.call('hexists', KEYS[1], 'outcome') == 1 then
    redis.call('del', KEYS[1])
    return 1
end
return -1
