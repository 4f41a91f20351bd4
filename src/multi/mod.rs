//! Locks over several locks: [`MultiLock`] (all of them, on any servers)
//! and [`RedLock`] (a quorum of independent masters).

mod members;
mod multi_lock;
mod red_lock;

pub use multi_lock::{MultiLock, MultiLockGuard};
pub use red_lock::{RedLock, RedLockGuard};
