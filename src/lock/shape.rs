//! What makes a hash a lock: its fields, never its type alone. The same
//! rule as `lua/lock_shape.lua`, which the acquire and force-unlock scripts
//! apply; here for the reads (`inspect`, `list_locks`, `holders`). No I/O.
//!
//! A lock hash (Redisson's layout, every kind: reentrant, fair, fenced,
//! read-write, a run-once claim) has only these fields:
//!
//! * `<holder id>` → hold count, where a holder id is
//!   `<uuid>:<thread>`: the UUID in its 8-4-4-4-12 hex form (the client's
//!   id: redguard's v4 client id, Redisson's, node-redisson's or
//!   goRedisson's `UUID.randomUUID()`), the thread part either a decimal
//!   integer of at most 20 digits, a sign allowed (redguard's thread
//!   number, Redisson's Java `long` thread id, goRedisson's goroutine id),
//!   or a second UUID (node-redisson's, which names a lock handle rather
//!   than a thread: `<executor uuid>:<handle uuid>`);
//! * `<holder id>:write` → hold count (a read-write lock's writer);
//! * `mode` → `read` or `write` (a read-write lock);
//!
//! with a hold count a decimal integer of at most [`MAX_HOLD_COUNT`]. An
//! application's hash (`HSET
//! cart:42 sku123 2`) is not a lock, whatever its values.

/// The most fields a lock hash can have; a larger hash is not a lock and
/// is not read. A lock has one field per holder thread, plus `mode`: an
/// exclusive lock one, a read-write lock one per reader thread holding it
/// at once. Ten thousand is far above any fleet's concurrent readers of
/// one lock, and reading that many small fields stays cheap (a few pages of
/// `HSCAN`, well under a millisecond of server time each). The same bound
/// is `MAX_LOCK_FIELDS` in `lua/lock_shape.lua`.
pub(crate) const MAX_LOCK_FIELDS: u64 = 10_000;

/// The longest field a lock hash can have: a holder id of two UUIDs
/// (node-redisson's, 73 bytes) with `:write` after it. Longer fields are
/// refused before any pattern is tried. The same bound is `MAX_FIELD_LEN`
/// in `lua/lock_shape.lua`.
pub(crate) const MAX_FIELD_LEN: usize = 79;

/// The longest value a lock hash can have: a hold count (decimal, at most
/// 20 digits read before its bound is checked) or a `mode` (`write`).
/// Longer values are refused unread: reads bound values by it on the
/// server (`lua/bounded_read.lua`). The same bound is in
/// `lua/lock_shape.lua`'s `lock_field`.
pub(crate) const MAX_VALUE_LEN: usize = 20;

/// The most holds one holder can have of a lock. Scripts loop over a
/// reader's holds (one timeout key each): a larger count (`HSET m:rw
/// <uuid>:1 1000000`) is no lock's, so that no script loops over it. Far
/// above any real re-entry depth, and low enough that a loop over that
/// many holds (a `PTTL` or `PEXPIRE` each) stays within a few milliseconds
/// of server time: 10,000 took 20 ms on a loaded server. The same bound is `MAX_HOLD_COUNT` in
/// `lua/lock_shape.lua` and in the read-write scripts that loop over holds.
pub(crate) const MAX_HOLD_COUNT: u64 = 1_000;

/// The most digits of a decimal thread part (a Java `long` has 19; its
/// sign comes on top). The same bound is `MAX_THREAD_DIGITS` in
/// `lua/lock_shape.lua`.
const MAX_THREAD_DIGITS: usize = 20;

/// Fields asked for per `HSCAN` call when a hash's fields are read. A hash
/// small enough for Redis's compact encoding (128 fields by default) comes
/// back whole from one call whatever the count.
pub(crate) const HSCAN_COUNT: u64 = 1_000;

/// Fields asked for by the first, sampling `HSCAN` that comes with the
/// `HLEN` (the same as `SHAPE_SAMPLE` in `lua/lock_shape.lua`): every lock
/// in practice comes back whole, and on a hash far too large to be a lock
/// the call costs next to nothing.
pub(crate) const HSCAN_SAMPLE: u64 = 16;

