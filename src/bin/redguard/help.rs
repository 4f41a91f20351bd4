//! The long help texts that are tables rather than sentences: logging,
//! `exec`'s exit statuses, `status`'s exit statuses and JSON fields. Kept
//! apart from the argument definitions so that each reads on its own; the
//! integration tests read them back from `--help`.

/// Logging, for the top-level help.
pub(crate) const LOGGING_HELP: &str = "\
Logging:
  Off by default: an error is one line on stderr. -v logs info, -vv debug,
  -vvv trace, on stderr. RUST_LOG takes env_logger filters instead
  (RUST_LOG=debug, RUST_LOG=redguard=trace); REDGUARD_LOG is read the same
  way when RUST_LOG is not set. -v wins over both for what it covers.";

/// `redguard exec`'s exit statuses.
pub(crate) const EXEC_EXIT_HELP: &str = "\
Exit status:
  0          CMD ran and succeeded
  N          CMD ran and exited with N: its own status passes through
  128+N      CMD (or its supervisor) was killed by signal N, or redguard
             got signal N while waiting (CMD not run)
  64         bad usage: unknown option, bad duration, bad URL, no CMD, a
             lease too short for the kill grace (2 × (grace + 250ms))
  65         NAME holds a value that is not a lock (left untouched); with
             --permits, the semaphore has another count
  69         Redis unreachable, too slow, or answering with an error; with
             --min-replica-acks, too few replicas acknowledged the grant
  70         the lease was lost while CMD ran, or ran low with no renewal
             and CMD was stopped before it ended (--on-lost kill), or the
             release after CMD found it lost
  71         the OS refused something redguard needs (signal handlers,
             supervising CMD)
  74         CMD ran, but the release after it was refused or did not go
             through before the lease ended (the message says whether
             the key is still there); never CMD's own status
  75         the lock could not be had in time (--conflict-exit-code)
  77         Redis refused the credentials, or its ACL denies a command,
             key or channel
  126        CMD cannot be executed (nothing was locked)
  127        CMD was not found (nothing was locked)";

