//! CMD's whole process tree lives and dies with the lock: `kill -9` of
//! redguard or of its supervisor leaves no process of the tree behind
//! (within 1 s), the lock is held while any of them runs, and what CMD
//! leaves running when it ends is stopped before the lock is released.
//!
//! The tree is three levels deep and daemonises one process with
//! `setsid(1)`, which leaves CMD's process group and session. Every process
//! of it is found two ways: the pids the tree writes to a file, and every
//! process whose environment holds `REDGUARD_LOCK=<this test's lock>`
//! (/proc), which also catches processes the file does not name.
use super::*;

/// How long the tree may outlive the death of redguard or its supervisor.
const TREE_GONE_WITHIN: Duration = Duration::from_secs(1);

/// The scripts of the tree, in a scratch directory: `level1.sh` (CMD)
/// starts `level2.sh`, which starts `sleep` (level 3) and `daemon.sh` in a
/// session of its own; `daemon.sh` starts a `sleep` and exits, so that
/// sleep is an orphan outside CMD's process group. Each writes
/// `<role> <pid>` lines to the file given as `$1`.
struct Tree {
    dir: tempfile::TempDir,
}

/// The lines each tree writes: L1, L2, L3 and the daemon's sleep.
const TREE_PIDS: usize = 4;

impl Tree {
    fn write() -> Tree {
        let dir = scratch();
        let scripts = [
            (
                "level1.sh",
                "echo \"L1 $$\" >> \"$1\"\nsh \"$(dirname \"$0\")/level2.sh\" \"$1\" &\nwait\n",
            ),
            (
                "level2.sh",
                "echo \"L2 $$\" >> \"$1\"\nsleep 60 &\necho \"L3 $!\" >> \"$1\"\n\
                 setsid sh \"$(dirname \"$0\")/daemon.sh\" \"$1\" &\nwait\n",
            ),
            ("daemon.sh", "sleep 60 &\necho \"D $!\" >> \"$1\"\n"),
        ];
        for (file, text) in scripts {
            fs::write(dir.path().join(file), text).unwrap();
        }
        Tree { dir }
    }

    /// `sh level1.sh PIDFILE`.
    fn command(&self) -> [String; 3] {
        let path = |f: &str| path_str(&self.dir.path().join(f)).to_owned();
        ["sh".to_owned(), path("level1.sh"), path("pids")]
    }

    /// The tree's recorded pids, once all of them are written (at most 5 s).
    fn pids(&self) -> Vec<i32> {
        let file = self.dir.path().join("pids");
        let mut pids = Vec::new();
        let complete = wait_until(Duration::from_secs(5), || {
            let text = fs::read_to_string(&file).unwrap_or_default();
            pids = text
                .lines()
                .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
                .collect();
            pids.len() == TREE_PIDS
        });
        assert!(complete, "the tree wrote only {pids:?}");
        pids
    }
}

/// Kills, on drop, what is left of a tree: processes whose environment
/// names the test's lock (so that a reused pid is never hit).
struct KillTree(String);

impl Drop for KillTree {
    fn drop(&mut self) {
        for pid in marked(&self.0) {
            // SAFETY: kill(2); the pid was just seen carrying the marker.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Live processes whose environment holds `REDGUARD_LOCK=<name>`.
fn marked(name: &str) -> Vec<i32> {
    let needle = format!("REDGUARD_LOCK={name}");
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == needle.as_bytes()))
                && alive(pid)
        })
        .collect()
}

/// The tree's processes still alive: recorded pids and marked processes.
fn living(name: &str, recorded: &[i32]) -> Vec<i32> {
    let mut pids: Vec<i32> = recorded.iter().copied().filter(|&p| alive(p)).collect();
    for pid in marked(name) {
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }
    pids
}

/// Child processes of `parent` (from /proc).
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .and_then(|rest| rest.split_whitespace().nth(1))
                    .and_then(|ppid| ppid.parse::<i32>().ok())
                    == Some(parent)
            })
        })
        .collect()
}

