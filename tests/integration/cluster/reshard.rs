//! Issue 45 (items 2 and 3): a slot held MIGRATING/IMPORTING for 20 s, as a
//! slow or stuck `redis-cli --cluster reshard` holds it, with every kind of
//! operation run at once inside that one window. Redis answers `TRYAGAIN`
//! to a call whose keys are split between the two nodes for the whole
//! window; a channel passed as a key made even a plain unlock such a call.
//!
//! Each operation must give its answer while the window is open (those
//! that touch one key: a plain release, the waiter it wakes, a busy
//! `exec -n`) or right after it closes (the others wait for the slot), and
//! a release that cannot go through before its lease ends must never be
//! reported as done (`exec` exit 74, an `Err` from `unlock()`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redguard::Client;

use super::{name_on, slot};
use crate::support::{RedisCluster, unique_name, wait_until};

/// How long the slot stays half-moved, keys on the source.
const WINDOW: Duration = Duration::from_secs(20);
/// How soon after the window closes a waiting operation must be answered.
const AFTER: Duration = Duration::from_secs(5);
/// Bound on any one CLI run.
const CLI_BOUND: Duration = Duration::from_secs(90);

/// The end of one CLI run.
struct CliEnd {
    what: String,
    code: Option<i32>,
    stderr: String,
    ended: Instant,
}

/// Starts `redguard --url <bed> ARGS` on a thread of its own; the run is
/// killed after [`CLI_BOUND`].
fn cli(bed: &RedisCluster, args: &[&str]) -> std::thread::JoinHandle<CliEnd> {
    let what = args.join(" ");
    let mut child = Command::new(env!("CARGO_BIN_EXE_redguard"))
        .env_remove("REDIS_URL")
        .env_remove("RUST_LOG")
        .env_remove("REDGUARD_LOG")
        .arg("--url")
        .arg(bed.url())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::spawn(move || {
        let mut status = None;
        wait_until(CLI_BOUND, || {
            status = child.try_wait().unwrap();
            status.is_some()
        });
        let ended = Instant::now();
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let mut stderr = String::new();
        if let Some(mut err) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut err, &mut stderr);
        }
        CliEnd {
            what,
            code: status.and_then(|s| s.code()),
            stderr,
            ended,
        }
    })
}

/// A command for `exec` that runs until `file` exists (at most 60 s).
fn until_file(file: &std::path::Path) -> String {
    format!(
        "for i in $(seq 1 600); do [ -e '{}' ] && exit 0; sleep 0.1; done; exit 3",
        file.display()
    )
}

/// Whether `name` is held, asked of the cluster by `client`.
fn held(client: &Client, name: &str) -> bool {
    client.lock(name).is_locked().unwrap_or(false)
}

