//! `redguard`: run a command under a distributed lock on Redis, and look
//! at or remove locks. Built on the public `redguard` library API only.
//!
//! Exit statuses are decided in `fail::code`; CMD's own status passes
//! through `exec`.

mod child;
mod cli;
mod connect;
mod durations;
mod exec;
mod fail;
mod help;
mod latch;
mod logging;
mod once;
mod out;
mod permits;
mod relay;
mod show;
mod spinner;
mod status;
#[cfg(target_os = "linux")]
mod supervisor;
mod sync_status;
#[cfg(target_os = "linux")]
mod tree;
mod unlock;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::fail::Failure;

fn main() -> ExitCode {
    // Re-executed by `exec` to supervise CMD (see `supervisor`).
    #[cfg(target_os = "linux")]
    if let Some(spec) = std::env::var_os(supervisor::ENV) {
        return supervisor::main(&spec);
    }
    match run() {
        Ok(code) => code,
        Err(failure) => {
            out::error(&failure.message);
            ExitCode::from(failure.code)
        }
    }
}

fn run() -> Result<ExitCode, Failure> {
    // Before parsing: a usage error may quote an argument holding a URL.
    connect::register_url_secrets(std::env::args_os().chain(std::env::var_os("REDIS_URL")));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return cli::parse_error(err),
    };
    logging::init(cli.verbose);
    let conn = connect::connect(&cli.conn)?;
    log::debug!("redguard: Redis at {}", conn.server);
    match &cli.command {
        Command::Exec(args) => exec::exec(args, &conn),
        Command::Status(args) => status::status(args, &conn),
        Command::Unlock(args) => unlock::unlock(args, &conn),
        Command::Once(args) => once::once(args, &conn),
        Command::Latch(args) => latch::latch(args, &conn),
    }
}
