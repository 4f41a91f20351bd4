//! An idempotent payment service: clients retry, the service charges each
//! payment exactly once and gives every retry the same receipt.
//!
//! 100 requests for 20 payment ids (5 each: the first try and four
//! retries, as impatient clients and timed-out proxies send them) arrive
//! shuffled at 16 worker threads. Each worker handles a request with
//! `Client::once_wait` on the key `payment:<id>`: the first request for an
//! id charges the card and records the receipt; a request that arrives
//! while the charge is under way waits for it; every later one gets the
//! recorded receipt without charging again.
//!
//! The card network here is a stand-in that counts charges per payment, so
//! the run can show the result: 20 charges, one per payment, and 100
//! answers, all five of a payment alike. Its charge carries the run's
//! fencing token, as a real provider's idempotency key would, so a worker
//! that lost its claim (a long pause past its lease) could not charge
//! twice either.
//!
//! `cargo run --example idempotent_payment` (uses `REDIS_URL`, or starts a
//! private redis-server for the run).

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use rand::seq::SliceRandom;
use redguard::{Client, FencingToken, Once};

const PAYMENTS: usize = 20;
const TRIES: usize = 5;
const WORKERS: usize = 16;
/// How long a payment's receipt is kept for retries.
const RECEIPTS_KEPT: Duration = Duration::from_secs(24 * 3600);
/// How long a retry waits for a charge under way before giving up.
const RETRY_WAIT: Duration = Duration::from_secs(10);

/// The card network: charges cards, and refuses a charge whose fencing
/// token is older than one it already saw for the payment.
#[derive(Default)]
struct CardNetwork {
    charges: Mutex<HashMap<String, (u32, FencingToken)>>,
}

impl CardNetwork {
    /// Charges `cents` for `payment`; the charge reference, or `None` when a
    /// newer run of the same payment charged already.
    fn charge(&self, payment: &str, cents: u64, token: FencingToken) -> Option<String> {
        // A real charge takes a while: long enough for retries to pile up.
        #[allow(
            clippy::disallowed_methods,
            reason = "stands in for a slow remote call"
        )]
        thread::sleep(Duration::from_millis(30));
        let mut charges = self.charges.lock().unwrap_or_else(|e| e.into_inner());
        let entry = charges.entry(payment.to_owned()).or_insert((0, token));
        if token < entry.1 {
            return None;
        }
        *entry = (entry.0 + 1, token);
        Some(format!("ch_{payment}_{}_{cents}", token.get()))
    }
}

/// Handles one request for `payment`: charges it the first time, returns
/// the recorded receipt every time.
fn pay(
    client: &Client,
    run: &str,
    cards: &CardNetwork,
    payment: &str,
    cents: u64,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let key = format!("example:{run}:payment:{payment}");
    match client.once_wait(&key, RECEIPTS_KEPT, RETRY_WAIT)? {
        Once::Run(claim) => {
            let reference = cards
                .charge(payment, cents, claim.fencing_token())
                .ok_or("a newer run charged this payment")?;
            let receipt = format!("paid {cents} cents for {payment}, ref {reference}");
            // Records the receipt for the retries and ends the claim, in one
            // step; refused if the claim was lost meanwhile.
            let recorded = claim.complete(&receipt)?;
            Ok(String::from_utf8(recorded.value)?)
        }
        Once::Done(outcome) => Ok(String::from_utf8(outcome.value)?),
        Once::Running { holder, .. } => {
            Err(format!("{payment}: still being charged by {holder}; try again later").into())
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = common::redis_url()?;
    let client = Client::open(&url)?;
    let run = format!("run{}", std::process::id());
    let cards = Arc::new(CardNetwork::default());

    let mut requests: Vec<(String, u64)> = (0..PAYMENTS)
        .flat_map(|i| (0..TRIES).map(move |_| (format!("pay-{i:02}"), 1_000 + 25 * i as u64)))
        .collect();
    requests.shuffle(&mut rand::rng());
    println!(
        "{} requests for {PAYMENTS} payments ({TRIES} tries each), {WORKERS} worker threads",
        requests.len()
    );

    let (tx, rx) = crossbeam_channel::unbounded();
    for request in requests {
        tx.send(request)?;
    }
    drop(tx);
    let answers = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (client, run, cards, rx, answers) = (
                client.clone(),
                run.clone(),
                cards.clone(),
                rx.clone(),
                answers.clone(),
            );
            thread::spawn(move || {
                for (payment, cents) in rx {
                    let answer =
                        pay(&client, &run, &cards, &payment, cents).map_err(|e| e.to_string());
                    answers.lock().unwrap().push((payment, answer));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().map_err(|_| "a worker panicked")?;
    }

    let answers = answers.lock().unwrap();
    let charges = cards.charges.lock().unwrap();
    let mut by_payment: HashMap<&str, Vec<&Result<String, String>>> = HashMap::new();
    for (payment, answer) in answers.iter() {
        by_payment.entry(payment).or_default().push(answer);
    }
    let mut ok = answers.len() == PAYMENTS * TRIES;
    let mut ids: Vec<&&str> = by_payment.keys().collect();
    ids.sort();
    for id in ids {
        let got = &by_payment[*id];
        let charged = charges.get(*id).map_or(0, |c| c.0);
        let same = got.iter().all(|a| a.is_ok() && *a == got[0]);
        ok &= charged == 1 && same;
        match got[0] {
            Ok(receipt) => println!(
                "{id}: charged {charged}x, {} answers{}: {receipt}",
                got.len(),
                if same { ", all alike" } else { ", NOT ALIKE" }
            ),
            Err(e) => println!("{id}: charged {charged}x, error: {e}"),
        }
        client.forget_once(format!("example:{run}:payment:{id}"))?;
    }
    let total: u32 = charges.values().map(|c| c.0).sum();
    println!(
        "{total} charges for {PAYMENTS} payments; {} answers",
        answers.len()
    );
    if !ok {
        return Err("a payment was charged twice, or a retry got another answer".into());
    }
    println!("every payment charged exactly once; every retry got its payment's receipt");
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The example's own claim, checked by `cargo test --all-targets`.
    #[test]
    fn every_payment_is_charged_once_and_every_retry_gets_its_receipt() {
        super::main().unwrap();
    }
}