pub(super) fn operations_through_a_migration_window(bed: &RedisCluster) {
    let masters = bed.masters();
    let (from, to) = (masters[0], masters[1]);
    // Every name shares one hash tag, so one slot: the one that migrates.
    let tag = name_on(bed, from, "rs");
    let s = slot(tag.as_bytes());
    let name = |what: &str| format!("{{{tag}}}:{what}");
    let dir = std::env::temp_dir().join(unique_name("reshard"));
    std::fs::create_dir_all(&dir).unwrap();
    let (cli_done, fair_done) = (dir.join("cli-done"), dir.join("fair-done"));

    // The client's lease (30 s) bounds what a call waits for a moving slot.
    let lib = Client::builder()
        .url(&bed.url())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let released_in_window = lib.lock(name("lib")).lock().unwrap();
    let held_lock = lib.lock(name("held")).lock().unwrap();
    let _forced = lib.lock(name("force")).lock().unwrap();
    // A fair hold whose fixed lease ends inside the window: its release
    // (lock, queue and deadlines: split) cannot go through in time.
    let fair_lib = lib
        .fair_lock(name("fair-lib"))
        .with_lease(Duration::from_secs(4))
        .lock()
        .unwrap();
    // CLI holders whose CMD ends inside the window.
    let cli_held = cli(
        bed,
        &[
            "exec",
            &name("cli"),
            "--",
            "sh",
            "-c",
            &until_file(&cli_done),
        ],
    );
    let fair_cli = cli(
        bed,
        &[
            "exec",
            "--fair",
            "--lease",
            "8s",
            "--kill-grace",
            "1s",
            &name("fair-cli"),
            "--",
            "sh",
            "-c",
            &until_file(&fair_done),
        ],
    );
    assert!(
        wait_until(Duration::from_secs(10), || held(&lib, &name("cli"))
            && lib
                .fair_lock(name("fair-cli"))
                .inspect()
                .is_ok_and(|i| i.is_held())),
        "the CLI holders did not start"
    );
    // The waiter for the CLI's lock, registered before the window.
    let waiter = {
        let lock = lib.lock(name("cli"));
        std::thread::spawn(move || {
            let granted = lock.try_lock_for(Duration::from_secs(45));
            let at = Instant::now();
            granted.map(|g| {
                g.map(|g| {
                    let _ = g.unlock();
                    at
                })
            })
        })
    };
    assert!(wait_until(Duration::from_secs(5), || lib.stats().waiters == 1));

    bed.begin_migration(s, from, to);
    let opened = Instant::now();
    std::fs::write(&fair_done, b"").unwrap();
    std::fs::write(&cli_done, b"").unwrap();
    let runs = vec![
        cli(bed, &["status", &name("held")]),
        cli(bed, &["unlock", "--force", &name("force")]),
        cli(bed, &["exec", "-n", &name("held"), "--", "true"]),
        cli(bed, &["exec", "-n", "--fair", &name("fair"), "--", "true"]),
        cli(
            bed,
            &["exec", "-n", "--fenced", &name("fenced"), "--", "true"],
        ),
        cli(bed, &["exec", "-n", "--read", &name("read"), "--", "true"]),
        cli(
            bed,
            &[
                "exec",
                "-n",
                "--permits",
                "2",
                &name("permits"),
                "--",
                "true",
            ],
        ),
        cli(bed, &["once", &name("once"), "--", "true"]),
    ];
    let t = Instant::now();
    let lib_unlock = released_in_window.unlock();
    let lib_unlock_took = t.elapsed();
    let t = Instant::now();
    let fair_unlock = fair_lib.unlock();
    let fair_unlock_took = t.elapsed();

    // The window stays open, keys on the source, for WINDOW in all.
    crate::support::sleep(WINDOW.saturating_sub(opened.elapsed()));
    let moved = bed.move_keys(s, from, to);
    bed.end_migration(s, from, to);
    let closed = Instant::now();
    eprintln!(
        "reshard: slot {s} half-moved for {:?}, {moved} keys",
        closed - opened
    );

    let mut ends: Vec<CliEnd> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    let cli_held = cli_held.join().unwrap();
    let fair_cli = fair_cli.join().unwrap();
    let woken = waiter.join().unwrap();
    for end in ends.iter().chain([&cli_held, &fair_cli]) {
        eprintln!(
            "reshard: `{}` exit {:?} {:?} after the window opened: {}",
            end.what,
            end.code,
            end.ended.saturating_duration_since(opened),
            end.stderr.trim()
        );
    }

    // One key: served while the window is open.
    assert!(lib_unlock.is_ok(), "{lib_unlock:?}");
    assert!(
        lib_unlock_took < Duration::from_secs(2),
        "{lib_unlock_took:?}"
    );
    assert_eq!(cli_held.code, Some(0), "{}", cli_held.stderr);
    assert!(
        cli_held.ended < closed,
        "the CLI release waited for the window"
    );
    let woken = woken.unwrap().expect("the waiter was not woken");
    assert!(woken < closed, "the waiter was woken only after the window");
    let busy = ends.remove(2);
    assert_eq!(busy.code, Some(75), "{}", busy.stderr);
    assert!(busy.ended < closed, "`exec -n` on a held lock waited");
    assert!(
        !busy.stderr.contains("did not answer"),
        "Redis answered: {}",
        busy.stderr
    );
    // A release that could not go through before its lease ended is an
    // error, never a success.
    assert!(fair_unlock.is_err(), "{fair_unlock:?}");
    assert!(
        fair_unlock_took < Duration::from_secs(10),
        "{fair_unlock_took:?}"
    );
    assert_eq!(fair_cli.code, Some(74), "{}", fair_cli.stderr);
    assert!(fair_cli.stderr.contains("key"), "{}", fair_cli.stderr);
    // The others: answered right after the window closed at the latest.
    for end in &ends {
        assert_eq!(end.code, Some(0), "`{}`: {}", end.what, end.stderr);
        assert!(
            end.ended < closed + AFTER,
            "`{}` answered {:?} after the window closed",
            end.what,
            end.ended.saturating_duration_since(closed)
        );
    }
    assert!(!held(&lib, &name("force")), "unlock --force left the key");
    drop(held_lock);
    let _ = std::fs::remove_dir_all(&dir);
    // The slot goes back where it was, for the cases after this one.
    assert!(wait_until(Duration::from_secs(10), || bed
        .master_of_slot(s)
        == to));
    bed.migrate_slot(s, from);
}
