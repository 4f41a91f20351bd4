//! Command-line arguments (clap derive), their help, and the parsing
//! helpers.

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgAction, ArgGroup, Args, Parser, Subcommand, ValueEnum};

use crate::durations;
use crate::fail::{Failure, code};
use crate::help::{EXEC_EXIT_HELP, LOGGING_HELP, STATUS_HELP};

/// Run commands under a distributed lock on Redis (Redisson-compatible).
///
/// The connection comes from --url, else $REDIS_URL, else
/// redis://127.0.0.1:6379/. Durations are written 500ms, 30s, 2m, 1h 30m.
#[derive(Debug, Parser)]
#[command(
    name = "redguard",
    version,
    max_term_width = 100,
    after_help = LOGGING_HELP
)]
pub(crate) struct Cli {
    /// Log diagnostics on stderr: -v info, -vv debug, -vvv trace (see
    /// Logging in `redguard --help`).
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub(crate) verbose: u8,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// How to reach Redis and the timings of the client.
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection")]
pub(crate) struct ConnArgs {
    /// Redis URL: redis://[user:password@]host[:port][/db],
    /// redis+unix:///path, a Sentinel deployment
    /// redis+sentinel://[[user]:password@]host:port[,host:port...]/MASTER[?db=N]
    /// or a Cluster redis+cluster://[[user]:password@]host:port[,host:port...]
    /// (rediss://, rediss+sentinel:// and rediss+cluster:// for TLS; the
    /// password is the data nodes'). Prefer $REDIS_URL for passwords:
    /// arguments are visible to other users in the process list.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "REDIS_URL",
        hide_env_values = true
    )]
    pub(crate) url: Option<String>,

    /// Password of the sentinels of a redis+sentinel:// URL (their
    /// requirepass), separate from the data nodes' password in the URL.
    /// Prefer $REDIS_SENTINEL_PASSWORD.
    #[arg(
        long,
        global = true,
        value_name = "PASSWORD",
        env = "REDIS_SENTINEL_PASSWORD",
        hide_env_values = true
    )]
    pub(crate) sentinel_password: Option<String>,

    /// File whose first line is the data nodes' password, used when the
    /// URL has none ($REDISCLI_AUTH, as redis-cli reads it, comes after):
    /// a password that appears in no URL, argument or log.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "REDGUARD_PASSWORD_FILE"
    )]
    pub(crate) password_file: Option<std::path::PathBuf>,

    /// Replicas that must acknowledge each grant, lease renewal and fencing
    /// token (Redis WAIT) [default: 0]. A grant too few acknowledge is
    /// undone and reported (exit 69), so that a failover cannot hand the
    /// lock to someone else.
    #[arg(
        long,
        global = true,
        value_name = "N",
        env = "REDGUARD_MIN_REPLICA_ACKS"
    )]
    pub(crate) min_replica_acks: Option<u32>,

    /// Longest wait for those acknowledgements [default: 1s].
    #[arg(
        long,
        global = true,
        value_name = "DUR",
        value_parser = durations::timeout,
        allow_hyphen_values = true
    )]
    pub(crate) replica_ack_timeout: Option<Duration>,

    /// Longest wait for one Redis reply [default: 3s].
    #[arg(
        long,
        global = true,
        value_name = "DUR",
        value_parser = durations::timeout,
        allow_hyphen_values = true
    )]
    pub(crate) response_timeout: Option<Duration>,

    /// The watchdog's lease: how long a lock, permit or `once` claim
    /// outlives a redguard that stopped renewing it (killed, frozen, cut
    /// off), renewed every third of it while CMD runs [default: 30s].
    /// Shorter frees a dead holder's lock sooner but needs a Redis that
    /// answers within a third of it; it also shortens the response timeout
    /// to a third of it, unless that is given. Not the fixed `--lease` of
    /// `exec`, which is never renewed.
    #[arg(
        long,
        global = true,
        value_name = "DUR",
        value_parser = durations::lease,
        allow_hyphen_values = true,
        env = "REDGUARD_WATCHDOG_TIMEOUT"
    )]
    pub(crate) watchdog_timeout: Option<Duration>,

    /// PEM file of the CA that signed the server's certificate, for
    /// rediss:// URLs (instead of the system's roots).
    #[arg(long, global = true, value_name = "FILE", env = "REDGUARD_TLS_CA")]
    pub(crate) tls_ca: Option<std::path::PathBuf>,

    /// PEM file of a client certificate, for servers that require one
    /// (Redis's default with TLS). Needs --tls-key.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "REDGUARD_TLS_CERT",
        requires = "tls_key"
    )]
    pub(crate) tls_cert: Option<std::path::PathBuf>,

    /// PEM file of the client certificate's private key.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "REDGUARD_TLS_KEY",
        requires = "tls_cert"
    )]
    pub(crate) tls_key: Option<std::path::PathBuf>,

    /// On a Redis Cluster, when unlocks, releases and latches reaching
    /// zero also send a classic PUBLISH besides SPUBLISH [default: auto]:
    /// auto when the slot's master counts a classic subscriber; always for
    /// Java (Redisson) waiters without sharded pub/sub, which may subscribe
    /// on a replica. No effect outside a Cluster.
    #[arg(
        long,
        global = true,
        value_name = "WHEN",
        value_enum,
        env = "REDGUARD_CLASSIC_PUBLISH"
    )]
    pub(crate) classic_publish: Option<ClassicPublishArg>,

    /// Prefix of the holder record keys [default: redguard:client:]: where
    /// this run keeps its record, and the only place `status`, `list`,
    /// `who` and `exec -n` look for records. Tenants sharing a server
    /// each give their own inside their ACL key pattern (e.g.
    /// tenantA:redguard:client: for ~tenantA:*). No glob character, `{` or
    /// `}`; at most 256 bytes.
    #[arg(
        long,
        global = true,
        value_name = "PREFIX",
        env = "REDGUARD_RECORD_PREFIX"
    )]
    pub(crate) record_prefix: Option<String>,
}