/// Whether `id` is a holder id: `<uuid>:<decimal thread id>` or
/// `<uuid>:<uuid>`.
pub(crate) fn is_holder_id(id: &[u8]) -> bool {
    let Some((uuid, thread)) = id.split_at_checked(36) else {
        return false;
    };
    let Some(thread) = thread.strip_prefix(b":") else {
        return false;
    };
    if !is_uuid(uuid) {
        return false;
    }
    let digits = thread.strip_prefix(b"-").unwrap_or(thread);
    let decimal = !digits.is_empty()
        && digits.len() <= MAX_THREAD_DIGITS
        && digits.iter().all(u8::is_ascii_digit);
    decimal || is_uuid(thread)
}

/// The 8-4-4-4-12 hex form of a UUID, either case.
fn is_uuid(text: &[u8]) -> bool {
    text.len() == 36
        && text.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// Whether `value` is a hold count: decimal digits, at most
/// [`MAX_HOLD_COUNT`].
fn is_hold_count(value: &[u8]) -> bool {
    !value.is_empty()
        && value.len() <= MAX_VALUE_LEN
        && value.iter().all(u8::is_ascii_digit)
        && std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n <= MAX_HOLD_COUNT)
}

/// Whether one field of a hash, with its value, is what a lock stores.
pub(crate) fn is_lock_field(field: &[u8], value: &[u8]) -> bool {
    if field == b"mode" {
        return value == b"read" || value == b"write";
    }
    if field.len() > MAX_FIELD_LEN || !is_hold_count(value) {
        return false;
    }
    is_holder_id(field.strip_suffix(b":write").unwrap_or(field))
}

#[cfg(test)]
mod tests {
    use super::*;

    const JAVA: &str = "5e1f0c0a-9a51-4c4e-8d4f-3f1c2b7d9e10";
    /// A second UUID, as node-redisson puts after its executor's.
    const HANDLE: &str = "0b7c3f1e-2d4a-4e6b-9c8d-7a6f5e4d3c2b";

    #[test]
    fn holder_ids_of_redguard_and_redisson_are_lock_fields() {
        let client = crate::holder::ClientId::new_random();
        let ours = crate::holder::HolderId::new(client, 7);
        assert!(is_lock_field(ours.as_str().as_bytes(), b"1"));
        assert!(is_lock_field(format!("{JAVA}:1").as_bytes(), b"3"));
        assert!(is_lock_field(
            format!("{JAVA}:9223372036854775807").as_bytes(),
            b"1"
        ));
        // A random thread id of Redisson's reactive API may be negative.
        assert!(is_lock_field(format!("{JAVA}:-42").as_bytes(), b"1"));
        assert!(is_lock_field(
            format!("{}:1", JAVA.to_uppercase()).as_bytes(),
            b"1"
        ));
        assert!(is_lock_field(format!("{JAVA}:1:write").as_bytes(), b"2"));
        assert!(is_lock_field(b"mode", b"read"));
        assert!(is_lock_field(b"mode", b"write"));
        assert!(is_lock_field(format!("{JAVA}:1").as_bytes(), b"1000"));
        assert!(!is_lock_field(format!("{JAVA}:1").as_bytes(), b"1001"));
        assert!(is_lock_field(format!("{JAVA}:1").as_bytes(), b"0"));
    }

    #[test]
    fn holder_ids_of_node_redisson_and_go_redisson_are_lock_fields() {
        // node-redisson: `<executor uuid>:<lock handle uuid>`.
        let node = format!("{JAVA}:{HANDLE}");
        assert!(is_lock_field(node.as_bytes(), b"1"));
        assert!(is_lock_field(
            format!("{}:{}", JAVA.to_uppercase(), HANDLE).as_bytes(),
            b"2"
        ));
        let node_writer = format!("{node}:write");
        assert_eq!(node_writer.len(), MAX_FIELD_LEN);
        assert!(is_lock_field(node_writer.as_bytes(), b"1"));
        // goRedisson: `<uuid>:<goroutine id>`, a decimal.
        assert!(is_lock_field(format!("{JAVA}:18").as_bytes(), b"1"));
        assert!(is_lock_field(format!("{JAVA}:18:write").as_bytes(), b"1"));
        assert!(is_lock_field(
            format!("{JAVA}:-9223372036854775808:write").as_bytes(),
            b"1"
        ));
    }

