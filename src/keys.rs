//! Key and channel names derived from a lock name, in Redisson's layout.
//! Pure functions, no I/O.

/// The longest lock name accepted, in bytes (64 KiB).
pub const MAX_NAME_LEN: usize = 64 * 1024;

/// Published on a lock's channel when it is fully released (Redisson's
/// `UNLOCK_MESSAGE`).
pub(crate) const UNLOCK_MESSAGE: &[u8] = b"0";

/// Published on a read-write lock's channel when its write side is released
/// (Redisson's `READ_UNLOCK_MESSAGE`): every waiter may try, since readers
/// can all get in. A release that frees the lock from readers publishes
/// [`UNLOCK_MESSAGE`], which wakes one waiter.
pub(crate) const READ_UNLOCK_MESSAGE: &[u8] = b"1";

/// Published on a count-down latch's channel when its count reaches zero or
/// the latch is deleted (Redisson's `CountDownLatchPubSub.ZERO_COUNT_MESSAGE`):
/// every waiter goes.
pub(crate) const ZERO_COUNT_MESSAGE: &[u8] = b"0";

/// Published on a count-down latch's channel when its count is set
/// (Redisson's `CountDownLatchPubSub.NEW_COUNT_MESSAGE`, which a Java waiter
/// takes as "closed").
pub(crate) const NEW_COUNT_MESSAGE: &[u8] = b"1";

/// Checks a lock name: not empty, at most [`MAX_NAME_LEN`] bytes. Any bytes
/// are allowed, binary included; names only ever travel as `KEYS`.
pub(crate) fn validate_name(name: &[u8]) -> Result<(), String> {
    if name.is_empty() {
        return Err("lock name is empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "lock name is {} bytes long; the maximum is {MAX_NAME_LEN}",
            name.len()
        ));
    }
    Ok(())
}

/// The number of hash slots of a Redis Cluster.
pub(crate) const SLOTS: u16 = 16384;

/// The cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag (the
/// bytes between the first `{` and the first `}` after it, when not empty),
/// else of the whole key, modulo [`SLOTS`]. Redis's and redis-rs's rule.
pub(crate) fn slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key).unwrap_or(key)) % SLOTS
}

/// The hash tag of `key`, if it has a non-empty one.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let len = key[open + 1..].iter().position(|&b| b == b'}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// Why the keys derived from `name` for a lock, a fair, fenced or
/// read-write lock, a semaphore, a run-once key or a token scope would not
/// all hash to one cluster slot under Redisson's layout; `None` when they
/// do. Only a Cluster needs this: one server keeps every name.
///
/// Redisson derives `prefix:{name}` from a name without `{`, and
/// `prefix:name` from a name with one. Both share the name's slot exactly
/// when the name has no brace at all, or when its first `{` opens a
/// non-empty hash tag closed by a later `}`.
pub(crate) fn cluster_conflict(name: &[u8]) -> Option<String> {
    match name.iter().position(|&b| b == b'{') {
        Some(_) if hash_tag(name).is_none() => Some(format!(
            "lock name {:?} cannot be used on a Redis Cluster: its first `{{` opens an empty \
             or unclosed hash tag, so each of its keys (lock, channel, queue, ...) would hash \
             to a different slot; give the name a non-empty `{{tag}}` or no braces",
            String::from_utf8_lossy(name)
        )),
        None if name.contains(&b'}') => Some(format!(
            "lock name {:?} cannot be used on a Redis Cluster: it holds `}}` without `{{`, so \
             Redisson's derived keys (`prefix:{{name}}`) would end their hash tag at that `}}` \
             and hash to another slot than the name; remove the `}}` or add a `{{tag}}`",
            String::from_utf8_lossy(name)
        )),
        _ => None,
    }
}