/// `--classic-publish`: [`redguard::ClassicPublish`] on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ClassicPublishArg {
    /// Only when the slot's master counts a classic subscriber.
    Auto,
    /// On every wake-up.
    Always,
}

impl From<ClassicPublishArg> for redguard::ClassicPublish {
    fn from(arg: ClassicPublishArg) -> redguard::ClassicPublish {
        match arg {
            ClassicPublishArg::Auto => redguard::ClassicPublish::Auto,
            ClassicPublishArg::Always => redguard::ClassicPublish::Always,
        }
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Take the lock, run CMD while holding it, release it when CMD ends.
    ///
    /// At most one CMD holds NAME at a time, across every host: runs never
    /// overlap. Another run may start as soon as this one ends; for one
    /// run per period, use `redguard once`. CMD's environment carries
    /// REDGUARD_LOCK and REDGUARD_HOLDER.
    #[command(after_help = EXEC_EXIT_HELP)]
    Exec(ExecArgs),
    /// Show whether a lock is held, by whom, for how long and of which
    /// kind; also semaphores, latches and `once` records.
    #[command(after_help = STATUS_HELP)]
    Status(StatusArgs),
    /// Delete a lock, semaphore, latch or `once` record whoever holds it,
    /// and wake its waiters.
    ///
    /// Exits 0 (also when there was nothing to delete); 65 when NAME holds
    /// something else than --kind says (left untouched).
    Unlock(UnlockArgs),
    /// Run CMD once per KEY across every host, for --ttl: the first caller
    /// runs it; later callers print who ran it and when, and exit with its
    /// recorded status (0) without running it.
    ///
    /// A caller that finds CMD running exits 75, or with --wait waits for
    /// the outcome and exits like the runner did. A failing CMD is not
    /// recorded (the next caller runs it again) unless --record-failure.
    /// `--status KEY` shows the record; `--forget KEY` deletes it. CMD's
    /// environment carries REDGUARD_ONCE_KEY, REDGUARD_HOLDER and
    /// REDGUARD_FENCING_TOKEN.
    Once(OnceArgs),
    /// Set, count down or wait for a count-down latch (Redisson's
    /// RCountDownLatch): let a pipeline wait for N workers.
    ///
    /// A latch exists from --count until it opens: at zero it is deleted
    /// (Redisson's layout). So --count-down and --wait on a latch that does
    /// not exist fail with 65, as a latch never set and one already open
    /// look the same: a waiter that started before the setter would
    /// otherwise pass straight through. --allow-missing takes a missing
    /// latch as open.
    ///
    /// Exits 0 on success; 65 for a missing latch (without
    /// --allow-missing); --conflict-exit-code (75) when --wait runs out
    /// before the latch opens, or --count finds the latch set already.
    Latch(LatchArgs),
    /// List what matches PATTERN (default `*`), each kind with its columns:
    /// locks (holders with host and pid, held for, lease left), semaphores
    /// (available permits), expiring semaphores (each permit with its
    /// holder and lease left), latches (count), `once` keys (state,
    /// runner, age), and for each its waiters.
    ///
    /// Uses SCAN (1,000 keys per call, hashes then strings) on every
    /// master, never KEYS, with the reads of each page pipelined, plus one
    /// SCAN of the holder records for the waiters. A bare integer nothing
    /// names as a semaphore or latch (an application's counter) is only
    /// counted; --kind counter lists them. Other keys are skipped; --all
    /// lists them as "not a lock". Exits 0.
    #[command(after_help = crate::help::LIST_HELP)]
    List(ListArgs),
    /// Show everything one client holds, from its holder record: host,
    /// pid, program, and each lock with how long it has been held.
    ///
    /// CLIENT is a client id, the first part of a holder id
    /// (`<client id>:<thread>`). Exits 0 when a record was found, 1 when
    /// none (not a redguard client, records off, or gone for longer than
    /// its lease).
    Who(WhoArgs),
}

/// `--record-command`: [`redguard::RecordCommand`] on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum RecordCommandArg {
    /// CMD's whole command line, secrets included.
    Full,
    /// The command line with URL passwords and the values of password,
    /// token, secret and key flags and variables masked (***).
    Masked,
    /// CMD's name only, without its arguments.
    Name,
    /// Nothing of CMD: `redguard exec NAME` (`redguard once KEY`).
    None,
}

