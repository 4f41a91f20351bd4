//! `redguard latch NAME --count N | --count-down | --wait [DUR]`: a
//! count-down latch (Redisson's `RCountDownLatch`) for shell pipelines.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args};

use crate::cli::{name_bytes, parse_duration, show_name};
use crate::connect::Connection;
use crate::fail::{Failure, code};

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("action").required(true).args(["count", "count_down", "wait"])))]
pub(crate) struct LatchArgs {
    /// The latch name (the Redis key of its count).
    #[arg(value_name = "NAME")]
    pub(crate) name: OsString,

    /// Set the latch to N (N workers will count it down). Fails with 64
    /// when the latch is set already.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=i64::MAX as u64))]
    pub(crate) count: Option<u64>,

    /// Count the latch down by one and print the count left; at zero every
    /// waiter goes.
    #[arg(long)]
    pub(crate) count_down: bool,

    /// Wait until the latch is open (its count is zero, or it was never
    /// set), at most DUR when given.
    #[arg(long, value_name = "DUR", num_args = 0..=1, value_parser = parse_duration)]
    pub(crate) wait: Option<Option<Duration>>,

    /// Exit status when --wait runs out before the latch opens.
    #[arg(short = 'E', long, value_name = "N", default_value_t = code::TEMPFAIL)]
    pub(crate) conflict_exit_code: u8,

    /// Print nothing on success.
    #[arg(short, long)]
    pub(crate) quiet: bool,
}

/// Runs `redguard latch`.
pub(crate) fn latch(args: &LatchArgs, conn: &Connection) -> Result<ExitCode, Failure> {
    let name = name_bytes(&args.name)?;
    let latch = conn.client.count_down_latch(&name);
    let fail = |e: redguard::Error| Failure::from_lib(&e, &conn.server);
    let say = |line: String| {
        if !args.quiet {
            println!("{line}");
        }
    };
    if let Some(count) = args.count {
        latch.set_count(count).map_err(fail)?;
        say(format!("latch {} set to {count}", show_name(&name)));
        return Ok(ExitCode::SUCCESS);
    }
    if args.count_down {
        let left = latch.count_down().map_err(fail)?;
        say(format!("latch {}: {left} left", show_name(&name)));
        return Ok(ExitCode::SUCCESS);
    }
    let open = match args.wait.flatten() {
        Some(timeout) => latch.wait_for(timeout).map_err(fail)?,
        None => latch.wait().map(|()| true).map_err(fail)?,
    };
    if open {
        say(format!("latch {} is open", show_name(&name)));
        return Ok(ExitCode::SUCCESS);
    }
    let left = latch.count().map_err(fail)?;
    crate::out::error(&format!(
        "latch {} still at {left} after waiting; not open in time",
        show_name(&name)
    ));
    Ok(ExitCode::from(args.conflict_exit_code))
}
