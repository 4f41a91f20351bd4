//! `SCAN` paging over the keys of one node: the one pager of the library
//! (`list_locks`, the holder-record searches). A page is one `SCAN` call
//! of [`SCAN_COUNT`] keys, and what the caller does with its keys runs on
//! the same connection, in the same checkout.

use super::{NodeId, Source};
use crate::error::{Error, Result};

/// Keys asked for per `SCAN` call (its `COUNT`).
pub(crate) const SCAN_COUNT: usize = 1000;

/// Most `SCAN` calls per node: a bound on the loop far above what any
/// keyspace needs (Redis returns at least one key per non-empty call).
pub(crate) const MAX_PAGES: usize = 10_000_000;

/// The pages of a `SCAN … MATCH pattern` over node `node`.
pub(crate) struct KeyScan<'a> {
    source: &'a Source,
    node: NodeId,
    pattern: &'a [u8],
    /// `TYPE t`: the server skips keys of other types.
    of_type: Option<&'static str>,
    cursor: u64,
    pages: usize,
    done: bool,
}

impl<'a> KeyScan<'a> {
    /// A scan of the keys of node `node` of `source` that match the glob
    /// `pattern`, of Redis type `of_type` only when given (`hash`,
    /// `string`). No I/O before [`KeyScan::next_page`].
    pub(crate) fn new(
        source: &'a Source,
        node: NodeId,
        pattern: &'a [u8],
        of_type: Option<&'static str>,
    ) -> KeyScan<'a> {
        KeyScan {
            source,
            node,
            pattern,
            of_type,
            cursor: 0,
            pages: 0,
            done: false,
        }
    }

    /// The next page: one `SCAN` call, then `then(conn, keys)` on the same
    /// connection (`keys` may be empty: a page of a sparse keyspace).
    /// `None` once the scan is over: the cursor came back to 0, a page
    /// failed, or [`MAX_PAGES`] pages were read.
    ///
    /// # Errors
    ///
    /// Connection, timeout and server errors of the `SCAN` (an ACL user
    /// without `+scan`) or of `then`, which end the scan.
    pub(crate) fn next_page<T>(
        &mut self,
        mut then: impl FnMut(&mut redis::Connection, Vec<Vec<u8>>) -> Result<T>,
    ) -> Option<Result<T>> {
        if self.done || self.pages >= MAX_PAGES {
            return None;
        }
        self.pages += 1;
        let (cursor, pattern, of_type) = (self.cursor, self.pattern, self.of_type);
        let page = self.source.with_node_conn(self.node, |conn| {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            if let Some(t) = of_type {
                scan.arg("TYPE").arg(t);
            }
            let (next, keys): (u64, Vec<Vec<u8>>) = scan.query(conn).map_err(Error::redis)?;
            Ok((next, then(conn, keys)?))
        });
        match page {
            Ok((next, value)) => {
                self.cursor = next;
                self.done = next == 0;
                Some(Ok(value))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