impl From<RecordCommandArg> for redguard::RecordCommand {
    fn from(arg: RecordCommandArg) -> redguard::RecordCommand {
        match arg {
            RecordCommandArg::Full => redguard::RecordCommand::Full,
            RecordCommandArg::Masked => redguard::RecordCommand::Masked,
            RecordCommandArg::Name => redguard::RecordCommand::Name,
            RecordCommandArg::None => redguard::RecordCommand::None,
        }
    }
}

/// What to do when the lease is lost while CMD runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnLost {
    /// Send SIGTERM to CMD, SIGKILL after --kill-grace, exit 70.
    Kill,
    /// Print a warning and let CMD run to its end.
    Warn,
}

#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// The lock name (the Redis key of the lock).
    #[arg(value_name = "NAME")]
    pub(crate) name: OsString,

    /// Wait at most this long for the lock [default: forever].
    #[arg(
        short,
        long,
        value_name = "DUR",
        value_parser = durations::any,
        allow_hyphen_values = true
    )]
    pub(crate) wait: Option<Duration>,

    /// Do not wait: fail at once when the lock is held (same as --wait 0s).
    #[arg(short, long, conflicts_with = "wait")]
    pub(crate) no_wait: bool,

    /// Hold the lock with this fixed lease, never renewed, instead of the
    /// watchdog's (--watchdog-timeout); CMD must end within it (past it
    /// the lease counts as lost).
    #[arg(
        short,
        long,
        value_name = "DUR",
        value_parser = durations::lease,
        allow_hyphen_values = true
    )]
    pub(crate) lease: Option<Duration>,

    /// Take the fair lock of NAME (Redisson's RFairLock): waiters are served
    /// in arrival order, across hosts.
    #[arg(long, conflicts_with = "fenced")]
    pub(crate) fair: bool,

    /// Take the read side of the read-write lock NAME (Redisson's
    /// RReadWriteLock): any number of --read commands run at once, none
    /// while a --write one runs.
    #[arg(long, conflicts_with_all = ["fair", "fenced", "write", "permits"])]
    pub(crate) read: bool,

    /// Take the write side of the read-write lock NAME: exclusive, like the
    /// default lock, and excluding --read commands of NAME.
    #[arg(long, conflicts_with_all = ["fair", "fenced", "permits"])]
    pub(crate) write: bool,

    /// Hold one of N expiring permits of the semaphore NAME (Redisson's
    /// RPermitExpirableSemaphore): at most N commands run at once across
    /// all hosts. The first caller sets the count; another count stored at
    /// NAME is an error. A dead host's permit comes back within the lease.
    /// CMD's environment carries REDGUARD_PERMIT.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(i32::MAX)),
        conflicts_with_all = ["fair", "fenced"]
    )]
    pub(crate) permits: Option<u32>,

    /// Take the fenced lock of NAME (Redisson's RFencedLock): CMD gets a
    /// fencing token, larger than every earlier one, in
    /// REDGUARD_FENCING_TOKEN, to stamp its writes with.
    #[arg(long)]
    pub(crate) fenced: bool,

    /// Exit status when the lock cannot be had in time.
    #[arg(short = 'E', long, value_name = "N", default_value_t = code::TEMPFAIL)]
    pub(crate) conflict_exit_code: u8,

    /// What to do when the lease is lost while CMD runs.
    #[arg(long, value_enum, value_name = "ACTION", default_value_t = OnLost::Kill)]
    pub(crate) on_lost: OnLost,

    /// With --on-lost kill: time between SIGTERM and SIGKILL [default:
    /// what is left of the lease's last third after 250ms and 1% + 2ms,
    /// at most 10s]. When renewals stop, SIGTERM goes this long plus 250ms
    /// before the lease ends, so it must fit in half the lease.
    #[arg(
        long,
        value_name = "DUR",
        value_parser = durations::any,
        allow_hyphen_values = true
    )]
    pub(crate) kill_grace: Option<Duration>,

    /// Stop CMD once it has run this long: SIGTERM, then SIGKILL after
    /// the kill grace; redguard then exits 124, as timeout(1) does.
    /// Without it, or with 0, CMD runs as long as it takes.
    #[arg(
        long,
        value_name = "DUR",
        value_parser = durations::any,
        allow_hyphen_values = true
    )]
    pub(crate) timeout: Option<Duration>,

    /// No spinner while waiting and no message when the lock is busy (the
    /// exit status says it); errors are still printed.
    #[arg(short, long)]
    pub(crate) quiet: bool,

    /// What the holder record (seen by `status`, `list`, `who` and anyone
    /// who can read the lock's keys) keeps of CMD's command line: the
    /// whole line, the line with passwords, tokens and keys masked (the
    /// default), CMD's name only, or nothing of CMD.
    #[arg(long, value_enum, value_name = "HOW", default_value_t = RecordCommandArg::Masked)]
    pub(crate) record_command: RecordCommandArg,

    /// The command to run, with its arguments (after `--`, or after NAME
    /// and the options).
    #[arg(
        value_name = "CMD",
        required = true,
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub(crate) command: Vec<OsString>,
}

