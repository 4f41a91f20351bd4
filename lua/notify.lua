-- notify(channel, message): publish a message for the waiters of every client generation.
-- Put before the text of every script that wakes waiters, after a first line
-- `local cluster, always_classic = <bool>, <bool>` (the client knows its deployment and its
-- setting); the scripts call it instead of PUBLISH.
--
-- Scripts take their channels in ARGV, never in KEYS: a channel is never a key, and while the
-- slot migrates Redis answers TRYAGAIN to a script whose KEYS are partly on the node (a lock and
-- its channel, for the whole migration). A script may SPUBLISH to a channel it does not declare:
-- Redis 7 only checks that the channel's slot is served here, the slot of the script's keys
-- (the lock and its channels share a hash tag), and does not ask that it exist on a migrating
-- node.
--
-- Outside a Cluster: classic PUBLISH, always (waiters may listen on a replica, as Redisson's
-- `subscriptionMode = SLAVE` does, where this node cannot count them; the publish is cheap).
--
-- On a Cluster:
--   SPUBLISH, always: it reaches this shard only (this master and its replicas), where
--   Redisson 3.2x and redguard's own waiters SSUBSCRIBE.
--   PUBLISH when `always_classic` (ClassicPublish::Always: Java waiters without sharded pub/sub
--   may SUBSCRIBE on a replica, which this node cannot count), else only when a client of this
--   node listens on the channel with SUBSCRIBE (older Redisson subscribes on the master of the
--   channel's slot, which is this node): a Cluster forwards every classic message to every
--   node, which cost more than the rest of an unlock.
--   Without sharded pub/sub (Redis < 7, or an ACL without SPUBLISH) or without a readable
--   subscriber count, classic PUBLISH is sent always, as outside a Cluster.
local function notify(channel, message)
    if not cluster then
        redis.call('publish', channel, message)
        return
    end
    local sharded = redis.pcall('spublish', channel, message)
    if always_classic or (type(sharded) == 'table' and sharded.err) then
        redis.call('publish', channel, message)
        return
    end
    local listeners = redis.pcall('pubsub', 'numsub', channel)
    if type(listeners) ~= 'table' or listeners.err or listeners[2] ~= 0 then
        redis.call('publish', channel, message)
    end
end
