//! What the process and the server say about themselves: CPU time, memory,
//! command counts and connections.

use std::time::Duration;

/// CPU time (user + system) of the whole process, exited threads included,
/// in ns.
pub(crate) fn process_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ut: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
    let st: u64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    (ut + st) * 10_000_000 // USER_HZ = 100
}

/// CPU time of the calling thread, in ns.
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Resident set size of this process, in KiB.
pub(crate) fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user + system) of this process's threads whose name starts with
/// `prefix` (Linux truncates thread names to 15 bytes: "redguard-watchd").
pub(crate) fn thread_cpu(prefix: &str) -> Duration {
    let ticks_per_s = 100.0; // USER_HZ; sysconf(_SC_CLK_TCK) is 100 on Linux
    let mut ticks = 0u64;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for task in dir.flatten() {
            let path = task.path();
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            if !comm.trim_end().starts_with(prefix) {
                continue;
            }
            let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
            // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
            if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
                let f: Vec<&str> = rest.split_whitespace().collect();
                let ut: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
                let st: u64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
                ticks += ut + st;
            }
        }
    }
    Duration::from_secs_f64(ticks as f64 / ticks_per_s)
}

pub(crate) fn admin(url: &str) -> redis::Connection {
    let client = redis::Client::open(url).expect("redis url");
    let con = client
        .get_connection_with_timeout(Duration::from_secs(3))
        .expect("admin connection");
    con.set_read_timeout(Some(Duration::from_secs(10))).ok();
    con
}

/// `calls` of one command from `INFO commandstats` (e.g. "evalsha").
pub(crate) fn cmd_calls(con: &mut redis::Connection, cmd: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .unwrap_or_default();
    let key = format!("cmdstat_{cmd}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|r| r.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// (total client connections except `con` itself, pub/sub connections).
pub(crate) fn connections(con: &mut redis::Connection) -> (usize, usize) {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(con)
        .unwrap_or_default();
    let lines: Vec<&str> = list.lines().filter(|l| !l.trim().is_empty()).collect();
    let pubsub = lines
        .iter()
        .filter(|l| {
            l.split_whitespace()
                .any(|f| f.strip_prefix("flags=").is_some_and(|v| v.contains('P')))
        })
        .count();
    (lines.len().saturating_sub(1), pubsub)
}

/// Bytes the allocator has handed out and not had back (glibc's
/// `mallinfo2`: arena and mmapped chunks in use). Unlike the RSS, it does
/// not count freed memory the allocator keeps.
pub(crate) fn heap_in_use() -> u64 {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as u64
}
