//! `redguard who CLIENT`: what one client holds, from its holder records
//! (`Client::holder_records`). CLIENT is a client id, or a holder id as
//! `status` prints it (`<client id>:<thread>`, a write hold's `:write`
//! too): then only that holder's holds are shown.

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
    // A client id has no ':'; a holder id is the client id, ':' and more.
    let (client, holder) = match args.client.split_once(':') {
        Some((client, _)) => (client, Some(args.client.as_str())),
        None => (args.client.as_str(), None),
    };
    let mut records = conn
        .client
        .holder_records(client)
        .map_err(|e| Failure::from_lib(&e, &conn.server))?;
    if let Some(holder) = holder {
        for record in &mut records {
            record
                .holds
                .retain(|h| is_hold_of(h.holder.as_str(), holder));
        }
    }
    // "Held for" counts from the server's clock.
    let now = conn.client.server_time().ok();
    if args.json {
        let all: Vec<Value> = records
            .iter()
            .map(|r| {
                let mut v = json!({
                    "client": r.client,
                    "host": show::record_json(r, "host", &r.host),
                    "pid": r.pid,
                    "program": show::record_json(r, "program", &r.program),
                    "version": show::record_json(r, "version", &r.version),
                    "started_unix_ms": r.started.map(show::unix_ms),
                    "expires_in_ms": r.ttl.and_then(redguard::Ttl::expires_in).map(show::ms),
                    "holds": r.holds.iter().map(|h| json!({
                        "name": show::json_name(&h.name),
                        "holder": h.holder.as_str(),
                        "kind": h.kind.map(redguard::HoldKind::as_str),
                        "held_since_unix_ms": show::unix_ms(h.since),
                        "held_for_ms": now.and_then(|n| n.duration_since(h.since).ok()).map(show::ms),
                    })).collect::<Vec<_>>(),
                });
                show::unread_json(r, &mut v);
                v
            })
            .collect();
        let mut out = json!({"client": client, "records": all});
        if let Some(holder) = holder {
            out["holder"] = json!(holder);
        }
        crate::out::print_json(out);
    } else if records.is_empty() {
        println!("client {client}: no record (not a redguard client, records off, or gone)");
    } else {
        for r in &records {
            let pid = r.pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
            println!(
                "client {} (as its record says): host {}, pid {pid}, program {}, redguard {}{}",
                show::text(&r.client),
                show::record_text(r, "host", &r.host),
                show::record_program(r),
                show::record_text(r, "version", &r.version),
                show::unread_note(r)
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

/// Whether a hold recorded under `recorded` is one of `holder`'s: the same
/// holder id, or its write hold (`<holder id>:write`), whichever was given.
fn is_hold_of(recorded: &str, holder: &str) -> bool {
    let base = |id: &str| id.strip_suffix(":write").unwrap_or(id).to_owned();
    base(recorded) == base(holder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_id_picks_its_own_holds_and_its_write_hold() {
        let id = "6f1c1a8e-0000-4000-8000-000000000001";
        assert!(is_hold_of(&format!("{id}:1"), &format!("{id}:1")));
        assert!(is_hold_of(&format!("{id}:1:write"), &format!("{id}:1")));
        assert!(is_hold_of(&format!("{id}:1"), &format!("{id}:1:write")));
        assert!(!is_hold_of(&format!("{id}:12"), &format!("{id}:1")));
        assert!(!is_hold_of(&format!("{id}:2"), &format!("{id}:1")));
    }
}
