-- End the last-attempt record of a run-once key that was not recorded as done: the runner
-- failed, gave up, lost its lease or ran out of time. Only the attempt's own runner writes it,
-- so a later attempt is never overwritten; the claim itself is not touched (it is released,
-- or already lost, apart).
--
-- KEYS[1]  the last-attempt record "redguard_once_attempt:{key}" (see once_claim.lua)
-- ARGV[1]  holder id of the runner
-- ARGV[2]  the state: "failed", "abandoned" or "timed_out"
-- ARGV[3]  exit status ("" when none)
-- ARGV[4]  signal number ("" when none)
-- ARGV[5]  ttl of the record in milliseconds
--
-- Returns  at  written, ended at `at` ms since the epoch (server clock, > 0), PEXPIRE = ARGV[5]
--          0   refused: the record is absent or another runner's; nothing changed
-- Errors   WRONGTYPE when a non-hash value is stored at KEYS[1]; it is left untouched.
redis.replicate_commands()
if redis.call('hget', KEYS[1], 'holder') ~= ARGV[1] then
    return 0
end
local t = redis.call('time')
local at = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('hset', KEYS[1], 'state', ARGV[2], 'ended_at', at)
redis.call('hdel', KEYS[1], 'exit_status', 'signal')
if ARGV[3] ~= '' then
    redis.call('hset', KEYS[1], 'exit_status', ARGV[3])
end
if ARGV[4] ~= '' then
    redis.call('hset', KEYS[1], 'signal', ARGV[4])
end
redis.call('pexpire', KEYS[1], ARGV[5])
return tonumber(at)