/// Watches the tree from `since` until none of it is left (at most 3 s)
/// and returns how long that took. Asserts on every look that the lock's
/// key exists while any process of the tree lives: the key is read first,
/// so a key seen gone with a process seen alive afterwards means it was
/// released while that process lived.
fn watch_tree_die(server: &RedisServer, name: &str, recorded: &[i32], since: Instant) -> Duration {
    loop {
        let held = server.exists(name);
        let left = living(name, recorded);
        let elapsed = since.elapsed();
        if left.is_empty() {
            return elapsed;
        }
        assert!(
            held,
            "lock {name} released while the tree's {left:?} ran ({elapsed:?} after the kill)"
        );
        assert!(
            elapsed < Duration::from_secs(3),
            "the tree's {left:?} still ran {elapsed:?} after the kill"
        );
        crate::support::sleep(ms(2));
    }
}

#[test]
fn sigkill_of_redguard_kills_the_whole_tree_and_the_lock_stays_held_meanwhile() {
    let server = RedisServer::start();
    let name = unique_name("tree-kill-redguard");
    let _cleanup = KillTree(name.clone());
    let tree = Tree::write();
    // 3 s lease: it outlasts the tree's death by far, so the key can only
    // go early if something released it.
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", &name, "--"]).args(tree.command());
    let mut p = Proc::spawn(cmd);
    let recorded = tree.pids();
    let running = living(&name, &recorded);
    assert!(running.len() >= TREE_PIDS, "{running:?}");
    // The supervisor's own setting is not passed on to CMD.
    let cmd_env = fs::read(format!("/proc/{}/environ", recorded[0])).unwrap();
    assert!(
        !cmd_env
            .split(|&b| b == 0)
            .any(|var| var.starts_with(b"REDGUARD_SUPERVISOR=")),
        "CMD inherited the supervisor's setting"
    );
    assert!(server.exists(&name));

    p.signal(libc::SIGKILL);
    let killed = Instant::now();
    let took = watch_tree_die(&server, &name, &recorded, killed);
    eprintln!("tree gone {took:?} after kill -9 of redguard");
    assert!(
        took <= TREE_GONE_WITHIN,
        "the tree outlived redguard by {took:?}"
    );
    // Nobody released the lock: it runs out with its lease.
    assert!(
        server.exists(&name),
        "the lock of a killed redguard was released"
    );
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, None, "{out:?}");
}

#[test]
fn sigkill_of_the_supervisor_kills_the_whole_tree_before_the_lock_is_released() {
    let server = RedisServer::start();
    let name = unique_name("tree-kill-supervisor");
    let _cleanup = KillTree(name.clone());
    let tree = Tree::write();
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", &name, "--"]).args(tree.command());
    let mut p = Proc::spawn(cmd);
    let recorded = tree.pids();
    let children = children_of(p.pid());
    let [supervisor] = children[..] else {
        panic!("redguard has children {children:?}, not one supervisor");
    };

    // SAFETY: kill(2) on redguard's child, seen in /proc just now; redguard
    // reaps it only after it died.
    unsafe {
        libc::kill(supervisor, libc::SIGKILL);
    }
    let killed = Instant::now();
    let took = watch_tree_die(&server, &name, &recorded, killed);
    eprintln!("tree gone {took:?} after kill -9 of the supervisor");
    assert!(
        took <= TREE_GONE_WITHIN,
        "the tree outlived its supervisor by {took:?}"
    );
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(128 + libc::SIGKILL), "{out:?}");
    assert!(out.stderr.contains("supervisor"), "{}", out.stderr);
    assert!(!server.exists(&name), "released once the tree was gone");
}

#[test]
fn what_cmd_leaves_running_is_stopped_before_the_lock_is_released() {
    let server = RedisServer::start();
    let name = unique_name("tree-leftover");
    let _cleanup = KillTree(name.clone());
    let dir = scratch();
    let pids = dir.path().join("pids");
    // One leftover ends on SIGTERM; the other ignores it and needs the
    // SIGKILL that follows after --kill-grace. CMD exits once both are
    // set up (bounded: 5 s).
    let body = format!(
        "sleep 60 & echo $! >> {pids}; \
         sh -c 'trap \"\" TERM; echo $$ >> {pids}; while :; do sleep 0.05; done' & \
         i=0; while [ \"$(wc -l < {pids})\" -lt 2 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; \
         exit 3",
        pids = path_str(&pids)
    );
    let mut cmd = redguard(&server.url());
    cmd.args([
        "exec",
        "--kill-grace",
        "500ms",
        &name,
        "--",
        "sh",
        "-c",
        &body,
    ]);
    let mut p = Proc::spawn(cmd);
    let mut recorded = Vec::new();
    assert!(wait_until(Duration::from_secs(5), || {
        recorded = fs::read_to_string(&pids)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        recorded.len() == 2
    }));
    let start = Instant::now();
    // SIGTERM first: the leftover that obeys it goes well within the grace.
    let obeyed = wait_until(ms(400), || !alive(recorded[0]));
    assert!(obeyed, "the leftover sleep got no SIGTERM");
    // The lock is held until both are gone.
    let took = watch_tree_die(&server, &name, &recorded, start);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(3), "CMD's own status: {out:?}");
    assert!(!server.exists(&name), "released after CMD's leftovers");
    assert!(
        took >= ms(350),
        "the TERM-ignoring leftover went before the grace: {took:?}"
    );
}

