//! redguard's integration suite: one test binary; every test spawns its own
//! redis-server on a free loopback port through `support`.

mod support;

mod layout;
mod lock;
mod ownership;
mod reentrant;
// The binary exists only with the `cli` feature (on by default).
#[cfg(feature = "cli")]
mod cli;