/// `redguard status`'s exit statuses and JSON fields.
pub(crate) const LIST_HELP: &str = "\
Text: one line per name: name, kind, its own columns, lease left, and a
waiters column (connections subscribed, waiters recorded); then:
  lock                one line per holder (id, hold count, host, pid, held
                      for; \"no record\" for a Java holder); fair: one line
                      per queued waiter in order (deadline, host, pid,
                      program, waiting for) and the count of foreign
                      (queued, no record) waiters
  expiring_semaphore  available and held permits; one line per permit
                      (lease left, holder host, pid, program, held for;
                      \"DEAD: pid not running on this host\" when its
                      process is gone)
  semaphore           available permits
  latch               count
  counter             a bare integer: a plain semaphore and a latch share
                      this layout, so the kind is named only where a
                      redguard waiter (or an expiring permit) tells it;
                      listed then, or with --kind counter every integer
                      (an application's counters too; else only counted)
  once                state (running, done, failed, abandoned,
                      timed_out), runner (host, pid, program), age (of
                      the run in progress, or since the last one ended)
and for every kind one line per recorded waiter: holder id, host, pid,
program, how long it has waited and what it waits as.

JSON (--json), one array of objects with the fields of `redguard status
--json` for that kind (schema, name, kind, ...); kind is one of
reentrant, fair, fenced, read_write, expiring_semaphore, semaphore, latch,
counter, once, and with --all other (with redis_type). once adds age_ms and
subscribers; kind is \"once\" for a run of `redguard once` in progress.
The array stays an array: each object carries its schema (an empty list
carries none).

--older-than DUR keeps what one of its holders has held at least DUR (by
its holder record), to find stuck holders.";

pub(crate) const STATUS_HELP: &str = "\
Exit status:
  0   something is held: a lock's holders, an expiring permit, a run of
      `redguard once` in progress
  1   nothing is held: no key, a free lock, a counter, a finished run
  65  NAME holds a value that is not a lock or synchronizer (kind other)
  64, 69, 77 as for every command

Names are printed escaped: a byte that is not UTF-8 as \\xHH, a backslash
as \\\\ (in text also a control character as \\xHH and a quote as \\\").

JSON (--json), one object; times named *_in_ms count from now, times named
*_unix_ms are Unix times in ms by this host's clock. Within one schema
fields are only added, never renamed, removed or given another meaning:
  schema              1, the version of this shape
  name                the name, escaped as above
  kind                free, reentrant, fair, fenced, read_write,
                      expiring_semaphore, semaphore, latch, counter, once
                      or other (a plain semaphore and a latch are the
                      same bare integer: counter, unless a redguard waiter
                      names the kind)
  held                true when something is held (see Exit status)
  expires_in_ms       time left on the key; null for no key or no expiry
  expires_at_unix_ms  when the key expires; null likewise
  holders             locks: [{id, count, record, host, pid, program,
                      version, held_for_ms, held_since_unix_ms,
                      hold_kind}], holder ids, hold counts and what
                      the holder's record says (record false and the
                      rest null: no record, as for a Java holder; held_*
                      null: start not recorded); hold_kind: reentrant,
                      fair, fenced, read, write or once
  subscribers         locks: waiting clients subscribed to the unlock
                      channel (one per client process, holders listening
                      for a force unlock not counted; fair: also the
                      queued waiters' channels; on a Cluster, classic
                      and sharded ones of the lock's master);
                      expiring_semaphore, semaphore, latch and once: of
                      their channel; null when unknown
  mode                read_write: \"read\" or \"write\"
  queue               fair: [{position, id, deadline_unix_ms, record,
                      host, pid, program, kind, waiting_since_unix_ms,
                      waiting_for_ms}], first in line first (deadline null
                      when the waiter has none; record false and the rest
                      null for a waiter without a record, as Redisson's)
  foreign_waiters     fair: queued waiters without a record (Redisson's,
                      or redguard's with records off); null when the
                      records could not be searched
  waiters             every kind: [{id, host, pid, program, kind,
                      waiting_since_unix_ms, waiting_for_ms}], the
                      redguard waiters that record their wait, longest
                      waiting first (kind: reentrant, fair, fenced, read,
                      write, permit, semaphore, latch or once;
                      waiting_since by the waiter's clock); null when the
                      records could not be searched
  value               counter, semaphore, latch: the integer stored (a
                      semaphore's available permits or a latch's count)
  count               latch: its count
  semaphore_subscribers, latch_subscribers
                      counter: waiting clients subscribed to the
                      semaphore's and to the latch's channel
  available           expiring_semaphore, semaphore: permits available
  held_permits        expiring_semaphore: how many permits are held
  permits             expiring_semaphore: [{id, client, expires_in_ms,
                      expires_at_unix_ms, record, host, pid, program,
                      version, held_for_ms, held_since_unix_ms, alive}],
                      the permits held, their lease left and what their
                      holder's record says (as for a lock's holders);
                      client: the holding client's id for `redguard
                      who` (null without a record); alive: whether the
                      holder's pid runs, for a holder on this host (by
                      host name), else null
  ran_at_unix_ms, by, exit_status, host, pid, too_long
                      once: when the finished run was recorded, its
                      holder id, CMD's exit status, host and pid (null
                      when not recorded by redguard); too_long: the
                      record's fields too long to read (by null then)
  started_at_unix_ms, duration_ms
                      once, done: when that run started, and how long
  last_attempt        once: the last attempt whatever its end, or null:
                      {state, holder, host, pid, program,
                      started_at_unix_ms, ended_at_unix_ms, duration_ms,
                      exit_status, signal, too_long} (holder, host and
                      program null when too long to read; too_long
                      names them)
  state               once: \"running\", \"done\", or when nothing is
                      recorded the last attempt's \"failed\",
                      \"abandoned\" or \"timed_out\" (a run in progress
                      is a fenced lock in layout: it shows as kind once
                      when its runner's holder record or its running
                      last attempt says so; `redguard once --status KEY`
                      always names it a run)
  holder              once, running: the runner's holder id
  runner              once: {id, record, host, pid, program, version,
                      held_for_ms, held_since_unix_ms}: the runner's
                      holder id and its client's record, while that
                      client lives
  redis_type          other: the Redis type of the value";
