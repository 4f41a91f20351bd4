//! redguard's integration suite: one test binary; every test spawns its own
//! redis-server on a free loopback port through `support`.

mod support;

mod fair_lock;
mod fenced_lock;
mod lock;
