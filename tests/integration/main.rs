//! redguard's integration suite: one test binary; every test spawns its own
//! redis-server on a free loopback port through `support`.

mod support;

mod local_fairness;
mod lock;
mod pool_contention;
mod renew_batch;
mod script_cache;
