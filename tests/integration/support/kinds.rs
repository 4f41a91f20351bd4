//! The lock kinds whose scripts check the holder and can lose a grant's
//! reply: the cases of the holder-check and lost-grant tests.

/// One kind of hold: a lock kind, an expiring permit or a run-once claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Reentrant,
    Fair,
    Fenced,
    Read,
    Write,
    Permit,
    Once,
}

/// Every [`Kind`].
pub const KINDS: [Kind; 7] = [
    Kind::Reentrant,
    Kind::Fair,
    Kind::Fenced,
    Kind::Read,
    Kind::Write,
    Kind::Permit,
    Kind::Once,
];