impl ExecArgs {
    /// `--timeout`, `None` for none (or 0).
    pub(crate) fn limit(&self) -> Option<Duration> {
        self.timeout.filter(|t| !t.is_zero())
    }
}

impl OnceArgs {
    /// `--timeout`, `None` for none (or 0).
    pub(crate) fn limit(&self) -> Option<Duration> {
        self.timeout.filter(|t| !t.is_zero())
    }
}

#[derive(Debug, Args)]
pub(crate) struct OnceArgs {
    /// The run-once key (the Redis key of its record).
    #[arg(value_name = "KEY")]
    pub(crate) key: OsString,

    /// How long a run is remembered: later callers within it do not run
    /// CMD.
    #[arg(
        short,
        long,
        value_name = "DUR",
        value_parser = durations::lease,
        allow_hyphen_values = true,
        default_value = "24h"
    )]
    pub(crate) ttl: Duration,

    /// When CMD is running elsewhere, wait at most this long for its
    /// outcome and exit like it did (or run CMD if that run gave up
    /// without a record).
    #[arg(
        short,
        long,
        value_name = "DUR",
        value_parser = durations::any,
        allow_hyphen_values = true
    )]
    pub(crate) wait: Option<Duration>,

    /// Record a failing CMD too: later callers then exit with its status
    /// instead of running it again.
    #[arg(long)]
    pub(crate) record_failure: bool,

    /// Stop CMD once it has run this long: SIGTERM, then SIGKILL after
    /// the kill grace; redguard then exits 124, as timeout(1) does.
    /// Without it, or with 0, CMD runs as long as it takes.
    #[arg(
        long,
        conflicts_with_all = ["status", "forget"],
        value_name = "DUR",
        value_parser = durations::any,
        allow_hyphen_values = true
    )]
    pub(crate) timeout: Option<Duration>,

    /// No message when CMD ran before or runs elsewhere (the exit status
    /// says it); errors are still printed.
    #[arg(short, long)]
    pub(crate) quiet: bool,

    /// Show what is recorded for KEY (who ran CMD, when, its status), or
    /// who is running it; run nothing. Exits 0 whatever it finds.
    #[arg(long, conflicts_with_all = ["forget", "wait", "record_failure", "command"])]
    pub(crate) status: bool,

    /// With --status: print one JSON object: schema (1; within it fields
    /// are only added), key (escaped as by `redguard status`), state (not_run, running, done, or the last attempt's
    /// failed, abandoned or timed_out when nothing is recorded); running:
    /// holder, expires_in_ms, expires_at_unix_ms (the runner's lease);
    /// done: ran_at_unix_ms (its end), started_at_unix_ms, duration_ms,
    /// by, exit_status, host, pid, expires_in_ms and expires_at_unix_ms
    /// (how long the record is kept), too_long (the record's fields too
    /// long to read: by is then null); and last_attempt (null when none is
    /// kept): state, holder, host, pid, program, started_at_unix_ms,
    /// ended_at_unix_ms, duration_ms, exit_status, signal, too_long
    /// (holder, host and program are null when too long to read).
    #[arg(long, requires = "status")]
    pub(crate) json: bool,

    /// Delete the record of KEY, so that the next caller runs CMD again (a
    /// run in progress is left alone); run nothing.
    #[arg(long, conflicts_with_all = ["wait", "record_failure", "command"])]
    pub(crate) forget: bool,

    /// What the holder record (seen by `status`, `list`, `who` and anyone
    /// who can read the lock's keys) keeps of CMD's command line: the
    /// whole line, the line with passwords, tokens and keys masked (the
    /// default), CMD's name only, or nothing of CMD.
    #[arg(long, value_enum, value_name = "HOW", default_value_t = RecordCommandArg::Masked)]
    pub(crate) record_command: RecordCommandArg,

    /// The command to run, with its arguments (after `--`, or after KEY
    /// and the options).
    #[arg(
        value_name = "CMD",
        required_unless_present_any = ["status", "forget"],
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The lock name.
    #[arg(value_name = "NAME")]
    pub(crate) name: OsString,

    /// Print one JSON object instead of text (fields below).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Which names: a SCAN MATCH glob (`*`, `?`, `[abc]`, `\` escapes).
    #[arg(value_name = "PATTERN", default_value = "*")]
    pub(crate) pattern: String,

    /// Also list keys that are no lock, semaphore, latch or `once` key (as
    /// "not a lock"), and every counter (as --kind counter).
    #[arg(long)]
    pub(crate) all: bool,

    /// Only these kinds (repeat, or separate with commas). Without it:
    /// locks, `once` keys, and the semaphores and latches that something
    /// names (an expiring permit held, a redguard waiter's record); `counter`
    /// lists every integer string besides, as the application's own
    /// counters share a plain semaphore's and a latch's layout.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "KIND")]
    pub(crate) kind: Vec<ListKind>,

    /// Print one JSON array instead of text (fields below).
    #[arg(long)]
    pub(crate) json: bool,

    /// Order: by how long held (longest first), lease left (least first)
    /// or name.
    #[arg(long, value_enum, default_value = "name")]
    pub(crate) sort: SortBy,

    /// Only what some holder has held for at least this long (by its
    /// holder record): the stuck locks, permits and `once` runs. Holders
    /// without a record are left out.
    #[arg(long, value_name = "DUR", value_parser = durations::any)]
    pub(crate) older_than: Option<std::time::Duration>,
}