/// Like [`cluster_conflict`], for a count-down latch, whose channel
/// (`redisson_countdownlatch__channel__{name}`) is braced whatever the
/// name: it shares the name's slot only when the name has no brace.
pub(crate) fn latch_cluster_conflict(name: &[u8]) -> Option<String> {
    name.iter().any(|&b| b == b'{' || b == b'}').then(|| {
        format!(
            "latch name {:?} cannot be used on a Redis Cluster: Redisson's latch channel \
             wraps the whole name in `{{...}}`, which shares the name's slot only when the \
             name holds no `{{` or `}}`",
            String::from_utf8_lossy(name)
        )
    })
}

/// `prefix:{name}`, or `prefix:name` when the name already contains `{`
/// (Redisson's `prefixName`): the braces make the derived key hash to the
/// same cluster slot as the lock key.
fn prefixed(prefix: &str, name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + name.len() + 3);
    out.extend_from_slice(prefix.as_bytes());
    out.push(b':');
    if name.contains(&b'{') {
        out.extend_from_slice(name);
    } else {
        out.push(b'{');
        out.extend_from_slice(name);
        out.push(b'}');
    }
    out
}

/// The unlock channel of a lock: `redisson_lock__channel:{name}`.
pub(crate) fn channel(name: &[u8]) -> Vec<u8> {
    prefixed("redisson_lock__channel", name)
}

/// The wait queue of a fair lock: `redisson_lock_queue:{name}`, a list of
/// waiting holder ids, head first.
pub(crate) fn fair_queue(name: &[u8]) -> Vec<u8> {
    prefixed("redisson_lock_queue", name)
}

/// The wait deadlines of a fair lock: `redisson_lock_timeout:{name}`, a zset
/// holder id -> deadline in ms since the epoch (server clock).
pub(crate) fn fair_timeouts(name: &[u8]) -> Vec<u8> {
    prefixed("redisson_lock_timeout", name)
}

/// The channel on which one waiter of a fair lock is woken:
/// `redisson_lock__channel:{name}:<holder id>` (Redisson's layout; the fair
/// scripts build the same name from the lock channel and the queue entry).
pub(crate) fn fair_channel(name: &[u8], holder: &str) -> Vec<u8> {
    let mut out = channel(name);
    out.push(b':');
    out.extend_from_slice(holder.as_bytes());
    out
}

/// The fencing-token counter of a fenced lock: `redisson_lock_token:{name}`.
pub(crate) fn token(name: &[u8]) -> Vec<u8> {
    prefixed("redisson_lock_token", name)
}

/// The last-attempt record of a run-once key:
/// `redguard_once_attempt:{name}` (redguard's own; Redisson has no
/// run-once keys).
pub(crate) fn once_attempt(name: &[u8]) -> Vec<u8> {
    prefixed("redguard_once_attempt", name)
}

/// `{name}`, or `name` when it already contains `{` (Redisson's
/// `suffixName` without the suffix): the base of keys named after the lock,
/// sharing its cluster slot.
pub(crate) fn tagged(name: &[u8]) -> Vec<u8> {
    if name.contains(&b'{') {
        return name.to_vec();
    }
    let mut out = Vec::with_capacity(name.len() + 2);
    out.push(b'{');
    out.extend_from_slice(name);
    out.push(b'}');
    out
}

/// The channel of a read-write lock: `redisson_rwlock:{name}`.
pub(crate) fn rw_channel(name: &[u8]) -> Vec<u8> {
    prefixed("redisson_rwlock", name)
}

/// The field of a read-write lock's hash under which `holder` holds the
/// write side: `<holder id>:write`.
pub(crate) fn write_field(holder: &str) -> String {
    format!("{holder}:write")
}

/// The prefix of `holder`'s per-read-hold timeout keys of a read-write
/// lock: `{name}:<holder id>:rwlock_timeout`; read hold `n` (from 1) lives
/// at the prefix followed by `:<n>`, expiring with that hold's lease.
pub(crate) fn rw_timeout_prefix(name: &[u8], holder: &str) -> Vec<u8> {
    let mut out = tagged(name);
    out.push(b':');
    out.extend_from_slice(holder.as_bytes());
    out.extend_from_slice(b":rwlock_timeout");
    out
}

