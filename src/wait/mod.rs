//! The wait engine: what every waiting call shares, whatever it waits for
//! (a lock, a read or write hold, a permit, a latch, a run-once claim).
//!
//! * [`attempts`]: the loop of attempts and waits, [`wait_loop`].
//! * [`outage`]: riding out an outage: which failures a waiting call
//!   retries, its pauses, and the connection budget it sets for its
//!   attempts; [`retry_until`] for the callers' own calls.
//! * [`record_entry`]: the waiting thread's entry in its client's holder
//!   record, for `redguard status`.

mod attempts;
mod outage;
mod record_entry;

pub(crate) use attempts::{Attempt, Wake, wait_loop};
pub(crate) use outage::Outage;
pub use outage::retry_until;
pub(crate) use record_entry::WaitEntry;
