//! Socket calls interrupted by a signal (EINTR), made deterministic: a
//! no-op handler installed without `SA_RESTART` and a signal sent to the
//! thread that waits for a reply, at the moment the server has run the
//! command and its reply is still held back by a delaying proxy. On Linux
//! a stopped and continued process (`SIGSTOP`, `SIGCONT`) makes the same
//! calls fail the same way, with no handler at all (signal(7)).

use std::sync::Once;
use std::sync::mpsc;
use std::time::Duration;

use crate::support::{FaultProxy, Mode, RedisServer, ms, test_builder, unique_name, wait_until};

/// A real-time signal nothing else in the suite uses.
fn interrupting_signal() -> i32 {
    libc::SIGRTMIN() + 5
}

extern "C" fn ignore(_: libc::c_int) {}

/// Installs the no-op handler, without `SA_RESTART`: a blocking socket
/// call with a timeout fails with EINTR when the signal comes.
fn install_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: a handler that does nothing, installed with a zeroed
        // (then filled) sigaction for a signal no other code uses.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = ignore as extern "C" fn(libc::c_int) as usize;
            action.sa_flags = 0;
            libc::sigemptyset(&mut action.sa_mask);
            assert_eq!(
                libc::sigaction(interrupting_signal(), &action, std::ptr::null_mut()),
                0
            );
        }
    });
}

/// Interrupts whatever blocking call thread `thread` is in.
fn interrupt(thread: libc::pthread_t) {
    // SAFETY: the thread is alive (it waits for its reply, joined later).
    unsafe {
        assert_eq!(libc::pthread_kill(thread, interrupting_signal()), 0);
    }
}

/// Waits until the server has run any of `commands` more than `before`
/// times, then interrupts `thread`, whose reply the proxy still holds
/// back.
fn interrupt_after(server: &RedisServer, commands: &[&str], before: u64, thread: libc::pthread_t) {
    assert!(
        wait_until(Duration::from_secs(5), || server.command_calls(commands)
            > before),
        "{commands:?} never reached the server"
    );
    interrupt(thread);
}

/// An unlock whose reply is lost to EINTR ran on the server: it is not
/// sent again (a second unlock would find the lock gone and report a valid
/// hold as lost), and the unlock reports success. Before, the pool sent it
/// again on a fresh connection and the unlock failed with `NotHeld`.
#[test]
fn an_interrupted_unlock_is_sent_once_and_succeeds() {
    install_handler();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    // No holder record: its writes would be scripts too.
    let client = test_builder(&proxy.url())
        .watchdog_timeout(Duration::from_secs(30))
        .response_timeout(Duration::from_secs(3))
        .holder_record(false)
        .build()
        .unwrap();
    let name = unique_name("eintr-unlock");
    let (to_main, from_thread) = mpsc::channel();
    let (go, wait_go) = mpsc::channel::<()>();
    // Both scripts cached: the unlock is one EVALSHA.
    client.lock(&name).lock().unwrap().unlock().unwrap();
    let worker = {
        let (client, name) = (client.clone(), name.clone());
        std::thread::spawn(move || {
            let guard = client.lock(&name).lock().unwrap();
            // SAFETY: pthread_self has no preconditions.
            to_main.send(unsafe { libc::pthread_self() }).unwrap();
            wait_go.recv().unwrap();
            guard.unlock()
        })
    };
    let thread = from_thread.recv().unwrap();
    let scripts = || server.command_calls(&["eval", "evalsha"]);
    let before = scripts();
    proxy.set_mode(Mode::Delay(ms(400)));
    go.send(()).unwrap();
    // The unlock script ran; its reply is on its way through the proxy.
    assert!(wait_until(Duration::from_secs(5), || scripts() > before));
    interrupt(thread);
    let unlocked = worker.join().unwrap();
    proxy.set_mode(Mode::Pass);
    assert!(unlocked.is_ok(), "unlock: {unlocked:?}");
    // Settled at once, not handed to the watchdog to send again.
    assert_eq!(client.stats().pending_releases, 0, "a release retry runs");
    assert!(client.await_releases(Duration::from_secs(5)));
    assert!(!server.exists(&name), "released");
    // The read that settled the outcome is no script: one unlock ran.
    assert_eq!(scripts(), before + 1, "the unlock ran more than once");
}

/// A new connection whose set-up (`CLIENT SETNAME`) is interrupted starts
/// over, and an acquire whose reply is interrupted is given back and asked
/// again: the lock call succeeds and holds once. Before, the first failed
/// with "Interrupted system call (os error 4)", and the second undid its
/// grant and failed.
#[test]
fn interrupted_set_up_and_acquire_are_ridden_out() {
    install_handler();
    // Redis 6.2 counts `CLIENT` as one command, 7.0 and later each of its
    // subcommands (the harness's own connections send none).
    let set_up: &[&str] = &["client|setname", "client"];
    for (step, commands) in [("set-up", set_up), ("acquire", &["evalsha"])] {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port());
        let client = test_builder(&proxy.url())
            .watchdog_timeout(Duration::from_secs(30))
            .response_timeout(Duration::from_secs(3))
            .build()
            .unwrap();
        let name = unique_name("eintr-acquire");
        // The script is cached already: the acquire is one EVALSHA.
        let warm = test_builder(&server.url()).build().unwrap();
        drop(warm.lock(&name).lock().unwrap());
        warm.shutdown();
        let before = server.command_calls(commands);
        proxy.set_mode(Mode::Delay(ms(300)));
        let (to_main, from_thread) = mpsc::channel();
        let worker = {
            let (client, name) = (client.clone(), name.clone());
            std::thread::spawn(move || {
                // SAFETY: pthread_self has no preconditions.
                to_main.send(unsafe { libc::pthread_self() }).unwrap();
                let lock = client.lock(&name);
                let guard = lock.try_lock_for(Duration::from_secs(10));
                // Held once: a grant given back and asked again is not
                // counted twice.
                let count = guard.as_ref().ok().map(|_| lock.hold_count());
                drop(guard);
                count
            })
        };
        let thread = from_thread.recv().unwrap();
        interrupt_after(&server, commands, before, thread);
        let count = worker.join().unwrap();
        proxy.set_mode(Mode::Pass);
        assert!(
            matches!(count, Some(Ok(1))),
            "{step}: the lock call failed or held more than once: {count:?}"
        );
    }
}