/// A pseudo-terminal's master side; its slave's path is [`Pty::slave`].
struct Pty {
    master: fs::File,
    slave: std::ffi::CString,
}

impl Pty {
    fn open() -> Pty {
        use std::os::fd::FromRawFd;
        // SAFETY: posix_openpt/grantpt/unlockpt/ptsname_r on a descriptor
        // this function owns; ptsname_r writes at most `buf.len()` bytes.
        unsafe {
            let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
            assert!(fd >= 0, "posix_openpt");
            let master = fs::File::from_raw_fd(fd);
            assert_eq!(libc::grantpt(fd), 0);
            assert_eq!(libc::unlockpt(fd), 0);
            let mut buf = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(fd, buf.as_mut_ptr(), buf.len()), 0);
            let slave = std::ffi::CStr::from_ptr(buf.as_ptr()).to_owned();
            Pty { master, slave }
        }
    }

    /// Makes `cmd` a session leader with the slave as its controlling
    /// terminal and stdin: redguard then runs in the terminal's foreground
    /// process group, as when started from an interactive shell.
    fn attach(&self, cmd: &mut Command) {
        use std::os::unix::process::CommandExt;
        let slave = self.slave.clone();
        // SAFETY: the closure runs between fork and exec and calls only
        // async-signal-safe functions (setsid, open, dup2, close).
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Without O_NOCTTY: a session leader's first terminal
                // becomes its controlling terminal.
                let fd = libc::open(slave.as_ptr(), libc::O_RDWR);
                if fd < 0 || libc::dup2(fd, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
                Ok(())
            });
        }
    }
}

/// Interactive use: redguard, its supervisor and CMD share the terminal's
/// foreground process group. Ctrl-C from the terminal reaches CMD once
/// (straight from the kernel; nobody passes it on again), and a SIGTERM
/// sent to redguard reaches CMD through the supervisor.
#[test]
fn in_a_terminal_signals_reach_cmd_through_the_supervisor() {
    use std::io::Write;
    let server = RedisServer::start();
    let name = unique_name("tree-tty");
    let _cleanup = KillTree(name.clone());
    let dir = scratch();
    let (ready, log) = (dir.path().join("ready"), dir.path().join("log"));
    let body = format!(
        "trap 'echo int >> {log}' INT; trap 'echo term >> {log}; exit 6' TERM; \
         echo $$ > {ready}; i=0; while [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; exit 1",
        log = path_str(&log),
        ready = path_str(&ready)
    );
    let pty = Pty::open();
    let mut cmd = redguard(&server.url());
    cmd.args(["exec", &name, "--", "sh", "-c", &body]);
    pty.attach(&mut cmd);
    let mut p = Proc::spawn(cmd);
    let cmd_pid = read_pid(&ready);
    // SAFETY: getpgid(2) only reads.
    let (cmd_group, redguard_group) = unsafe { (libc::getpgid(cmd_pid), libc::getpgid(p.pid())) };
    assert_eq!(
        cmd_group, redguard_group,
        "CMD stays in the terminal's group"
    );

    (&pty.master).write_all(b"\x03").unwrap();
    let lines = || fs::read_to_string(&log).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(5), || lines() == "int\n"),
        "after Ctrl-C: {:?}",
        lines()
    );
    p.signal(libc::SIGTERM);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(
        out.code,
        Some(6),
        "CMD's status after its TERM trap: {out:?}"
    );
    assert_eq!(lines(), "int\nterm\n", "each signal reached CMD once");
    assert!(!server.exists(&name));
}

