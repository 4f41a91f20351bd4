//! The `redguard` command-line tool (work in progress).

fn main() {}
