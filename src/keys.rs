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

/// Published on a count-down latch's channel when its count reaches zero
/// (Redisson's `CountDownLatchPubSub.ZERO_COUNT_MESSAGE`): every waiter goes.
pub(crate) const ZERO_COUNT_MESSAGE: &[u8] = b"0";

/// Published on a count-down latch's channel when its count is set or the
/// latch deleted (Redisson's `CountDownLatchPubSub.NEW_COUNT_MESSAGE`).
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

/// Hash slots of a Redis Cluster.
pub(crate) const SLOT_COUNT: u16 = 16_384;

/// The hash tag of `key`: the bytes between its first `{` and the first `}`
/// after it, when there is at least one byte between them (the rule of
/// Redis Cluster's key hashing).
pub(crate) fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let len = key[open + 1..].iter().position(|&b| b == b'}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag, or
/// of the whole key without one, modulo 16 384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key).unwrap_or(key)) % SLOT_COUNT
}

/// Every key and channel redguard derives from a lock name, for any lock
/// kind: the channel, the fair queue, deadlines and per-waiter channel,
/// the fencing counter, the read-write lock's channel and read-hold
/// timeout keys, the semaphore channel and permit leases. A sample holder
/// id stands in for the real ones (holder ids hold no braces).
fn derived_keys(name: &[u8]) -> [Vec<u8>; 9] {
    const HOLDER: &str = "00000000-0000-0000-0000-000000000000:1";
    let mut rw_timeout = rw_timeout_prefix(name, HOLDER);
    rw_timeout.extend_from_slice(b":1");
    [
        channel(name),
        fair_queue(name),
        fair_timeouts(name),
        fair_channel(name, HOLDER),
        token(name),
        rw_channel(name),
        rw_timeout,
        semaphore_channel(name),
        permit_timeouts(name),
    ]
}

/// Checks that every key derived from `name` (see [`derived_keys`]) lives
/// in the slot of `name` itself, as a Redis Cluster needs for one script
/// to touch them all. Redisson's layout (`prefix:{name}`, or `prefix:name`
/// when the name holds a `{`) guarantees it for names without braces and
/// for names with a non-empty `{tag}`; for the others the error says why
/// not. The names that pass keep Redisson's layout unchanged.
pub(crate) fn check_cluster_name(name: &[u8]) -> Result<(), String> {
    let braces = name.iter().any(|&b| b == b'{' || b == b'}');
    if !braces || hash_tag(name).is_some() {
        return Ok(());
    }
    let home = slot(name);
    let Some(stray) = derived_keys(name).into_iter().find(|k| slot(k) != home) else {
        return Ok(());
    };
    let why = if name.contains(&b'{') {
        "it contains `{` but no non-empty `{...}` hash tag, so Redisson's layout appends it \
         unwrapped (`prefix:NAME`) and every key hashes as a whole"
    } else {
        "Redisson's layout wraps it as `prefix:{NAME}`, and its `}` ends that hash tag early"
    };
    Err(format!(
        "name {:?} cannot be used on a Redis Cluster: {why}; its key {:?} would land in slot \
         {} while the name is in slot {home}, and one script may not touch both \
         (CROSSSLOT). Use a name without braces, or with a non-empty hash tag such as \
         \"{{orders}}:42\"",
        String::from_utf8_lossy(name),
        String::from_utf8_lossy(&stray),
        slot(&stray),
    ))
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

    /// A name generator biased towards braces, the bytes that matter.
    fn random_name(rng: &mut impl rand::Rng) -> Vec<u8> {
        const ALPHABET: &[u8] = b"{}{}{}ab:xy-0";
        let len = rng.random_range(1..12);
        (0..len)
            .map(|_| {
                if rng.random_bool(0.1) {
                    rng.random::<u8>()
                } else {
                    ALPHABET[rng.random_range(0..ALPHABET.len())]
                }
            })
            .collect()
    }

    #[test]
    fn slot_matches_redis_rs() {
        use redis::cluster_routing::Slot;
        let mut rng = rand::rng();
        for name in [
            &b"orders:42"[..],
            b"{orders}:42",
            b"{}",
            b"x{}y",
            b"}abc",
            b"a}b{c",
        ] {
            assert_eq!(Slot::new(slot(name)), Some(Slot::for_key(name)));
        }
        for _ in 0..10_000 {
            let name = random_name(&mut rng);
            assert_eq!(
                Slot::new(slot(&name)),
                Some(Slot::for_key(&name)),
                "{name:?}"
            );
        }
        // Known values (`CLUSTER KEYSLOT` on redis 7.0.15).
        assert_eq!(slot(b"orders:42"), 11414);
        assert_eq!(slot(b"{orders}:42"), 105);
        assert_eq!(slot(b"x{}y"), 16116);
    }

    #[test]
    fn f4_colocation_of_the_names_from_the_catalogue() {
        for ok in [&b"orders:42"[..], b"{orders}:42", b"a{b}c}", b"q"] {
            assert!(check_cluster_name(ok).is_ok(), "{ok:?}");
        }
        for bad in [&b"}abc"[..], b"a}b{c", b"x{}y", b"{}", b"a}b"] {
            let err = check_cluster_name(bad).unwrap_err();
            assert!(
                err.contains("Redis Cluster") && err.contains("CROSSSLOT"),
                "{err}"
            );
        }
    }

    /// F4: 10 000 random names, braces included. Every name the check
    /// accepts has all its derived keys in its own slot (0 CROSSSLOT); the
    /// names it rejects really would have crossed slots.
    #[test]
    fn f4_property_accepted_names_colocate() {
        let mut rng = rand::rng();
        let (mut accepted, mut rejected) = (0, 0);
        for _ in 0..10_000 {
            let name = random_name(&mut rng);
            let home = slot(&name);
            let colocated = derived_keys(&name).iter().all(|k| slot(k) == home);
            match check_cluster_name(&name) {
                Ok(()) => {
                    accepted += 1;
                    assert!(colocated, "accepted but crosses slots: {name:?}");
                }
                Err(_) => {
                    rejected += 1;
                    assert!(!colocated, "rejected but co-located: {name:?}");
                }
            }
        }
        assert!(
            accepted > 1_000 && rejected > 1_000,
            "{accepted} / {rejected}"
        );
    }

    #[test]
    fn validation() {
        assert!(validate_name(b"").is_err());
        assert!(validate_name(b"a").is_ok());
        assert!(validate_name(&vec![b'x'; MAX_NAME_LEN]).is_ok());
        assert!(validate_name(&vec![b'x'; MAX_NAME_LEN + 1]).is_err());
    }
}