/// Watches a running tree until the lock's key is gone (at most `timeout`):
/// at every look the key is read first, then the tree, so a key seen gone
/// with a process of the tree seen alive afterwards is an overlap. Returns
/// how long before the key was seen gone the tree was last seen alive
/// (`None`: the key went with no process of the tree seen since).
fn watch_key_end(
    server: &RedisServer,
    name: &str,
    alive_now: &dyn Fn() -> Vec<i32>,
    timeout: Duration,
) -> Duration {
    let start = Instant::now();
    let mut last_alive = start;
    loop {
        let held = server.exists(name);
        let left = alive_now();
        if !held {
            assert!(
                left.is_empty(),
                "lock {name} expired while the old tree's {left:?} ran"
            );
            return last_alive.elapsed();
        }
        if !left.is_empty() {
            last_alive = Instant::now();
        }
        assert!(
            start.elapsed() < timeout,
            "lock {name} still held after {timeout:?}"
        );
        crate::support::sleep(ms(5));
    }
}

/// Part of issue 32: `kill -STOP` of redguard (a hung or starved process)
/// stops its renewals. The supervisor, which keeps the lease's deadline on
/// its own, ends the whole tree (the setsid daemon included) before the
/// key expires; a waiter gets the lock only then; redguard, continued,
/// exits 70 and says why.
#[test]
fn sigstop_of_redguard_ends_the_whole_tree_before_the_lease_ends() {
    let server = RedisServer::start();
    let name = unique_name("tree-stopped");
    let _cleanup = KillTree(name.clone());
    let tree = Tree::write();
    // A 2 s lease (default kill grace: 500 ms), renewed every 667 ms.
    let mut cmd = redguard_timed(&server.url(), "2s", "600ms");
    cmd.args(["exec", &name, "--"]).args(tree.command());
    let mut p = Proc::spawn(cmd);
    let recorded = tree.pids();
    p.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    let gap = watch_key_end(
        &server,
        &name,
        &|| living(&name, &recorded),
        Duration::from_secs(6),
    );
    let key_gone = stopped.elapsed();
    eprintln!("stopped redguard: tree gone {gap:?} before the key ({key_gone:?} after the stop)");
    let waiter = test_builder(&server.url())
        .holder_record(false)
        .build()
        .unwrap();
    let guard = waiter
        .lock(&name)
        .try_lock_for(Duration::from_secs(5))
        .unwrap()
        .expect("the lock frees itself when the lease ends");
    let left = living(&name, &recorded);
    assert!(
        left.is_empty(),
        "the waiter holds the lock while {left:?} run"
    );
    drop(guard);

    p.signal(libc::SIGCONT);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("stopped or starved"), "{}", out.stderr);
}

/// Part of issue 32: a blackholed connection at a 2 s lease, with a CMD
/// that ignores SIGTERM, 50 times (5 at a time, each on its own lock and
/// proxy): the SIGKILL that follows the kill grace lands before the key
/// can expire, every time. Redguard exits 70.
#[test]
fn blackholed_renewals_end_a_sigterm_ignoring_cmd_before_the_lease_ends_50_times() {
    const LANES: usize = 5;
    const ROUNDS: usize = 10;
    let server = RedisServer::start();
    let gaps = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for lane in 0..LANES {
            let (server, gaps) = (&server, &gaps);
            s.spawn(move || {
                for round in 0..ROUNDS {
                    let gap = blackholed_run(server, &format!("bh{lane}-{round}"));
                    gaps.lock().unwrap().push(gap);
                }
            });
        }
    });
    let mut gaps = gaps.into_inner().unwrap();
    gaps.sort();
    assert_eq!(gaps.len(), LANES * ROUNDS);
    eprintln!(
        "blackholed: CMD gone before the key by {:?} (least), {:?} (median)",
        gaps[0],
        gaps[gaps.len() / 2]
    );
}

