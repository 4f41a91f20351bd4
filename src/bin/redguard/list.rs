//! `redguard list [PATTERN]`: everything redguard knows of whose name
//! matches, each kind with its own columns: locks (holders with host, pid,
//! held for; lease left; waiters, a fair lock's queue in order),
//! semaphores (available permits), expiring semaphores (each permit with
//! its holder's record and lease left), latches (count), counters the
//! layout cannot name (a plain semaphore and a latch are both a bare
//! integer), `once` keys (state, runner, age), and for each the waiters
//! that keep a record. Found with SCAN on every master
//! (`Client::list_locks`), plus one SCAN of the holder records for the
//! waiters.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use redguard::{LockInfo, LockKind, OnceInfo, OnceStatus};
use serde_json::{Value, json};

use crate::cli::{ListArgs, ListKind, SortBy};
use crate::connect::Connection;
use crate::fail::Failure;
use crate::show;
use crate::show::expiry_fields;
use crate::status::{holder_line, holders_json, listed_kind};
use crate::sync_status::{Counter, CounterKind};
use crate::waiters::Waiters;

/// The prefix of a run-once key's last-attempt record.
const ATTEMPT_PREFIX: &[u8] = b"redguard_once_attempt:";

/// Keys beside the synchronizers, never listed as one of them: fencing
/// token counters, fair queues and their deadlines, holder records,
/// one-use tokens, last-attempt records.
const INTERNAL_PREFIXES: [&[u8]; 6] = [
    b"redisson_lock_token:",
    b"redisson_lock_queue:",
    b"redisson_lock_timeout:",
    b"redguard:client:",
    b"redguard_token:",
    ATTEMPT_PREFIX,
];