/// The channel of a semaphore, plain or expiring: `redisson_sc:{name}`.
pub(crate) fn semaphore_channel(name: &[u8]) -> Vec<u8> {
    prefixed("redisson_sc", name)
}

/// The permit leases of an expiring-permit semaphore: `{name}:timeout`, a
/// zset of permit id -> lease end (ms since the epoch).
/// The most members of an expiring semaphore's lease set read at once
/// (those whose leases end first): a set of unknown size (another
/// application's key by that name) is never read whole. A thousand: a read
/// of 10,000 with their scores took over 10 ms of server time on a loaded
/// server.
pub(crate) const MAX_PERMITS_READ: isize = 1_000;

pub(crate) fn permit_timeouts(name: &[u8]) -> Vec<u8> {
    let mut out = tagged(name);
    out.extend_from_slice(b":timeout");
    out
}

/// The channel of a count-down latch:
/// `redisson_countdownlatch__channel__{name}` (always braced, as Redisson
/// writes it).
pub(crate) fn latch_channel(name: &[u8]) -> Vec<u8> {
    let mut out = b"redisson_countdownlatch__channel__{".to_vec();
    out.extend_from_slice(name);
    out.push(b'}');
    out
}

/// The key of one one-use token: `redguard_token:{scope}:<token text>`.
/// Every token of a scope shares the scope's hash tag.
pub(crate) fn one_use_token(scope: &[u8], token: &[u8]) -> Vec<u8> {
    let mut out = prefixed("redguard_token", scope);
    out.push(b':');
    out.extend_from_slice(token);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_wraps_the_name_in_a_hash_tag() {
        assert_eq!(channel(b"orders:42"), b"redisson_lock__channel:{orders:42}");
    }

    #[test]
    fn names_with_a_brace_are_not_wrapped_again() {
        assert_eq!(
            channel(b"{orders}:42"),
            b"redisson_lock__channel:{orders}:42"
        );
    }

    #[test]
    fn binary_names_round_trip() {
        let name = [0u8, 0xff, b'{', 0x80];
        assert_eq!(&channel(&name)[23..], &name);
    }

    #[test]
    fn fair_and_fenced_keys_follow_redisson() {
        assert_eq!(fair_queue(b"q"), b"redisson_lock_queue:{q}");
        assert_eq!(fair_timeouts(b"q"), b"redisson_lock_timeout:{q}");
        assert_eq!(
            fair_channel(b"q", "c1d2:7"),
            b"redisson_lock__channel:{q}:c1d2:7"
        );
        assert_eq!(token(b"{o}:1"), b"redisson_lock_token:{o}:1");
        assert_eq!(one_use_token(b"pay", b"00ff"), b"redguard_token:{pay}:00ff");
    }

    #[test]
    fn synchronizer_keys_follow_redisson() {
        assert_eq!(rw_channel(b"rw"), b"redisson_rwlock:{rw}");
        assert_eq!(write_field("c1:7"), "c1:7:write");
        assert_eq!(
            rw_timeout_prefix(b"rw", "c1:7"),
            b"{rw}:c1:7:rwlock_timeout"
        );
        assert_eq!(
            rw_timeout_prefix(b"{a}b", "c1:7"),
            b"{a}b:c1:7:rwlock_timeout"
        );
        assert_eq!(semaphore_channel(b"s"), b"redisson_sc:{s}");
        assert_eq!(permit_timeouts(b"s"), b"{s}:timeout");
        assert_eq!(permit_timeouts(b"{s}x"), b"{s}x:timeout");
        assert_eq!(
            latch_channel(b"{l}"),
            b"redisson_countdownlatch__channel__{{l}}"
        );
    }

    #[test]
    fn validation() {
        assert!(validate_name(b"").is_err());
        assert!(validate_name(b"a").is_ok());
        assert!(validate_name(&vec![b'x'; MAX_NAME_LEN]).is_ok());
        assert!(validate_name(&vec![b'x'; MAX_NAME_LEN + 1]).is_err());
    }

    /// Every key derived from `name` for a lock-like handle (and the token
    /// scope and run-once layouts, which reuse them).
    fn derived(name: &[u8]) -> Vec<Vec<u8>> {
        let holder = "6f1c:7";
        let mut read_timeout = rw_timeout_prefix(name, holder);
        read_timeout.extend_from_slice(b":1");
        vec![
            name.to_vec(),
            channel(name),
            fair_queue(name),
            fair_timeouts(name),
            fair_channel(name, holder),
            token(name),
            tagged(name),
            rw_channel(name),
            read_timeout,
            semaphore_channel(name),
            permit_timeouts(name),
            one_use_token(name, b"00ff"),
        ]
    }

    fn redis_rs_slot(key: &[u8]) -> redis::cluster_routing::Slot {
        redis::cluster_routing::Slot::for_key(key)
    }

    /// A name of 0 to 11 bytes, mostly braces and a few letters, so that
    /// every brace arrangement comes up.
    fn random_name(rng: &mut impl rand::Rng) -> Vec<u8> {
        const ALPHABET: &[u8] = b"{}{}ab:x";
        let len = rng.random_range(0..12);
        (0..len)
            .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())])
            .collect()
    }

    #[test]
    fn slot_agrees_with_redis_rs() {
        let mut rng = rand::rng();
        for _ in 0..10_000 {
            let key = random_name(&mut rng);
            let ours = redis::cluster_routing::Slot::new(slot(&key)).unwrap();
            assert_eq!(
                ours,
                redis_rs_slot(&key),
                "{:?}",
                String::from_utf8_lossy(&key)
            );
        }
        // CLUSTER KEYSLOT on a real server (RELIABILITY.md, 3.7).
        assert_eq!(slot(b"orders:42"), 11414);
        assert_eq!(slot(b"{orders}:42"), 105);
        assert_eq!(slot(b"a}b{c"), 13587);
    }

    #[test]
    fn f4_accepted_names_never_cross_slots() {
        let mut rng = rand::rng();
        let (mut accepted, mut braced) = (0, 0);
        for _ in 0..10_000 {
            let name = random_name(&mut rng);
            if validate_name(&name).is_err() || cluster_conflict(&name).is_some() {
                continue;
            }
            accepted += 1;
            braced += usize::from(name.contains(&b'{'));
            let home = redis_rs_slot(&name);
            for key in derived(&name) {
                assert_eq!(
                    redis_rs_slot(&key),
                    home,
                    "{:?} -> {:?}",
                    String::from_utf8_lossy(&name),
                    String::from_utf8_lossy(&key)
                );
            }
            if latch_cluster_conflict(&name).is_none() {
                assert_eq!(redis_rs_slot(&latch_channel(&name)), home);
            }
        }
        // The sample is not degenerate: many names pass, braced ones too.
        assert!(
            accepted > 2_000 && braced > 500,
            "{accepted} accepted, {braced} braced"
        );
    }

    #[test]
    fn f4_names_from_the_catalogue() {
        for bad in [&b"}abc"[..], b"a}b{c", b"x{}y", b"{}", b"a}b", b"{open"] {
            let why = cluster_conflict(bad).expect("rejected");
            assert!(why.contains("Redis Cluster"), "{why}");
        }
        for good in [&b"orders:42"[..], b"{orders}:42", b"x}{a}", b"{o}{}"] {
            assert_eq!(
                cluster_conflict(good),
                None,
                "{:?}",
                String::from_utf8_lossy(good)
            );
            let home = slot(good);
            assert!(derived(good).iter().all(|k| slot(k) == home));
        }
        assert!(latch_cluster_conflict(b"{l}").is_some());
        assert!(latch_cluster_conflict(b"l:1").is_none());
    }
}