    #[test]
    fn application_fields_are_not_lock_fields() {
        let cases: Vec<(String, &str)> = vec![
            ("sku123".into(), "2"),
            ("age".into(), "41"),
            ("a".into(), "1"),
            ("a:1".into(), "1"),
            ("holder:1".into(), "1"),
            ("mode".into(), "dark"),
            ("outcome".into(), "0"),
            (format!("{JAVA}:1"), "x"),
            (format!("{JAVA}:1"), "-1"),
            (format!("{JAVA}:1"), ""),
            (format!("{JAVA}:"), "1"),
            (format!("{JAVA}:1x"), "1"),
            (format!("{JAVA}:1:read"), "1"),
            (format!("{JAVA}1"), "1"),
            (format!("{JAVA}:123456789012345678901"), "1"),
            (format!("{}:1", JAVA.replace('-', "x")), "1"),
            (format!("g{}:1", &JAVA[1..]), "1"),
            // Two UUIDs, but not both whole, or with more after them.
            (format!("{JAVA}:{}", &HANDLE[1..]), "1"),
            (format!("{JAVA}:{HANDLE}0"), "1"),
            (format!("{JAVA}:{}", HANDLE.replace('-', "")), "1"),
            (format!("{JAVA}:g{}", &HANDLE[1..]), "1"),
            (format!("{JAVA}:{HANDLE}:read"), "1"),
            (format!("{JAVA}:{HANDLE}:1"), "1"),
            (format!("{JAVA}:{HANDLE}:write:write"), "1"),
            (format!("{JAVA}:{HANDLE}"), "pending"),
            (format!("{JAVA}:{HANDLE}"), "1.5"),
            (HANDLE.to_string(), "1"),
            (format!("{JAVA}:1:{HANDLE}"), "1"),
            (format!("{JAVA}:{JAVA}:{HANDLE}"), "1"),
            (format!("{JAVA}:-{HANDLE}"), "1"),
            (format!("{JAVA}:1:write:write"), "1"),
            (format!("{JAVA}:--1"), "1"),
            (format!("{JAVA}:-"), "1"),
            (format!("{JAVA}:+1"), "1"),
            (format!("{JAVA}: 1"), "1"),
            // Hold counts scripts would loop over for seconds.
            (format!("{JAVA}:1"), "10001"),
            (format!("{JAVA}:1"), "1000000"),
            (format!("{JAVA}:1:write"), "1000000"),
            (format!("{JAVA}:1"), "99999999999999999999"),
        ];
        for (field, value) in cases {
            assert!(
                !is_lock_field(field.as_bytes(), value.as_bytes()),
                "{field:?} = {value:?}"
            );
        }
    }

    /// The Lua rule and this one share their bounds.
    #[test]
    fn the_lua_rule_has_the_same_bounds() {
        let lua = include_str!("../../lua/lock_shape.lua");
        assert!(lua.contains(&format!("local MAX_LOCK_FIELDS = {MAX_LOCK_FIELDS}\n")));
        assert!(lua.contains(&format!("local SHAPE_SAMPLE = {HSCAN_SAMPLE}\n")));
        assert!(lua.contains(&format!("local MAX_FIELD_LEN = {MAX_FIELD_LEN}\n")));
        assert!(lua.contains(&format!("local MAX_THREAD_DIGITS = {MAX_THREAD_DIGITS}\n")));
        assert!(lua.contains(&format!("#value > {MAX_VALUE_LEN} ")));
        // Every script that loops over a holder's holds bounds the loop by
        // the same count.
        for script in [
            lua,
            include_str!("../../lua/rw_read_keep.lua"),
            include_str!("../../lua/rw_read_renew.lua"),
            include_str!("../../lua/rw_read_unlock.lua"),
        ] {
            assert!(script.contains(&format!("local MAX_HOLD_COUNT = {MAX_HOLD_COUNT}\n")));
        }
    }
}
