//! `redguard exec` stopped (`SIGSTOP`) and continued (`SIGCONT`) at a
//! random point of its run, against a healthy Redis: a socket read or
//! write with a timeout then fails with EINTR on Linux even without a
//! signal handler (signal(7)), and redguard must take that for what it is,
//! not for a broken connection.
use super::*;

/// A small xorshift generator: the delays need spread, not quality.
struct Spread(u64);

impl Spread {
    fn seeded(lane: u64) -> Spread {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Spread((nanos ^ (lane.wrapping_mul(0x9E37_79B9_7F4A_7C15))) | 1)
    }

    /// Uniform enough in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x % n
    }
}

/// 500 runs of `exec NAME -- sh -c 'exit S'` (S is 0 or 3), four lanes at
/// once on their own names, each run stopped 0-25 ms after its start for
/// 2-20 ms: every run exits with S, and no lock is left held. Before EINTR
/// was told from a broken connection, 26 of 500 runs exited 69
/// ("Interrupted system call (os error 4)", in the connection's set-up or
/// after an acquire undid its grant); an unlock sent twice made `exec`
/// exit 70 (`interrupted::an_interrupted_unlock_is_sent_once_and_succeeds`
/// shows that one deterministically).
#[test]
fn exec_stopped_and_continued_at_random_points_exits_with_cmds_status() {
    const LANES: u64 = 4;
    const RUNS_PER_LANE: u64 = 125;
    let server = RedisServer::start();
    let url = server.url();
    let started = Instant::now();
    let failures: Vec<String> = std::thread::scope(|scope| {
        let lanes: Vec<_> = (0..LANES)
            .map(|lane| {
                let url = url.clone();
                scope.spawn(move || {
                    let name = unique_name(&format!("stop-cont-{lane}"));
                    let mut spread = Spread::seeded(lane);
                    let mut failures = Vec::new();
                    for run in 0..RUNS_PER_LANE {
                        let status = if run % 2 == 0 { 0 } else { 3 };
                        let mut cmd = redguard(&url);
                        cmd.args(["exec", &name, "--", "sh", "-c", &format!("exit {status}")]);
                        let mut proc = Proc::spawn(cmd);
                        let before = ms(spread.below(26));
                        let stopped = ms(2 + spread.below(19));
                        crate::support::sleep(before);
                        proc.signal(libc::SIGSTOP);
                        crate::support::sleep(stopped);
                        proc.signal(libc::SIGCONT);
                        let out = proc.wait(RUN_TIMEOUT);
                        if out.code != Some(status) {
                            failures.push(format!(
                                "lane {lane} run {run} (stopped at {before:?} for {stopped:?}): \
                                 exit {:?}, want {status}; stderr: {}",
                                out.code,
                                out.stderr.trim()
                            ));
                        }
                    }
                    (name, failures)
                })
            })
            .collect();
        lanes
            .into_iter()
            .flat_map(|lane| {
                let (name, mut failures) = lane.join().unwrap();
                if server.exists(&name) {
                    failures.push(format!("{name} is still held after its lane"));
                }
                failures
            })
            .collect()
    });
    eprintln!(
        "{} stopped runs in {:.1?}",
        LANES * RUNS_PER_LANE,
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        LANES * RUNS_PER_LANE,
        failures.join("\n")
    );
}
