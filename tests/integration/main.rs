//! redguard's integration suite: one test binary; every test spawns its own
//! redis-server on a free loopback port through `support`.

mod support;

mod acl;
mod app_keys;
mod bad_input;
mod bounded_reads;
mod clock;
mod cluster;
mod combining;
mod config_bounds;
mod fair_lock;
mod faults;
mod fenced_lock;
mod force_unlock_heard;
mod foreign;
mod holder_checks;
mod identity;
mod interrupted;
mod latch;
mod layout;
mod local_fairness;
mod lock;
mod loss;
mod lost_grant;
mod lost_lease;
mod messages;
mod multi_lock;
mod mutual_exclusion;
mod once;
mod ownership;
mod packaging;
mod per_name_state;
mod persistence;
mod pool_contention;
mod record_scope;
mod records;
mod red_lock;
mod redisson_mix;
mod reentrant;
mod release_retry;
mod renew_batch;
mod rw_lock;
mod scale;
mod script_bounds;
mod script_cache;
mod semaphore;
mod sentinel;
mod stale_sentinel;
mod storm;
mod waiters;
mod watchdog;
mod watchdog_threads;
// The binary exists only with the `cli` feature (off by default;
// scripts/test turns it on).
#[cfg(feature = "cli")]
mod cli;
#[cfg(feature = "cli")]
mod cli_sync;
#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "cli")]
mod node_redisson;
#[cfg(feature = "tls")]
mod tls;