/// Whether `name` is a key beside the synchronizers ([`INTERNAL_PREFIXES`],
/// or a holder record under `record_prefix`).
fn is_internal(name: &[u8], record_prefix: &str) -> bool {
    name.starts_with(record_prefix.as_bytes())
        || INTERNAL_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// One thing listed.
enum Entry {
    /// A lock (or, with `--all`, a key of another kind).
    Lock(LockInfo),
    /// A counter: a semaphore's permits or a latch's count.
    Counter(Vec<u8>, Box<Counter>),
    /// A run-once key, with the claim as a lock while a run is in
    /// progress.
    Once(Box<OnceInfo>, Option<Box<LockInfo>>),
}

impl Entry {
    fn name(&self) -> &[u8] {
        match self {
            Entry::Lock(info) => &info.name,
            Entry::Counter(name, _) => name,
            Entry::Once(info, _) => &info.key,
        }
    }

    /// How long the longest-holding holder with a record has held it.
    fn longest_hold(&self) -> Option<Duration> {
        match self {
            Entry::Lock(info) => info
                .holders
                .iter()
                .filter_map(|(h, _)| info.held_for(h))
                .max(),
            Entry::Counter(_, counter) => {
                let sem = counter.semaphore();
                sem.permits.iter().filter_map(|p| sem.held_for(&p.id)).max()
            }
            Entry::Once(info, _) => info.held_for(),
        }
    }

    /// Time left on its key.
    fn ttl_left(&self) -> Option<Duration> {
        let ttl = match self {
            Entry::Lock(info) => info.ttl,
            Entry::Counter(_, counter) => counter.semaphore().ttl,
            Entry::Once(info, _) => match &info.status {
                OnceStatus::Running { expires_in, .. } => expires_in.map(redguard::Ttl::Expires),
                _ => None,
            },
        };
        ttl.and_then(redguard::Ttl::expires_in)
    }
}

/// `redguard list`.
pub(crate) fn list(args: &ListArgs, conn: &Connection) -> Result<ExitCode, Failure> {
    let fail = |e: redguard::Error| Failure::from_lib(&e, &conn.server);
    // The counters are strings, a finished run is a hash of other fields:
    // only names that may read as one of the kinds are kept (every key
    // with --all).
    let listing = if args.all {
        conn.client.list_locks(&args.pattern, true)
    } else {
        conn.client.list_synchronizers(&args.pattern)
    }
    .map_err(fail)?;
    // Keys this ACL user may not read (a tenant confined to its own
    // prefix, the database shared): skipped, counted in the output.
    let mut unreadable = listing.unreadable;
    let keys = listing.found;
    let waiters = Waiters::read(conn);
    let wants = Wants::of(args);
    let unread_counters = keys
        .iter()
        .filter(|info| {
            matches!(&info.kind, LockKind::Other { redis_type } if redis_type == "string")
                && info.may_be_counter()
                && !is_internal(&info.name, conn.client.record_prefix())
                && !wants.reads_counter(info, &waiters)
        })
        .count();
    let pattern = args.pattern.as_bytes();
    let mut entries = Vec::new();
    let mut once_keys: Vec<Vec<u8>> = Vec::new();
    for info in keys {
        if let Some(key) = attempt_key_of(&info.name) {
            // A last-attempt record stands for its run-once key, listed
            // only when that key's own name matches (`*n}` matches
            // `redguard_once_attempt:{jobn}`, not `jobn`).
            if glob_matches(pattern, &key) {
                once_keys.push(key);
            }
            continue;
        }
        if let Some(entry) = classify(conn, info, &wants, &waiters)?
            && wants.keeps(&entry, &waiters)
        {
            entries.push(entry);
        }
    }
    // Run-once keys whose last attempt failed or was abandoned keep only
    // that record: found by their record's name, which the scan above
    // matched only when the pattern is `*`.
    if wants.once && args.pattern != "*" {
        let attempts = format!("redguard_once_attempt:{{{}}}", args.pattern);
        let attempts = conn.client.list_locks(&attempts, true).map_err(fail)?;
        for info in attempts.found {
            once_keys.extend(attempt_key_of(&info.name).filter(|k| glob_matches(pattern, k)));
        }
        // A refused record counts when it stands for a matching key, and
        // once: the scan above counted those whose own name matches.
        unreadable.extend(attempts.unreadable.into_iter().filter(|name| {
            !glob_matches(pattern, name)
                && attempt_key_of(name).is_some_and(|k| glob_matches(pattern, &k))
        }));
    }
    unreadable.sort();
    unreadable.dedup();
    once_keys.sort();
    once_keys.dedup();
    if !wants.once {
        once_keys.clear();
    }
    for key in once_keys {
        if entries.iter().any(|e| e.name() == key.as_slice()) {
            continue;
        }
        match conn.client.once_inspect(&key) {
            Ok(info) if info.last_attempt.is_some() => {
                entries.push(Entry::Once(Box::new(info), None));
            }
            Ok(_)
            | Err(redguard::Error::WrongType { .. } | redguard::Error::InvalidArgument(_)) => {}
            Err(e) => return Err(fail(e)),
        }
    }
    if let Some(min) = args.older_than {
        entries.retain(|e| e.longest_hold().is_some_and(|held| held >= min));
    }
    sort(&mut entries, args.sort);
    let skipped = unreadable.len();
    if args.json {
        let mut all: Vec<Value> = entries.iter().map(|e| to_json(e, &waiters)).collect();
        if skipped > 0 {
            // The array stays an array (docs/CLI.md): the count comes as
            // a last element of its own kind, only when keys were skipped.
            all.push(json!({
                "kind": "skipped",
                "skipped": skipped,
                "reason": "this user may not read them",
            }));
        }
        crate::out::print_json(Value::Array(all));
    } else {
        // One write per buffer, not per line: a listing may run to tens
        // of thousands of lines. A closed pipe (`| head`) ends the output.
        use std::io::Write;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let mut unnamed = false;
        for entry in &entries {
            if let Entry::Counter(name, counter) = entry {
                unnamed |= counter.kind(&waiters, name) == CounterKind::Unknown;
            }
            if out.write_all(to_text(entry, &waiters).as_bytes()).is_err() {
                return Ok(ExitCode::SUCCESS);
            }
        }
        let mut notes = Vec::new();
        if unnamed {
            notes.push(
                "(counter: a plain semaphore and a latch are both a bare integer, which the \
                 layout cannot tell apart; the kind is named where a redguard waiter or an \
                 expiring permit tells it)"
                    .to_owned(),
            );
        }
        if waiters.unknown {
            notes.push("(waiters: the holder records could not be searched)".to_owned());
        }
        if unread_counters > 0 && wants.semaphores && wants.latches {
            let keys = if unread_counters == 1 { "key" } else { "keys" };
            notes.push(format!(
                "({unread_counters} integer {keys} not listed, which no expiring permit or \
                 redguard waiter names: an application's counters, or a semaphore or latch \
                 without waiters; --kind counter lists them)"
            ));
        }
        if skipped > 0 {
            let keys = if skipped == 1 { "key" } else { "keys" };
            notes.push(format!(
                "({skipped} {keys} skipped: this user may not read them)"
            ));
        }
        for note in notes {
            let _ = writeln!(out, "{note}");
        }
        let _ = out.flush();
    }
    Ok(ExitCode::SUCCESS)
}

/// What `list` keeps, from `--kind` and `--all`.
struct Wants {
    locks: bool,
    semaphores: bool,
    latches: bool,
    /// Every integer string, named or not.
    counters: bool,
    once: bool,
    /// Keys of no known kind.
    others: bool,
}

impl Wants {
    fn of(args: &ListArgs) -> Wants {
        let has = |k: ListKind| args.kind.contains(&k);
        let every = args.kind.is_empty();
        let counters = has(ListKind::Counter) || (every && args.all);
        Wants {
            locks: every || has(ListKind::Lock),
            semaphores: every || counters || has(ListKind::Semaphore),
            latches: every || counters || has(ListKind::Latch),
            counters,
            once: every || has(ListKind::Once),
            others: args.all,
        }
    }

    /// Whether a string that may be a counter is worth its reads: every
    /// one when counters are asked for, else one that something names as
    /// a semaphore or latch (expiring permits held, a recorded waiter).
    fn reads_counter(&self, info: &LockInfo, waiters: &Waiters) -> bool {
        self.counters
            || ((self.semaphores || self.latches)
                && (info.may_hold_permits() || !waiters.kinds(&info.name).is_empty()))
    }

    /// Whether `entry` is of a kind asked for.
    fn keeps(&self, entry: &Entry, waiters: &Waiters) -> bool {
        match entry {
            Entry::Lock(info) => match info.kind {
                LockKind::Other { .. } => self.others,
                _ => self.locks,
            },
            Entry::Counter(name, counter) => {
                self.counters
                    || match counter.kind(waiters, name) {
                        CounterKind::Semaphore | CounterKind::ExpiringSemaphore => self.semaphores,
                        CounterKind::Latch => self.latches,
                        CounterKind::Unknown => false,
                    }
            }
            Entry::Once(..) => self.once,
        }
    }
}

/// What a key found by the scan is: a lock, a counter, a run-once key, or
/// (kept with `--all` only) something else. Keys beside the synchronizers
/// are skipped, and so are the kinds not asked for before any read of
/// their own. Last-attempt records are the caller's.
fn classify(
    conn: &Connection,
    info: LockInfo,
    wants: &Wants,
    waiters: &Waiters,
) -> Result<Option<Entry>, Failure> {
    let fail = |e: redguard::Error| Failure::from_lib(&e, &conn.server);
    let internal = is_internal(&info.name, conn.client.record_prefix());
    let all = wants.others;
    let other = |info: LockInfo| Ok(all.then_some(Entry::Lock(info)));
    match &info.kind {
        LockKind::Other { .. } if internal => other(info),
        // What the scan read of it rules out a counter and a run-once
        // record: no round trip of its own (an application's keys can be
        // most of the keyspace).
        LockKind::Other { .. } if !info.may_be_counter() && !info.may_be_once_record() => {
            other(info)
        }
        // An integer nothing names, counters not asked for: an
        // application's own, most likely (no round trip either).
        LockKind::Other { redis_type }
            if redis_type == "string" && !wants.reads_counter(&info, waiters) =>
        {
            other(info)
        }
        LockKind::Other { redis_type } if redis_type == "hash" && !wants.once => other(info),
        LockKind::Other { redis_type } if redis_type == "string" => {
            match crate::sync_status::read(conn, &info.name)? {
                Some(counter) => Ok(Some(Entry::Counter(info.name, Box::new(counter)))),
                None => other(info),
            }
        }
        LockKind::Other { redis_type } if redis_type == "hash" => {
            match conn.client.once_inspect(&info.name) {
                Ok(once) if matches!(once.status, OnceStatus::Done(_)) => {
                    Ok(Some(Entry::Once(Box::new(once), None)))
                }
                Ok(_) | Err(redguard::Error::WrongType { .. }) => other(info),
                Err(e) => Err(fail(e)),
            }
        }
        LockKind::Other { .. } => other(info),
        _ if listed_kind(&info) == "once" && !wants.once => Ok(None),
        _ if listed_kind(&info) == "once" => match conn.client.once_inspect(&info.name) {
            Ok(once) => Ok(Some(Entry::Once(Box::new(once), Some(Box::new(info))))),
            Err(redguard::Error::WrongType { .. }) => Ok(Some(Entry::Lock(info))),
            Err(e) => Err(fail(e)),
        },
        _ => Ok(Some(Entry::Lock(info))),
    }
}

/// The run-once key of a last-attempt record's key
/// (`redguard_once_attempt:{K}`, or `redguard_once_attempt:K` for a key
/// with a brace of its own).
fn attempt_key_of(key: &[u8]) -> Option<Vec<u8>> {
    let rest = key.strip_prefix(ATTEMPT_PREFIX)?;
    match rest.strip_prefix(b"{").and_then(|r| r.strip_suffix(b"}")) {
        Some(inner) if !inner.contains(&b'{') => Some(inner.to_vec()),
        _ => Some(rest.to_vec()),
    }
}

/// Whether `name` matches the glob `pattern` as `SCAN MATCH` has it
/// (Redis's `stringmatchlen`): `*` any bytes, `?` one byte, `[abc]`,
/// `[^abc]` and `[a-z]` a class (unclosed, it ends with the pattern), `\`
/// the next byte as it is. A `*` backtracks to one point only, enough for
/// a glob: no pattern costs more than its length times the name's.
fn glob_matches(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    // After the last `*`: where the pattern resumes, and the name byte it
    // was last tried from.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if pattern.get(p) == Some(&b'*') {
            while pattern.get(p) == Some(&b'*') {
                p += 1;
            }
            star = Some((p, n));
            continue;
        }
        if p < pattern.len()
            && let Some(next) = glob_one(pattern, p, name[n])
        {
            (p, n) = (next, n + 1);
            continue;
        }
        match star {
            Some((resume, from)) => {
                star = Some((resume, from + 1));
                (p, n) = (resume, from + 1);
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

/// Whether byte `c` matches the pattern element at `p` (not a `*`): the
/// index after that element when it does.
fn glob_one(pattern: &[u8], p: usize, c: u8) -> Option<usize> {
    match pattern[p] {
        b'?' => Some(p + 1),
        b'\\' if p + 1 < pattern.len() => (pattern[p + 1] == c).then_some(p + 2),
        b'[' => {
            let mut i = p + 1;
            let negated = pattern.get(i) == Some(&b'^');
            if negated {
                i += 1;
            }
            let mut hit = false;
            let end = loop {
                match pattern.get(i) {
                    None => break pattern.len(),
                    Some(b'\\') if i + 1 < pattern.len() => {
                        hit |= pattern[i + 1] == c;
                        i += 2;
                    }
                    Some(b']') => break i + 1,
                    Some(&from) if i + 2 < pattern.len() && pattern[i + 1] == b'-' => {
                        let to = pattern[i + 2];
                        let (lo, hi) = if from <= to { (from, to) } else { (to, from) };
                        hit |= (lo..=hi).contains(&c);
                        i += 3;
                    }
                    Some(&b) => {
                        hit |= b == c;
                        i += 1;
                    }
                }
            };
            (hit != negated).then_some(end)
        }
        b => (b == c).then_some(p + 1),
    }
}

fn sort(entries: &mut [Entry], by: SortBy) {
    match by {
        SortBy::Name => entries.sort_by(|a, b| a.name().cmp(b.name())),
        SortBy::Held => entries.sort_by(|a, b| {
            // Longest first; entries without a known start last.
            b.longest_hold()
                .cmp(&a.longest_hold())
                .then_with(|| a.name().cmp(b.name()))
        }),
        SortBy::Ttl => entries.sort_by(|a, b| {
            let (x, y) = (a.ttl_left(), b.ttl_left());
            (x.is_none(), x, a.name()).cmp(&(y.is_none(), y, b.name()))
        }),
    }
}

fn to_text(entry: &Entry, waiters: &Waiters) -> String {
    match entry {
        Entry::Lock(info) => lock_text(info, waiters),
        Entry::Counter(name, counter) => counter_text(name, counter, waiters),
        Entry::Once(info, _) => once_text(info, waiters),
    }
}

fn to_json(entry: &Entry, waiters: &Waiters) -> Value {
    match entry {
        Entry::Lock(info) => lock_json(info, waiters),
        Entry::Counter(name, counter) => counter.json(name, waiters),
        Entry::Once(info, claim) => once_json(info, claim.as_deref(), waiters),
    }
}

/// The waiters column: subscribed connections and recorded waiters.
fn waiters_column(subscribed: Option<u64>, name: &[u8], waiters: &Waiters) -> String {
    let subscribed = subscribed.map_or_else(|| "?".to_owned(), |n| n.to_string());
    let recorded = if waiters.unknown {
        "?".to_owned()
    } else {
        waiters.of(name).len().to_string()
    };
    format!("waiters {subscribed} subscribed, {recorded} recorded")
}

fn lock_text(info: &LockInfo, waiters: &Waiters) -> String {
    use std::fmt::Write;
    let name = show::name(&info.name);
    let mut s = String::new();
    if let LockKind::Other { redis_type } = &info.kind {
        let _ = writeln!(
            s,
            "{name}: not a lock ({redis_type}{}, ttl {})",
            if redis_type == "hash" {
                " of other fields than a lock's"
            } else {
                ""
            },
            show::ttl(info.ttl)
        );
        return s;
    }
    let queued = match &info.kind {
        LockKind::Fair { queue } => format!("{} queued, ", info.queue_len.max(queue.len() as u64)),
        _ => String::new(),
    };
    let _ = writeln!(
        s,
        "{name}: {}, ttl {}, {queued}{}",
        listed_kind(info),
        show::ttl(info.ttl),
        waiters_column(info.subscribers, &info.name, waiters)
    );
    for (holder, count) in &info.holders {
        let _ = writeln!(
            s,
            "  {holder} (hold count {count}): {}",
            holder_line(info, holder)
        );
    }
    match &info.kind {
        LockKind::Fair { queue } => {
            s.push_str(&waiters.queue_text(&info.name, queue, info.queue_len, "  "));
        }
        _ => s.push_str(&waiters.text(&info.name, "  ")),
    }
    s
}

fn lock_json(info: &LockInfo, waiters: &Waiters) -> Value {
    let mut v = json!({
        "name": show::json_name(&info.name),
        "kind": listed_kind(info),
        "held": info.is_held(),
    });
    expiry_fields(info.ttl, &mut v);
    match &info.kind {
        LockKind::Other { redis_type } => {
            v["redis_type"] = json!(redis_type);
            return v;
        }
        LockKind::Fair { queue } => {
            v["queue"] = waiters.queue_json(&info.name, queue);
            v["queue_len"] = json!(info.queue_len.max(queue.len() as u64));
            v["foreign_waiters"] = if waiters.unknown {
                Value::Null
            } else {
                json!(waiters.foreign(&info.name, queue))
            };
        }
        LockKind::ReadWrite { mode } => v["mode"] = json!(mode),
        _ => {}
    }
    v["holders"] = holders_json(info);
    v["subscribers"] = json!(info.subscribers);
    v["waiters"] = waiters.json(&info.name);
    v
}

fn counter_text(name: &[u8], counter: &Counter, waiters: &Waiters) -> String {
    use std::fmt::Write;
    let shown = show::name(name);
    let sem = counter.semaphore();
    let latch = counter.latch();
    let mut s = String::new();
    let kind = counter.kind(waiters, name);
    let (what, subscribed) = match kind {
        CounterKind::Unknown => (format!("counter {}", sem.available), None),
        CounterKind::Latch => (format!("latch, count {}", latch.count), latch.subscribers),
        CounterKind::Semaphore => (
            format!("semaphore, {} available", sem.available),
            sem.subscribers,
        ),
        CounterKind::ExpiringSemaphore => (
            format!(
                "expiring_semaphore, {} available, {} held",
                sem.available,
                sem.permits.len()
            ),
            sem.subscribers,
        ),
    };
    let column = match kind {
        CounterKind::Unknown => {
            let n = |c: Option<u64>| c.map_or_else(|| "?".to_owned(), |n| n.to_string());
            let recorded = if waiters.unknown {
                "?".to_owned()
            } else {
                waiters.of(name).len().to_string()
            };
            format!(
                "waiters {} (semaphore) + {} (latch) subscribed, {recorded} recorded",
                n(sem.subscribers),
                n(latch.subscribers)
            )
        }
        _ => waiters_column(subscribed, name, waiters),
    };
    let _ = writeln!(s, "{shown}: {what}, ttl {}, {column}", show::ttl(sem.ttl));
    for permit in &sem.permits {
        let record = sem.record_of(&permit.id);
        let _ = writeln!(
            s,
            "  permit {} (lease {} left): {}{}",
            permit.id,
            show::left(permit.lease_left),
            crate::record_view::record_line(record, sem.held_for(&permit.id)),
            crate::sync_status::liveness_text(record)
        );
    }
    s.push_str(&waiters.text(name, "  "));
    s
}

/// The state, runner and age of a run-once key, for people.
fn once_text(info: &OnceInfo, waiters: &Waiters) -> String {
    use std::fmt::Write;
    let (runner, age) = once_runner(info);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: once, {}, runner {runner}, age {}, {}",
        show::name(&info.key),
        crate::once::state_word(info),
        age.map_or_else(|| "unknown".to_owned(), show::left),
        waiters_column(info.subscribers, &info.key, waiters)
    );
    s.push_str(&waiters.text(&info.key, "  "));
    s
}

/// Who runs (or last ran) a run-once key, on one line, and since when the
/// state has lasted: a run in progress since its start, a finished run or
/// failed attempt since its end.
fn once_runner(info: &OnceInfo) -> (String, Option<Duration>) {
    let now = SystemTime::now();
    let since = |at: SystemTime| now.duration_since(at).ok();
    if let Some(a) = &info.last_attempt {
        let pid = a.pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
        let age = match &info.status {
            OnceStatus::Running { .. } => info.held_for().or_else(|| since(a.started_at)),
            _ => a.ended_at.and_then(since).or_else(|| since(a.started_at)),
        };
        return (
            format!(
                "host {}, pid {pid}, program {}",
                crate::once::attempt_field(a, "host", &a.host),
                crate::once::attempt_program(a)
            ),
            age,
        );
    }
    let runner = match (&info.record, info.runner()) {
        (Some(r), _) => format!(
            "host {}, pid {}, program {}{}",
            show::record_text(r, "host", &r.host),
            r.pid.map_or_else(|| "?".to_owned(), |p| p.to_string()),
            show::record_program(r),
            show::unread_note(r)
        ),
        (None, Some(id)) => format!("{} (no record)", crate::once::runner_id_text(info, id)),
        (None, None) => "unknown".to_owned(),
    };
    let age = match &info.status {
        OnceStatus::Running { .. } => info.held_for(),
        OnceStatus::Done(outcome) => since(outcome.at),
        _ => None,
    };
    (runner, age)
}

fn once_json(info: &OnceInfo, claim: Option<&LockInfo>, waiters: &Waiters) -> Value {
    let running = matches!(info.status, OnceStatus::Running { .. });
    let mut v = json!({
        "name": show::json_name(&info.key),
        "kind": "once",
        "held": running,
        "state": crate::once::state_word(info),
    });
    crate::once::info_fields(info, &mut v);
    let (_, age) = once_runner(info);
    v["age_ms"] = json!(age.map(show::ms));
    v["subscribers"] = json!(info.subscribers);
    v["waiters"] = waiters.json(&info.key);
    if let Some(claim) = claim {
        // A run in progress is a lock in layout: its holder as a lock's.
        v["holders"] = holders_json(claim);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::{attempt_key_of, glob_matches};

    /// Each pattern against the same names, with what `SCAN MATCH` of
    /// Redis 7.0 answered for them.
    #[test]
    fn globs_match_as_scan_match_does() {
        let names: [&[u8]; 13] = [
            b"jobn",
            b"redguard_once_attempt:{jobn}",
            b"a}",
            b"ab",
            b"a*b",
            b"a\\b",
            b"abc",
            b"b",
            b"x-y",
            b"a]",
            b"a^",
            b"aXb",
            b"a[b",
        ];
        let cases: [(&str, &[&str]); 19] = [
            ("*n}", &["redguard_once_attempt:{jobn}"]),
            ("job?", &["jobn"]),
            ("a[bc]", &["ab"]),
            ("a[^b]", &["a]", "a^", "a}"]),
            ("a[a-c]", &["ab"]),
            ("a[c-a]", &["ab"]),
            ("a\\*b", &["a*b"]),
            ("a\\\\b", &["a\\b"]),
            ("a[b", &["ab"]),
            ("a[]", &[]),
            ("a[]]", &[]),
            (
                "a*",
                &["a*b", "aXb", "a[b", "a\\b", "a]", "a^", "ab", "abc", "a}"],
            ),
            ("*b", &["a*b", "aXb", "a[b", "a\\b", "ab", "b"]),
            ("a[\\]]", &["a]"]),
            ("a?b", &["a*b", "aXb", "a[b", "a\\b"]),
            ("a*c*", &["abc"]),
            (
                "[a-b]*",
                &[
                    "a*b", "aXb", "a[b", "a\\b", "a]", "a^", "ab", "abc", "a}", "b",
                ],
            ),
            ("a[^]", &["a]", "a^", "ab", "a}"]),
            ("a\\", &[]),
        ];
        for (pattern, want) in cases {
            let mut got: Vec<&str> = names
                .iter()
                .filter(|n| glob_matches(pattern.as_bytes(), n))
                .map(|n| std::str::from_utf8(n).unwrap())
                .collect();
            let mut want = want.to_vec();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "pattern {pattern:?}");
        }
        assert!(glob_matches(b"*", b""));
        assert!(glob_matches(b"", b""));
        assert!(!glob_matches(b"", b"a"));
        assert!(glob_matches(b"a\\", b"a\\"));
        // Many stars cost no more than the name's length each.
        let long = vec![b'a'; 4_000];
        assert!(!glob_matches(
            &[b"*a".repeat(40), b"b".to_vec()].concat(),
            &long
        ));
    }

    #[test]
    fn an_attempt_record_names_its_run_once_key() {
        assert_eq!(
            attempt_key_of(b"redguard_once_attempt:{jobn}"),
            Some(b"jobn".to_vec())
        );
        assert_eq!(
            attempt_key_of(b"redguard_once_attempt:a{b}"),
            Some(b"a{b}".to_vec())
        );
        assert_eq!(attempt_key_of(b"jobn"), None);
    }
}
