//! `redguard latch NAME --count N | --count-down | --wait [DUR]`: a
//! count-down latch (Redisson's `RCountDownLatch`) for shell pipelines.

use std::process::ExitCode;

use crate::cli::{LatchArgs, name_bytes, show_name};
use crate::connect::Connection;
use crate::fail::Failure;

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
