//! `redguard latch NAME --count N | --count-down | --wait [DUR]`: a
//! count-down latch (Redisson's `RCountDownLatch`) for shell pipelines.
//!
//! A latch exists from its `--count` until it opens (Redisson deletes it
//! at zero), so a latch that is not there was either never set or is open
//! already. `--count-down` and `--wait` refuse it (65) unless
//! `--allow-missing`: a waiter that starts before the setter must not pass
//! straight through.

use std::process::ExitCode;

use redguard::CountDownLatch;

use crate::cli::{LatchArgs, name_bytes};
use crate::connect::Connection;
use crate::fail::{Failure, code};
use crate::show;

/// Runs `redguard latch`.
pub(crate) fn latch(args: &LatchArgs, conn: &Connection) -> Result<ExitCode, Failure> {
    let name = name_bytes(&args.name)?;
    let latch = conn.client.count_down_latch(&name);
    let fail = |e: redguard::Error| Failure::from_lib_on(&e, &conn.server, &name, "latch count");
    let say = |line: String| {
        if !args.quiet {
            println!("{line}");
        }
    };
    if let Some(count) = args.count {
        if latch.try_set_count(count).map_err(fail)? {
            say(format!("latch {} set to {count}", show::name(&name)));
            return Ok(ExitCode::SUCCESS);
        }
        let now = latch.count().map_err(fail)?;
        crate::out::error(&format!(
            "latch {} is set already (count {now}); not set again",
            show::name(&name)
        ));
        return Ok(ExitCode::from(args.conflict_exit_code));
    }
    // A waiter's deadline counts from the start: its first read rides out
    // an outage as the wait does.
    let deadline = args
        .wait
        .flatten()
        .and_then(|timeout| std::time::Instant::now().checked_add(timeout));
    let waiting = args.wait.is_some() && !args.count_down;
    let present = if waiting {
        redguard::retry_until(deadline, || exists(&latch))
    } else {
        exists(&latch)
    };
    if !args.allow_missing && !present.map_err(fail)? {
        let what = if args.count_down {
            "nothing counted down"
        } else {
            "not waiting"
        };
        return Err(Failure::new(
            code::DATAERR,
            format!(
                "latch {} does not exist: never set, or open already (an open latch is \
                 deleted); {what} (--allow-missing takes a missing latch as open)",
                show::name(&name)
            ),
        ));
    }
    if args.count_down {
        let left = latch.count_down().map_err(fail)?;
        say(format!("latch {}: {left} left", show::name(&name)));
        return Ok(ExitCode::SUCCESS);
    }
    // At -v: the wait's start with the count left, then a line a minute.
    let waitlog = crate::waitlog::WaitLog::start(format!("latch {}", show::name(&name)), {
        let latch = latch.clone();
        move || match latch.count() {
            Ok(left) => format!("count {left} left"),
            Err(_) => "count unknown (Redis did not answer)".to_owned(),
        }
    });
    let waited = match deadline {
        Some(deadline) => latch.wait_until(deadline),
        None => latch.wait().map(|()| true),
    };
    let waited_for = waitlog.stop();
    let open = waited.map_err(fail)?;
    log::info!(
        "redguard: latch {} {} after {}",
        show::name(&name),
        if open { "opened" } else { "still closed" },
        show::left(waited_for)
    );
    if open {
        say(format!("latch {} is open", show::name(&name)));
        return Ok(ExitCode::SUCCESS);
    }
    let left = latch.count().map_err(fail)?;
    crate::out::error(&format!(
        "latch {} still at {left} after waiting; not open in time",
        show::name(&name)
    ));
    Ok(ExitCode::from(args.conflict_exit_code))
}

/// `true` while the latch is set: its count is above zero (a latch at
/// zero is deleted).
fn exists(latch: &CountDownLatch) -> redguard::Result<bool> {
    Ok(latch.count()? > 0)
}
