//! The storage side of fencing: [`Client::fenced_set`] refuses writes that
//! carry a [`FencingToken`] older than one it already accepted.
//!
//! A lease can run out while its holder is paused (a GC pause, `SIGSTOP`, a
//! slow disk) and the holder may not notice before it writes. Locks alone
//! cannot stop that write; the storage can, if every write carries the
//! token of the grant it was made under and the storage refuses tokens older
//! than the newest it has seen (Kleppmann, "How to do distributed locking",
//! 2016).

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys;
use crate::lock::FencingToken;
use crate::scripts::{self, FencedSet};

/// Outcome of [`Client::fenced_set`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a rejected write changed nothing"]
pub enum FencedWrite {
    /// Stored: the token was at least as new as every token accepted at the
    /// key before.
    Written,
    /// Refused, nothing changed: the key has accepted a newer token.
    Rejected {
        /// The newest token accepted at the key so far.
        last_token: FencingToken,
    },
}

impl FencedWrite {
    /// `true` for [`FencedWrite::Written`].
    pub fn is_written(&self) -> bool {
        matches!(self, FencedWrite::Written)
    }
}

impl Client {
    /// Stores `value` at `key` unless `key` has already accepted a write
    /// with a newer fencing token: the storage side of fencing, as one
    /// atomic Lua script. `key` holds a hash with fields `value` and `token`
    /// (the newest token accepted); read it with [`Client::fenced_get`].
    ///
    /// A token equal to the last one is accepted (one holder writing twice
    /// under the same grant). This is what makes a paused holder harmless:
    /// once its lease expired and the next holder wrote with its larger
    /// token, the late write of the paused holder is
    /// [`FencedWrite::Rejected`].
    ///
    /// Use the same pattern for other storage: keep the newest token next
    /// to the data, and make "compare and write" one atomic step (a
    /// conditional `UPDATE ... WHERE token <= ?`, a transaction, a script).
    ///
    /// `key` should share the lock's hash tag (e.g. `"{orders:42}:data"`
    /// for the lock `"orders:42"`) only if both must live in one Redis
    /// Cluster slot; nothing here requires it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty key or one longer than
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN), [`Error::WrongType`] when
    /// something other than a hash is stored at `key` (left untouched),
    /// [`Error::Shutdown`], connection, timeout and server errors.
    pub fn fenced_set(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        token: impl Into<FencingToken>,
    ) -> Result<FencedWrite> {
        let token = token.into();
        let key = key.as_ref();
        keys::validate_name(key).map_err(Error::InvalidArgument)?;
        self.check_open()?;
        let outcome = self.with_conn(key, |conn| {
            scripts::fenced_set(conn, key, token.get(), value.as_ref())
        })?;
        Ok(match outcome {
            FencedSet::Written => FencedWrite::Written,
            FencedSet::Rejected(last) => FencedWrite::Rejected {
                last_token: FencingToken::new(last),
            },
        })
    }

    /// The value and token last stored at `key` by [`Client::fenced_set`],
    /// or `None` when nothing was.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key, [`Error::WrongType`] when
    /// something other than a hash is stored at `key`, [`Error::Protocol`]
    /// when the hash holds no valid token, connection, timeout and server
    /// errors.
    pub fn fenced_get(&self, key: impl AsRef<[u8]>) -> Result<Option<(Vec<u8>, FencingToken)>> {
        let key = key.as_ref();
        keys::validate_name(key).map_err(Error::InvalidArgument)?;
        let (value, token): (Option<Vec<u8>>, Option<String>) = self.with_conn(key, |conn| {
            redis::cmd("HMGET")
                .arg(key)
                .arg("value")
                .arg("token")
                .query(conn)
                .map_err(|e| Error::from_redis(e, key))
        })?;
        match (value, token) {
            (None, None) => Ok(None),
            (Some(value), Some(token)) => match token.parse::<u64>() {
                Ok(token) => Ok(Some((value, FencingToken::new(token)))),
                Err(_) => Err(Error::Protocol(format!(
                    "fenced key holds the token {token:?}"
                ))),
            },
            _ => Err(Error::Protocol(
                "fenced key lacks its value or its token".into(),
            )),
        }
    }
}
