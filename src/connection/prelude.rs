//! Commands that ride ahead of this thread's next call to one server: packed
//! by a layer above (a waiting thread's holder-record entry), sent in the
//! same write as the call ([`Framed`]), their replies read and dropped. The transport
//! knows only bytes, a count of replies, and the node they are for.
//!
//! One armed prelude per thread at a time: the state lives in a thread
//! local, and only this thread's next call to the same node of the same
//! [`Source`] carries it.

use std::cell::RefCell;

use redis::ConnectionLike;

use super::framed::Framed;
use super::{NodeId, Source};

/// This thread's prelude, while one is claimed.
struct Armed {
    /// The source's address: rides only on calls to the same deployment.
    source: usize,
    /// The node the commands are for.
    node: NodeId,
    /// Packed commands waiting for the next call to the node, and their
    /// count.
    packed: Option<(Vec<u8>, usize)>,
    /// Some commands went out since the claim (or the last hand-over).
    sent: bool,
}

thread_local! {
    static ARMED: RefCell<Option<Armed>> = const { RefCell::new(None) };
}

fn address(source: &Source) -> usize {
    std::ptr::from_ref(source) as usize
}

/// Claims this thread's prelude for node `node` of `source`; `false` when
/// another claim holds it (a wait inside a wait: only the outer one rides).
pub(crate) fn claim(source: &Source, node: NodeId) -> bool {
    ARMED
        .try_with(|a| {
            let mut a = a.borrow_mut();
            if a.is_some() {
                return false;
            }
            *a = Some(Armed {
                source: address(source),
                node,
                packed: None,
                sent: false,
            });
            true
        })
        .unwrap_or(false)
}

/// Arms the claimed prelude with `count` packed commands, replacing any not
/// yet sent. Nothing happens without a claim.
pub(crate) fn arm(packed: Vec<u8>, count: usize) {
    let _ = ARMED.try_with(|a| {
        if let Some(armed) = a.borrow_mut().as_mut() {
            armed.packed = Some((packed, count));
        }
    });
}

/// The commands that ride on this thread's call to node `node` of
/// `source`, if any are armed: packed, and how many.
pub(crate) fn take(source: &Source, node: NodeId) -> Option<(Vec<u8>, usize)> {
    let at = address(source);
    ARMED
        .try_with(|a| {
            let mut a = a.borrow_mut();
            let armed = a.as_mut().filter(|a| a.source == at && a.node == node)?;
            let packed = armed.packed.take()?;
            armed.sent = true;
            Some(packed)
        })
        .ok()
        .flatten()
}

/// Disarms a claim for node `node` of `source` without ending it: `true`
/// when commands of it went out (and clears that, so that the claim's end
/// does not report them again).
pub(crate) fn hand_over(source: &Source, node: NodeId) -> bool {
    let at = address(source);
    ARMED
        .try_with(|a| {
            let mut a = a.borrow_mut();
            a.as_mut()
                .filter(|a| a.source == at && a.node == node)
                .is_some_and(|armed| {
                    armed.packed = None;
                    std::mem::take(&mut armed.sent)
                })
        })
        .unwrap_or(false)
}

/// Ends this thread's claim: `true` when commands of it went out.
pub(crate) fn release() -> bool {
    ARMED
        .try_with(|a| a.borrow_mut().take())
        .ok()
        .flatten()
        .is_some_and(|armed| armed.sent)
}

/// The commands armed on this thread for the server of `key` on `source`
/// (see [`take`]).
pub(crate) fn take_for(source: &Source, key: &[u8]) -> Option<(Vec<u8>, usize)> {
    take(source, source.node_of(key))
}

/// Runs `f` on `conn`, a plain connection to the server of `key`, with
/// this thread's armed prelude riding ahead of its first command (see
/// [`Framed`]).
pub(crate) fn ride_plain<T>(
    conn: &mut redis::Connection,
    source: &Source,
    key: &[u8],
    f: impl FnOnce(&mut dyn ConnectionLike) -> T,
) -> T {
    match take_for(source, key) {
        None => f(conn),
        before => f(&mut Framed::plain(conn).with_before(before)),
    }
}
