//! Who holds a lock: the client id (one v4 UUID per `Client`) and the
//! process-unique id of the calling OS thread. No I/O.

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The identity of one [`Client`](crate::Client): a random (v4) UUID made
/// when the client is built, the first half of every holder id it writes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientId(uuid::Uuid);

impl ClientId {
    pub(crate) fn new_random() -> ClientId {
        ClientId(uuid::Uuid::new_v4())
    }

    pub(crate) fn as_u128(&self) -> u128 {
        self.0.as_u128()
    }
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientId({})", self.0)
    }
}

/// A process-unique number for the calling OS thread, starting at 1.
///
/// Plays the part of Java's thread id in Redisson's holder ids. Numbers are
/// never reused within a process, so a thread that exits cannot pass its
/// holds on to a new one.
fn current_thread_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static ID: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ID.with(|id| *id)
}

/// The marker that makes every lock guard ([`LockGuard`](crate::LockGuard),
/// [`MultiLockGuard`](crate::MultiLockGuard),
/// [`RedLockGuard`](crate::RedLockGuard)) `!Send` but `Sync`, as
/// `std::sync::MutexGuard` is (lock_api names its own the same way): a
/// guard's holds belong to the thread that took them (its holder id names
/// the thread, as Redisson's does), but another thread may look at a
/// borrowed guard (`check()`, `is_lost()`, the fencing token).
///
/// It has no value of its own to use: it exists so that the compiler's
/// error for a guard moved into another thread names it ("required because
/// it appears within the type `GuardNoSend`"). To hand work to another
/// thread, take the lock there.
///
/// ```compile_fail,E0277
/// let client = redguard::Client::open("redis://127.0.0.1/")?;
/// let guard = client.lock("job").lock()?;
/// std::thread::spawn(move || drop(guard)); // a guard is not `Send`
/// # Ok::<(), redguard::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct GuardNoSend(PhantomData<*mut ()>);

// SAFETY: `GuardNoSend` holds nothing and is never constructed (it is
// only ever named in `PhantomData`); sharing a reference to it across
// threads touches no data.
unsafe impl Sync for GuardNoSend {}

/// The field type that carries [`GuardNoSend`] in a guard.
pub(crate) type NotSend = PhantomData<GuardNoSend>;

/// A holder id, `"<client uuid>:<thread id>"`: the hash field under which a
/// lock's hold count is stored (Redisson's `getLockName(threadId)`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HolderId(Arc<str>);

impl HolderId {
    pub(crate) fn new(client: ClientId, thread: u64) -> HolderId {
        HolderId(format!("{}:{thread}", client.0).into())
    }

    /// The holder id of the calling thread for `client`. Each thread keeps
    /// the id of the client it used last, so a lock call neither formats
    /// nor allocates one.
    pub(crate) fn current(client: ClientId) -> HolderId {
        thread_local! {
            static LAST: RefCell<Option<(ClientId, HolderId)>> = const { RefCell::new(None) };
        }
        LAST.with(|last| {
            let mut last = last.borrow_mut();
            match &*last {
                Some((id, holder)) if *id == client => holder.clone(),
                _ => {
                    let holder = HolderId::new(client, current_thread_id());
                    *last = Some((client, holder.clone()));
                    holder
                }
            }
        })
    }

    /// A holder id read back from Redis (a lock hash's field, a fair
    /// queue's entry): any string, a foreign (Redisson) holder's included.
    pub(crate) fn from_stored(id: impl Into<Arc<str>>) -> HolderId {
        HolderId(id.into())
    }

    /// The holder id as stored in Redis.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The same, shared.
    pub(crate) fn as_arc(&self) -> &Arc<str> {
        &self.0
    }
}

impl fmt::Display for HolderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for HolderId {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for HolderId {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl fmt::Debug for HolderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HolderId({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// J6: client ids are v4 UUIDs from the OS CSPRNG (122 random bits);
    /// the catalogue's 10⁶ draws hold no duplicate.
    #[test]
    fn j6_a_million_client_ids_are_distinct_v4_uuids() {
        let mut seen = std::collections::HashSet::with_capacity(1_000_000);
        for _ in 0..1_000_000 {
            let id = ClientId::new_random();
            assert_eq!(id.0.get_version_num(), 4);
            assert_eq!(id.0.get_variant(), uuid::Variant::RFC4122);
            assert!(seen.insert(id.as_u128()), "a client id repeated");
        }
    }

    #[test]
    fn thread_ids_are_distinct_and_stable() {
        let here = current_thread_id();
        assert_eq!(here, current_thread_id());
        let there = std::thread::spawn(current_thread_id).join().unwrap();
        assert_ne!(here, there);
    }

    #[test]
    fn holder_id_is_uuid_colon_thread() {
        let client = ClientId::new_random();
        let holder = HolderId::new(client, 42);
        assert_eq!(holder.as_str(), format!("{client}:42"));
        assert_eq!(holder.as_str().len(), 36 + 3);
    }

    #[test]
    fn current_holder_id_follows_the_client_and_the_thread() {
        let (a, b) = (ClientId::new_random(), ClientId::new_random());
        let ha = HolderId::current(a);
        assert_eq!(ha, HolderId::new(a, current_thread_id()));
        assert_eq!(HolderId::current(b), HolderId::new(b, current_thread_id()));
        assert_eq!(HolderId::current(a), ha);
        let there = std::thread::spawn(move || HolderId::current(a))
            .join()
            .unwrap();
        assert_ne!(there, ha);
    }

    #[test]
    fn client_ids_differ() {
        assert_ne!(ClientId::new_random(), ClientId::new_random());
    }
}