/// The kinds `list --kind` keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ListKind {
    /// Reentrant, fair, fenced and read-write locks.
    Lock,
    /// Semaphores (plain and expiring) that something names as such.
    Semaphore,
    /// Latches that something names as such.
    Latch,
    /// Every integer string: semaphores and latches, named or not, and an
    /// application's counters alike.
    Counter,
    /// Run-once keys.
    Once,
}

/// How `list` orders its lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SortBy {
    /// Longest held first (locks without a hold start last).
    Held,
    /// Least lease left first.
    Ttl,
    /// By name.
    Name,
}

#[derive(Debug, Args)]
pub(crate) struct WhoArgs {
    /// The client id (a UUID), or a holder id as `status` prints it
    /// (`<client id>:<thread>`): then only that holder's holds are shown.
    #[arg(value_name = "CLIENT")]
    pub(crate) client: String,

    /// Print one JSON object instead of text: schema (1), client, holder
    /// (when a holder id was given) and records (docs/CLI.md).
    #[arg(long)]
    pub(crate) json: bool,
}

/// What `unlock --force` deletes when NAME is not a lock hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Kind {
    /// A lock of any kind (reentrant, fair, read-write, fenced); found
    /// without --kind.
    Lock,
    /// A semaphore's permit counter, with the leases of its expiring
    /// permits (their holders lose them at their next renewal); the next
    /// `exec --permits N` sets the count again.
    Semaphore,
    /// A count-down latch: its waiters are woken and find it open.
    Latch,
    /// A `redguard once` record, so that the next caller runs CMD again.
    Once,
}

