//! `redguard who CLIENT`: what one client holds, from its holder records
//! (`Client::holder_records`).

use std::process::ExitCode;

use serde_json::{Value, json};

use crate::cli::WhoArgs;
use crate::connect::Connection;
use crate::fail::Failure;
use crate::show;

/// Exit status when the client has no record.
const NO_RECORD: u8 = 1;

/// `redguard who`.
pub(crate) fn who(args: &WhoArgs, conn: &Connection) -> Result<ExitCode, Failure> {
    let records = conn
        .client
        .holder_records(&args.client)
        .map_err(|e| Failure::from_lib(&e, &conn.server))?;
    // "Held for" counts from the server's clock.
    let now = conn.client.server_time().ok();
    if args.json {
        let all: Vec<Value> = records
            .iter()
            .map(|r| {
                json!({
                    "client": r.client,
                    "host": r.host,
                    "pid": r.pid,
                    "program": r.program,
                    "version": r.version,
                    "started_unix_ms": r.started.map(show::unix_ms),
                    "expires_in_ms": r.ttl.and_then(redguard::Ttl::expires_in).map(show::ms),
                    "holds": r.holds.iter().map(|h| json!({
                        "name": show::json_name(&h.name),
                        "holder": h.holder.as_str(),
                        "kind": h.kind.map(redguard::HoldKind::as_str),
                        "held_since_unix_ms": show::unix_ms(h.since),
                        "held_for_ms": now.and_then(|n| n.duration_since(h.since).ok()).map(show::ms),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", json!({"client": args.client, "records": all}));
    } else if records.is_empty() {
        println!(
            "client {}: no record (not a redguard client, records off, or gone)",
            args.client
        );
    } else {
        for r in &records {
            let pid = r.pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
            println!(
                "client {}: host {}, pid {pid}, program {}, redguard {}",
                r.client,
                r.host,
                show::name(r.program.as_bytes()),
                r.version
            );
            for h in &r.holds {
                let held = now
                    .and_then(|n| n.duration_since(h.since).ok())
                    .map_or_else(|| "unknown".to_owned(), show::left);
                let kind = h.kind.map_or_else(String::new, |k| format!(" ({k})"));
                println!(
                    "  holds {} as {}{kind} for {held}",
                    show::name(&h.name),
                    h.holder
                );
            }
        }
    }
    Ok(ExitCode::from(if records.is_empty() {
        NO_RECORD
    } else {
        0
    }))
}
