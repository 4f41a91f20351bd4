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
mod permits;
mod record_view;
mod show;
mod signals;
mod spinner;
mod status;
mod stop_margin;
#[cfg(target_os = "linux")]
mod supervisor;
mod sync_status;
#[cfg(target_os = "linux")]
mod tree;
mod unlock;
mod waiters;
mod waitlog;
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
    logging::init(cli.verbose, subject(&cli.command));
    let conn = connect::connect(
        &cli.conn,
        &program(&cli.command),
        record_command(&cli.command),
    )?;
    log::debug!("redguard: Redis at {}", conn.server);
    let result = match &cli.command {
        Command::Exec(args) => exec::exec(args, &conn),
        Command::Status(args) => status::status(args, &conn),
        Command::Unlock(args) => unlock::unlock(args, &conn),
        Command::Once(args) => once::once(args, &conn),
        Command::Latch(args) => latch::latch(args, &conn),
        Command::List(args) => list::list(args, &conn),
        Command::Who(args) => who::who(args, &conn),
    };
    // Whatever the outcome: releases what is still held and deletes this
    // client's holder record, waiting for both (at most two response
    // timeouts), so that nothing of this run is left in Redis (`who`, a
    // lock held until its lease ends). Dropping the client would leave it
    // to a thread that the exit cuts short.
    conn.client.shutdown();
    result
}

/// The lock or key the command works on, for the log lines.
fn subject(command: &Command) -> Option<&[u8]> {
    use std::os::unix::ffi::OsStrExt;
    let name = match command {
        Command::Exec(args) => &args.name,
        Command::Once(args) => &args.key,
        Command::Status(args) => &args.name,
        Command::Unlock(args) => &args.name,
        Command::Latch(args) => &args.name,
        Command::List(_) | Command::Who(_) => return None,
    };
    Some(name.as_bytes())
}

/// How much of [`program`] the holder record keeps: `--record-command` of
/// `exec` and `once`; masked for the others (their text holds no CMD).
fn record_command(command: &Command) -> redguard::RecordCommand {
    match command {
        Command::Exec(args) => args.record_command.into(),
        Command::Once(args) => args.record_command.into(),
        _ => redguard::RecordCommand::Masked,
    }
}

/// What the holder record says this process runs: the command line of
/// `exec` and `once` (their CMD included: the arguments only, never the
/// environment), else the subcommand. The library masks it as
/// [`record_command`] says. A word with white space or quotes in it is
/// quoted as a shell would, so that the record reads as one command line
/// and the masking sees the word whole.
fn program(command: &Command) -> String {
    let line = |words: &[&std::ffi::OsStr]| {
        words
            .iter()
            .map(|w| shell_word(&w.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ")
    };
    match command {
        Command::Exec(args) => {
            let mut words = vec![
                std::ffi::OsStr::new("redguard"),
                "exec".as_ref(),
                &args.name,
                "--".as_ref(),
            ];
            words.extend(args.command.iter().map(|w| w.as_os_str()));
            line(&words)
        }
        Command::Once(args) => {
            let mut words = vec![
                std::ffi::OsStr::new("redguard"),
                "once".as_ref(),
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

/// `word` as a shell reads it back: as it is when it has no white space,
/// quote or backslash (and is not empty), else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && !word
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '\'' | '"' | '\\'));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CMD's words read back as a shell would: the record's masking then
    /// sees a quoted password as one word.
    #[test]
    fn words_are_quoted_as_a_shell_reads_them() {
        assert_eq!(shell_word("plain"), "plain");
        assert_eq!(shell_word("sleep 2"), "'sleep 2'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
        assert_eq!(shell_word(r"a\b"), r"'a\b'");
    }
}