#[derive(Debug, Args)]
pub(crate) struct UnlockArgs {
    /// The lock name.
    #[arg(value_name = "NAME")]
    pub(crate) name: OsString,

    /// Required: delete whatever NAME holds, whoever holds it. Its holder
    /// finds out at its next renewal.
    #[arg(long, required = true)]
    pub(crate) force: bool,

    /// What NAME is, when it is not a lock: a semaphore, latch or `once`
    /// record is deleted only when asked for by kind.
    #[arg(long, value_enum, value_name = "KIND")]
    pub(crate) kind: Option<Kind>,
}

/// Turns a clap error into the exit status: help and version are printed
/// and succeed; anything else becomes one line on stderr and exit 64
/// (EX_USAGE).
pub(crate) fn parse_error(err: clap::Error) -> Result<std::process::ExitCode, Failure> {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // Help text never contains environment values (hide_env_values).
            let _ = err.print();
            let code = if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                code::USAGE
            } else {
                0
            };
            Ok(std::process::ExitCode::from(code))
        }
        _ => {
            if let Some(message) = negative_duration(&err, std::env::args()) {
                return Err(Failure::new(code::USAGE, message));
            }
            // clap's first paragraph is the error (the required-argument
            // error lists the arguments on further lines); tips and usage
            // follow after a blank line.
            let rendered = err.render().to_string();
            let first: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .skip_while(|l| l.is_empty())
                .take_while(|l| !l.is_empty())
                .collect();
            let first = first.join(" ");
            let first = first.strip_prefix("error: ").unwrap_or(&first);
            let first = if first.is_empty() {
                "bad arguments"
            } else {
                first
            };
            Err(Failure::new(
                code::USAGE,
                format!("{first} (see 'redguard --help')"),
            ))
        }
    }
}

