//! Reads of many keys of one node in one round trip, each key's commands a
//! group, with the redirections of a Cluster followed per key: the reads
//! of a `SCAN` page (`list_locks`).
//!
//! A node lists, in a `SCAN`, the keys of a slot it is importing, and
//! answers their commands only after `ASKING` (else `MOVED` to the slot's
//! owner, which answers `ASK` back); a slot migrating away answers `ASK`
//! for its keys already moved. So a group whose first reply is a
//! redirection is sent again: first all of them to the same node, each
//! command after `ASKING` (one more round trip, enough for an importing
//! slot), then each group still turned away on its own, following `MOVED`,
//! `ASK` and `TRYAGAIN` within the call's budget as every keyed call does.

use redis::Value;

use super::{NodeId, Source};
use crate::error::{Error, Result};

/// One key's commands: sent together, the first on `key` itself (its
/// reply tells whether the node serves the key).
pub(crate) struct Group {
    pub(crate) key: Vec<u8>,
    pub(crate) cmds: Vec<redis::Cmd>,
}

/// The first reply of a group, when it is a redirection (`MOVED`, `ASK`,
/// `TRYAGAIN`, `CLUSTERDOWN`).
fn redirection(replies: &[Value]) -> Option<Error> {
    match replies.first() {
        Some(Value::ServerError(e)) => {
            let err = Error::redis(e.clone().into());
            err.is_redirect().then_some(err)
        }
        _ => None,
    }
}

/// Sends `groups` on `conn` in one pipeline (each command after `ASKING`
/// when `asking`); one vector of replies per group. A command's error is
/// its reply, not the call's.
fn send(conn: &mut redis::Connection, groups: &[&Group], asking: bool) -> Result<Vec<Vec<Value>>> {
    let mut pipe = redis::pipe();
    for group in groups {
        for cmd in &group.cmds {
            if asking {
                pipe.cmd("ASKING").ignore();
            }
            pipe.add_command(cmd.clone());
        }
    }
    pipe.ignore_errors();
    let replies: Vec<Value> = pipe.query(conn).map_err(Error::redis)?;
    let mut replies = replies.into_iter();
    Ok(groups
        .iter()
        .map(|g| replies.by_ref().take(g.cmds.len()).collect())
        .collect())
}

impl Source {
    /// Runs `groups` (keys that node `node` listed) on that node in one
    /// round trip and returns each group's replies, in order. On a Cluster,
    /// the groups a redirection turned away are sent again as the module
    /// docs say.
    ///
    /// # Errors
    ///
    /// Connection, timeout and server errors of a round trip as a whole; a
    /// redirection still met when a group's budget is spent.
    pub(crate) fn node_batch(&self, node: NodeId, groups: &[Group]) -> Result<Vec<Vec<Value>>> {
        let all: Vec<&Group> = groups.iter().collect();
        let mut out = self.with_node_conn(node, |conn| send(conn, &all, false))?;
        let Source::Cluster(cluster) = self else {
            return Ok(out);
        };
        let turned: Vec<usize> = (0..out.len())
            .filter(|&i| redirection(&out[i]).is_some())
            .collect();
        if turned.is_empty() {
            return Ok(out);
        }
        let again: Vec<&Group> = turned.iter().map(|&i| &groups[i]).collect();
        let replies = self.with_node_conn(node, |conn| send(conn, &again, true))?;
        for (&i, replies) in turned.iter().zip(replies) {
            out[i] = replies;
        }
        for &i in &turned {
            if redirection(&out[i]).is_none() {
                continue;
            }
            let group = &groups[i];
            let followed = cluster.with_conn_asking(&group.key, |conn, asking| {
                let replies = send(conn, &[group], asking)?.pop().unwrap_or_default();
                match redirection(&replies) {
                    Some(e) => Err(e),
                    None => Ok(replies),
                }
            });
            match followed {
                Ok(replies) => out[i] = replies,
                // A key whose braces a lock name could not have: no lock
                // of redguard's or Redisson's, left as the node answered.
                Err(Error::InvalidArgument(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(resp: &str) -> Value {
        redis::parse_redis_value(resp.as_bytes()).unwrap()
    }

    #[test]
    fn a_group_is_turned_away_by_its_first_reply_only() {
        let moved = reply("-MOVED 2874 127.0.0.1:7001\r\n");
        let ask = reply("-ASK 2874 127.0.0.1:7001\r\n");
        let again = reply("-TRYAGAIN Multiple keys request during rehashing of slot\r\n");
        let wrong = reply("-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        for turned in [&moved, &ask, &again] {
            assert!(redirection(&[turned.clone(), Value::Int(1)]).is_some());
        }
        // A key beside the group's in another slot answers for itself.
        assert!(redirection(&[Value::Int(-2), moved]).is_none());
        assert!(redirection(&[wrong]).is_none());
        assert!(redirection(&[]).is_none());
    }
}
