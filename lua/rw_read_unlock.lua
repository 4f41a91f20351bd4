-- Release one read hold (or, with ARGV[3] = "1", every read hold) of a holder of a read-write lock.
--
-- KEYS[1]  lock key (hash: "mode" plus one hold-count field per holder)
-- KEYS[2]  this holder's timeout prefix "{name}:<holder id>:rwlock_timeout"
-- KEYS[3]  the lock's key prefix "{name}" (every holder's timeout keys are
--          KEYS[3] .. ':' .. <holder field> .. ':rwlock_timeout:' .. n)
-- ARGV[1]  unlock message, published when the lock becomes free ("0")
-- ARGV[2]  holder id
-- ARGV[3]  "1" to drop every read hold of the holder, "0" to drop one
-- ARGV[4]  the lock's channel "redisson_rwlock:{name}" (not a key: see unlock.lua)
--
-- The two prefixes stand for the timeout keys the script touches, which it cannot name before it
-- runs: declared, they make Redis refuse the script (TRYAGAIN) while the slot migrates, where
-- it would otherwise stop half-way on a timeout key that is not on this node.
--
-- The hold with the highest number goes first (its timeout key is deleted). While other read
-- holds remain, the lock key's expiry becomes the longest remaining read lease, so that a dead
-- reader's holds stop counting once their leases ran out. In write mode the write holder (the
-- same holder, downgrading) keeps the lock.
--
-- A hold count above MAX_HOLD_COUNT is no lock's (lock_shape.lua): the holder's own such count
-- is no hold (nil, nothing changed), another field's is left out of the longest lease. The
-- longest lease is looked for only in a hash of at most MAX_LOOKUPS fields, among at most
-- MAX_LOOKUPS holds in all (a PTTL each: 1,000 of them and the HGETALL took over 10 ms on a
-- loaded server); past either (a planted hash, or a read lock of that many holds at once),
-- the holder's holds still go but the lock key keeps its expiry, which is at least the
-- longest lease, and is neither deleted nor announced (a later release, or the expiry, ends it).
--
-- Returns  nil  the holder holds no read hold (nothing changed)
--          0    one read hold released; the holder still has others
--          1    the holder's last read hold released (ARGV[1] published when the lock became free)
local MAX_HOLD_COUNT = 1000
local MAX_LOOKUPS = 250
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    return nil
end
local held = tonumber(redis.call('hget', KEYS[1], ARGV[2]) or '')
if held == nil or held < 1 or held > MAX_HOLD_COUNT then
    return nil
end
local drop = 1
if ARGV[3] == '1' then
    drop = held
end
-- Every read first, then every write: a script stopped half-way (a command the ACL refuses,
-- such as HGETALL) must not leave the lock without its holder's field but with its mode, an
-- empty read lock that blocks writers until it expires.
local longest = 0
-- Holds whose lease may still be looked up; nil once the lookup was given up.
local budget = MAX_LOOKUPS
if mode ~= 'write' and redis.call('hlen', KEYS[1]) > MAX_LOOKUPS then
    budget = nil
elseif mode ~= 'write' then
    local fields = redis.call('hgetall', KEYS[1])
    for i = 1, #fields, 2 do
        local count = tonumber(fields[i + 1])
        if fields[i] == ARGV[2] then
            -- This holder's holds after the release: the dropped ones are not counted.
            count = held - drop
        end
        if count ~= nil and count <= MAX_HOLD_COUNT and budget then
            budget = budget - math.max(count, 0)
            if budget < 0 then
                budget = nil
                count = 0
            end
            for n = count, 1, -1 do
                local left = redis.call('pttl', KEYS[3] .. ':' .. fields[i] .. ':rwlock_timeout:' .. n)
                if left > longest then
                    longest = left
                end
            end
        end
    end
end
for n = held, held - drop + 1, -1 do
    redis.call('del', KEYS[2] .. ':' .. n)
end
local mine = 0
if held - drop > 0 then
    redis.call('hincrby', KEYS[1], ARGV[2], -drop)
else
    redis.call('hdel', KEYS[1], ARGV[2])
    mine = 1
end
if mode == 'write' then
    return mine
end
if not budget then
    return mine
end
if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    return mine
end
redis.call('del', KEYS[1])
notify(ARGV[4], ARGV[1])
return mine