/// The message for an "unknown argument" that is a negative duration
/// after an option whose value may be left out (`latch --wait -1s`).
fn negative_duration(err: &clap::Error, argv: impl Iterator<Item = String>) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if err.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(bad)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    let argv: Vec<String> = argv.collect();
    argv.windows(2).find_map(|pair| {
        let (option, value) = (&pair[0], &pair[1]);
        (durations::is_duration_option(option)
            && value.starts_with(bad.as_str())
            && value[1..].starts_with(|c: char| c.is_ascii_digit()))
        .then(|| {
            format!(
                "invalid value '{value}' for '{option}': durations cannot be negative \
                 (see 'redguard --help')"
            )
        })
    })
}

/// The lock name as bytes: any bytes the OS passes are allowed.
pub(crate) fn name_bytes(name: &OsString) -> Result<Vec<u8>, Failure> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = name.as_bytes().to_vec();
    if bytes.is_empty() {
        return Err(Failure::new(code::USAGE, "the lock name is empty"));
    }
    Ok(bytes)
}

/// `redguard latch`'s arguments: a count-down latch for shell pipelines.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("action").required(true).args(["count", "count_down", "wait"])))]
pub(crate) struct LatchArgs {
    /// The latch name (the Redis key of its count).
    #[arg(value_name = "NAME")]
    pub(crate) name: OsString,

    /// Set the latch to N (N workers will count it down). Fails with
    /// --conflict-exit-code (75) when the latch is set already.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=i64::MAX as u64))]
    pub(crate) count: Option<u64>,

    /// Count the latch down by one and print the count left; at zero every
    /// waiter goes. Fails with 65 when the latch does not exist (unless
    /// --allow-missing).
    #[arg(long)]
    pub(crate) count_down: bool,

    /// Wait until the latch opens (its count reaches zero), at most DUR
    /// when given. Fails with 65 at once when the latch does not exist
    /// (unless --allow-missing).
    #[arg(long, value_name = "DUR", num_args = 0..=1, value_parser = durations::any)]
    pub(crate) wait: Option<Option<Duration>>,

    /// Take a latch that does not exist as open: --wait returns at once
    /// and --count-down does nothing, both with 0.
    #[arg(long, conflicts_with = "count")]
    pub(crate) allow_missing: bool,

    /// Exit status when --wait runs out before the latch opens, or --count
    /// finds the latch set already.
    #[arg(short = 'E', long, value_name = "N", default_value_t = code::TEMPFAIL)]
    pub(crate) conflict_exit_code: u8,

    /// Print nothing on success.
    #[arg(short, long)]
    pub(crate) quiet: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn cmd_may_follow_the_options_with_or_without_dashes() {
        for argv in [
            &["redguard", "exec", "job", "--no-wait", "--", "ls", "-l"][..],
            &["redguard", "exec", "--no-wait", "job", "ls", "-l"][..],
            &["redguard", "exec", "job", "-n", "ls", "-l"][..],
        ] {
            let cli = Cli::try_parse_from(argv).unwrap();
            let Command::Exec(exec) = cli.command else {
                panic!("not exec");
            };
            assert!(exec.no_wait);
            assert_eq!(exec.command, ["ls", "-l"]);
        }
    }

