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
mod list;
mod logging;
mod once;
mod out;
mod outage;
mod permits;
mod record_view;
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
mod who;

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
    let conn = connect::connect(&cli.conn, &program(&cli.command))?;
    log::debug!("redguard: Redis at {}", conn.server);
    match &cli.command {
        Command::Exec(args) => exec::exec(args, &conn),
        Command::Status(args) => status::status(args, &conn),
        Command::Unlock(args) => unlock::unlock(args, &conn),
        Command::Once(args) => once::once(args, &conn),
        Command::Latch(args) => latch::latch(args, &conn),
        Command::List(args) => list::list(args, &conn),
        Command::Who(args) => who::who(args, &conn),
    }
}

/// What the holder record says this process runs: the command line of
/// `exec` and `once` (their CMD included: the arguments only, never the
/// environment), else the subcommand.
fn program(command: &Command) -> String {
    let line = |words: &[&std::ffi::OsStr]| {
        words
            .iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    };
    match command {
        Command::Exec(args) => {
            let mut words = vec![
                std::ffi::OsStr::new("redguard exec"),
                &args.name,
                "--".as_ref(),
            ];
            words.extend(args.command.iter().map(|w| w.as_os_str()));
            line(&words)
        }
        Command::Once(args) => {
            let mut words = vec![
                std::ffi::OsStr::new("redguard once"),
                &args.key,
                "--".as_ref(),
            ];
            words.extend(args.command.iter().map(|w| w.as_os_str()));
            line(&words)
        }
        Command::Status(_) => "redguard status".to_owned(),
        Command::Unlock(_) => "redguard unlock".to_owned(),
        Command::Latch(_) => "redguard latch".to_owned(),
        Command::List(_) => "redguard list".to_owned(),
        Command::Who(_) => "redguard who".to_owned(),
    }
}
