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
}