    #[test]
    fn once_takes_a_cmd_or_status_or_forget() {
        let parse = |argv: &[&str]| Cli::try_parse_from(argv);
        let once = |argv: &[&str]| match parse(argv).unwrap().command {
            Command::Once(args) => args,
            other => panic!("not once: {other:?}"),
        };
        let a = once(&["redguard", "once", "nightly", "--", "./job.sh", "-x"]);
        assert_eq!(a.command, ["./job.sh", "-x"]);
        assert_eq!(a.ttl, Duration::from_secs(86_400));
        let a = once(&["redguard", "once", "-w", "5m", "--ttl", "1h", "k", "job"]);
        assert_eq!(a.wait, Some(Duration::from_secs(300)));
        assert!(once(&["redguard", "once", "--status", "k"]).status);
        assert!(once(&["redguard", "once", "--forget", "k"]).forget);
        assert!(parse(&["redguard", "once", "k"]).is_err(), "CMD missing");
        assert!(parse(&["redguard", "once", "--status", "k", "--", "job"]).is_err());
        assert!(parse(&["redguard", "once", "--status", "--forget", "k"]).is_err());
    }

    #[test]
    fn unknown_flags_before_cmd_are_errors() {
        assert!(Cli::try_parse_from(["redguard", "exec", "j", "--bogus", "--", "x"]).is_err());
    }

    #[test]
    fn permits_read_and_write_exclude_the_other_kinds() {
        for argv in [
            &[
                "redguard",
                "exec",
                "j",
                "--permits",
                "2",
                "--fair",
                "--",
                "x",
            ][..],
            &["redguard", "exec", "j", "--permits", "0", "--", "x"][..],
            &["redguard", "exec", "j", "--read", "--write", "--", "x"][..],
            &["redguard", "exec", "j", "--read", "--fenced", "--", "x"][..],
            &[
                "redguard",
                "exec",
                "j",
                "--write",
                "--permits",
                "2",
                "--",
                "x",
            ][..],
            &["redguard", "latch", "j"][..],
            &["redguard", "latch", "j", "--count", "2", "--count-down"][..],
        ] {
            assert!(Cli::try_parse_from(argv).is_err(), "{argv:?}");
        }
        let cli = Cli::try_parse_from(["redguard", "latch", "j", "--wait"]).unwrap();
        let Command::Latch(latch) = cli.command else {
            panic!("not latch");
        };
        assert_eq!(latch.wait, Some(None));
    }

    /// Every help text, the subcommands' included.
    fn all_help(cmd: &mut clap::Command, out: &mut Vec<(String, String)>) {
        out.push((
            cmd.get_name().to_owned(),
            cmd.render_long_help().to_string(),
        ));
        for sub in cmd.get_subcommands_mut() {
            all_help(sub, out);
        }
    }

    #[test]
    fn no_help_text_refers_to_a_hidden_option() {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        cli.build();
        let mut hidden = Vec::new();
        let mut stack = vec![&cli];
        while let Some(cmd) = stack.pop() {
            for arg in cmd.get_arguments().filter(|a| a.is_hide_set()) {
                if let Some(long) = arg.get_long() {
                    hidden.push(format!("--{long}"));
                }
                if let Some(env) = arg.get_env() {
                    hidden.push(env.to_string_lossy().into_owned());
                }
            }
            stack.extend(cmd.get_subcommands());
        }
        // The watchdog's lease is set by an option and a variable shown
        // in every command's help, so that neither changes it unseen.
        assert!(
            !hidden.contains(&"--watchdog-timeout".to_owned())
                && !hidden.contains(&"REDGUARD_WATCHDOG_TIMEOUT".to_owned()),
            "{hidden:?}"
        );
        let mut texts = Vec::new();
        all_help(&mut cli, &mut texts);
        for (name, text) in texts {
            for option in &hidden {
                assert!(
                    !text.contains(option.as_str()),
                    "`{name} --help` refers to the hidden {option}"
                );
            }
        }
    }

    #[test]
    fn wait_and_no_wait_conflict() {
        assert!(
            Cli::try_parse_from(["redguard", "exec", "j", "-w", "1s", "-n", "--", "x"]).is_err()
        );
    }
}
