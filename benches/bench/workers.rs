//! One worker's view of a lock library: redguard, the raw floor, or
//! redguard's semaphore.

use std::sync::Arc;

use redguard::{Client, Lock, Semaphore};

use crate::protocol::{FLOOR_LOCK_LUA, FLOOR_UNLOCK_LUA, LOCK_TTL_MS, now_ns};

/// What S1/S2/S3 need from a library. Implementations are made on the
/// worker's own thread (redguard guards are `!Send`).
pub(crate) trait Worker {
    /// One uncontended acquire (must succeed at once) -> release, on the
    /// worker's name `name_index` (modulo its name count).
    fn cycle(&mut self, name_index: usize) -> Result<(), String>;
    /// The same on any name (warm-up).
    fn cycle_named(&mut self, name: &str) -> Result<(), String>;
    /// S2: blocking acquire with the library's wait policy; `held()` runs
    /// while the lock is held, then the lock is released.
    fn contended(&mut self, hard_deadline: u64, held: &mut dyn FnMut()) -> Result<bool, String>;
}

/// redguard: each worker its own `Lock` handles on the shared client.
struct GuardWorker {
    client: Client,
    locks: Vec<Lock>,
}

impl GuardWorker {
    fn new(client: &Client, names: &[String]) -> GuardWorker {
        GuardWorker {
            client: client.clone(),
            locks: names.iter().map(|n| client.lock(n)).collect(),
        }
    }
}

fn guard_cycle(lock: &Lock) -> Result<(), String> {
    match lock.try_lock() {
        Ok(Some(guard)) => guard.unlock().map_err(|e| e.to_string()),
        Ok(None) => Err("lock busy".into()),
        Err(e) => Err(e.to_string()),
    }
}

impl Worker for GuardWorker {
    fn cycle(&mut self, i: usize) -> Result<(), String> {
        guard_cycle(&self.locks[i % self.locks.len()])
    }

    fn cycle_named(&mut self, name: &str) -> Result<(), String> {
        guard_cycle(&self.client.lock(name))
    }

    fn contended(&mut self, _hard: u64, held: &mut dyn FnMut()) -> Result<bool, String> {
        let guard = self.locks[0].lock().map_err(|e| e.to_string())?;
        held();
        guard.unlock().map_err(|e| e.to_string())?;
        Ok(true)
    }
}

/// The raw floor: one blocking connection, two EVALSHA round trips per cycle;
/// in S2 it re-sends the lock script at once when busy (spin).
struct FloorWorker {
    con: redis::Connection,
    token: String,
    lock_sha: String,
    unlock_sha: String,
    names: Vec<String>,
}

impl FloorWorker {
    fn new(url: &str, w: usize, names: &[String]) -> Result<FloorWorker, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let mut con = client.get_connection().map_err(|e| e.to_string())?;
        let lock_sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(FLOOR_LOCK_LUA)
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        let unlock_sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(FLOOR_UNLOCK_LUA)
            .query(&mut con)
            .map_err(|e| e.to_string())?;
        Ok(FloorWorker {
            con,
            token: format!("floor:{}:w{w}", std::process::id()),
            lock_sha,
            unlock_sha,
            names: names.to_vec(),
        })
    }

    fn try_lock(&mut self, i: usize) -> Result<bool, String> {
        let name = &self.names[i % self.names.len()];
        self.try_lock_named(&name.clone())
    }

    fn unlock(&mut self, i: usize) -> Result<(), String> {
        let name = &self.names[i % self.names.len()];
        self.unlock_named(&name.clone())
    }

    fn try_lock_named(&mut self, name: &str) -> Result<bool, String> {
        let r: Option<i64> = redis::cmd("EVALSHA")
            .arg(&self.lock_sha)
            .arg(1)
            .arg(name)
            .arg(&self.token)
            .arg(LOCK_TTL_MS)
            .query(&mut self.con)
            .map_err(|e| e.to_string())?;
        Ok(r.is_none())
    }

    fn unlock_named(&mut self, name: &str) -> Result<(), String> {
        let r: Option<i64> = redis::cmd("EVALSHA")
            .arg(&self.unlock_sha)
            .arg(1)
            .arg(name)
            .arg(&self.token)
            .arg(LOCK_TTL_MS)
            .query(&mut self.con)
            .map_err(|e| e.to_string())?;
        r.map(|_| ()).ok_or_else(|| "unlock: not owner".into())
    }
}

impl Worker for FloorWorker {
    fn cycle(&mut self, i: usize) -> Result<(), String> {
        if !self.try_lock(i)? {
            return Err("lock busy".into());
        }
        self.unlock(i)
    }

    fn cycle_named(&mut self, name: &str) -> Result<(), String> {
        if !self.try_lock_named(name)? {
            return Err("lock busy".into());
        }
        self.unlock_named(name)
    }

    fn contended(&mut self, hard: u64, held: &mut dyn FnMut()) -> Result<bool, String> {
        loop {
            if self.try_lock(0)? {
                break;
            }
            if now_ns() >= hard {
                return Ok(false);
            }
        }
        held();
        self.unlock(0)?;
        Ok(true)
    }
}

/// redguard's semaphore (Redisson's `RSemaphore`): a cycle takes one
/// permit with `try_acquire(1)` and gives it back, one script call each.
/// Every worker uses the same semaphore, whatever names it is given.
pub(crate) struct SemaphoreWorker {
    semaphore: Semaphore,
}

impl Worker for SemaphoreWorker {
    fn cycle(&mut self, _i: usize) -> Result<(), String> {
        match self.semaphore.try_acquire(1) {
            Ok(Some(permit)) => permit.release().map_err(|e| e.to_string()),
            Ok(None) => Err("no permit free".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn cycle_named(&mut self, _name: &str) -> Result<(), String> {
        self.cycle(0)
    }

    fn contended(&mut self, _hard: u64, held: &mut dyn FnMut()) -> Result<bool, String> {
        let permit = self.semaphore.acquire(1).map_err(|e| e.to_string())?;
        held();
        permit.release().map_err(|e| e.to_string())?;
        Ok(true)
    }
}

/// Makes a worker for worker index `w` over `names`, on the calling thread.
pub(crate) type Factory =
    Arc<dyn Fn(usize, &[String]) -> Result<Box<dyn Worker>, String> + Send + Sync>;

pub(crate) fn guard_factory(client: &Client) -> Factory {
    let client = client.clone();
    Arc::new(move |_w, names| Ok(Box::new(GuardWorker::new(&client, names)) as Box<dyn Worker>))
}

pub(crate) fn floor_factory(url: &str) -> Factory {
    let url = url.to_owned();
    Arc::new(move |w, names| {
        FloorWorker::new(&url, w, names).map(|f| Box::new(f) as Box<dyn Worker>)
    })
}

/// Workers on the semaphore `name` of `client` (its permits set by the
/// caller).
pub(crate) fn semaphore_factory(client: &Client, name: &str) -> Factory {
    let semaphore = client.semaphore(name);
    Arc::new(move |_w, _names| {
        Ok(Box::new(SemaphoreWorker {
            semaphore: semaphore.clone(),
        }) as Box<dyn Worker>)
    })
}
