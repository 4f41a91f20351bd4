//! Key and channel names derived from a lock name, in Redisson's layout.
//! Pure functions, no I/O.

/// The longest lock name accepted, in bytes (64 KiB).
pub const MAX_NAME_LEN: usize = 64 * 1024;

/// Published on a lock's channel when it is fully released (Redisson's
/// `UNLOCK_MESSAGE`).
pub(crate) const UNLOCK_MESSAGE: &[u8] = b"0";

/// Published when a read hold of a read-write lock is released (Redisson's
/// `READ_UNLOCK_MESSAGE`).
#[allow(
    dead_code,
    reason = "part of the wire format; used by the read-write lock"
)]
pub(crate) const READ_UNLOCK_MESSAGE: &[u8] = b"1";

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
    fn validation() {
        assert!(validate_name(b"").is_err());
        assert!(validate_name(b"a").is_ok());
        assert!(validate_name(&vec![b'x'; MAX_NAME_LEN]).is_ok());
        assert!(validate_name(&vec![b'x'; MAX_NAME_LEN + 1]).is_err());
    }
}