/// One run of the blackhole case; how long before the key's end CMD was
/// last seen alive.
fn blackholed_run(server: &RedisServer, prefix: &str) -> Duration {
    let name = unique_name(prefix);
    let _cleanup = KillTree(name.clone());
    let proxy = crate::support::FaultProxy::start(server.port());
    let dir = scratch();
    let pidfile = dir.path().join("pid");
    let body = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.2; done",
        path_str(&pidfile)
    );
    let mut cmd = redguard_timed(&proxy.url(), "2s", "600ms");
    cmd.args([
        "exec",
        "--kill-grace",
        "300ms",
        &name,
        "--",
        "sh",
        "-c",
        &body,
    ]);
    let mut p = Proc::spawn(cmd);
    let cmd_pid = read_pid(&pidfile);
    proxy.set_mode(crate::support::Mode::Blackhole);
    // The shell is what outlives SIGTERM; its short-lived sleeps are
    // checked too, once, when the key is gone.
    let gap = watch_key_end(
        server,
        &name,
        &|| {
            if alive(cmd_pid) {
                vec![cmd_pid]
            } else {
                Vec::new()
            }
        },
        Duration::from_secs(6),
    );
    let left = marked(&name);
    assert!(left.is_empty(), "{name} expired while {left:?} ran");
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(70), "{out:?}");
    gap
}

/// The same for `once` and `exec --permits`: a stopped redguard's CMD is
/// gone before its run-once key or its permit can expire, and nobody runs
/// (or gets the permit) while it lives.
#[test]
fn sigstop_of_redguard_ends_cmd_before_the_lease_ends_for_once_and_permits() {
    let server = RedisServer::start();
    let dir = scratch();
    let body = |file: &Path| {
        format!(
            "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
            path_str(file)
        )
    };

    // once: the run-once key is held as a lock until the run ends.
    let key = unique_name("once-stopped");
    let _cleanup = KillTree(key.clone());
    let pidfile = dir.path().join("once");
    let mut cmd = redguard_timed(&server.url(), "2s", "600ms");
    cmd.args([
        "once",
        "--ttl",
        "1h",
        &key,
        "--",
        "sh",
        "-c",
        &body(&pidfile),
    ]);
    let mut p = Proc::spawn(cmd);
    let cmd_pid = read_pid(&pidfile);
    p.signal(libc::SIGSTOP);
    let gap = watch_key_end(
        &server,
        &key,
        &|| {
            if alive(cmd_pid) {
                vec![cmd_pid]
            } else {
                Vec::new()
            }
        },
        Duration::from_secs(6),
    );
    eprintln!("stopped once: CMD gone {gap:?} before the key");
    let left = marked_once(&key);
    assert!(left.is_empty(), "{key} expired while {left:?} ran");
    p.signal(libc::SIGCONT);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(70), "{out:?}");

    // --permits: a waiter on the one permit gets it only once CMD is gone.
    let name = unique_name("permit-stopped");
    let _cleanup = KillTree(name.clone());
    let pidfile = dir.path().join("permit");
    let mut cmd = redguard_timed(&server.url(), "2s", "600ms");
    cmd.args(["exec", "--permits", "1", "--kill-grace", "300ms", &name])
        .args(["--", "sh", "-c", &body(&pidfile)]);
    let mut p = Proc::spawn(cmd);
    let cmd_pid = read_pid(&pidfile);
    p.signal(libc::SIGSTOP);
    let waiter = test_builder(&server.url())
        .holder_record(false)
        .build()
        .unwrap();
    let semaphore = waiter.expiring_semaphore(&name);
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut last_alive = Instant::now();
    let permit = loop {
        // The permit is asked for first, CMD looked at after: a permit
        // granted while CMD lived shows CMD alive.
        if let Some(permit) = semaphore.try_acquire().unwrap() {
            break permit;
        }
        if alive(cmd_pid) {
            last_alive = Instant::now();
        }
        assert!(Instant::now() < deadline, "the permit never came back");
        crate::support::sleep(ms(2));
    };
    let left = marked(&name);
    assert!(
        left.is_empty(),
        "the permit went to a waiter while {left:?} ran"
    );
    eprintln!(
        "stopped permit holder: CMD gone {:?} before the permit came back",
        last_alive.elapsed()
    );
    drop(permit);
    p.signal(libc::SIGCONT);
    let out = p.wait(RUN_TIMEOUT);
    assert_eq!(out.code, Some(70), "{out:?}");
}

/// Live processes of a `once` run of `key` (their environment names it).
fn marked_once(key: &str) -> Vec<i32> {
    let needle = format!("REDGUARD_ONCE_KEY={key}");
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == needle.as_bytes()))
                && alive(pid)
        })
        .collect()
}
