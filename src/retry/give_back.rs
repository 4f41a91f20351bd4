//! Giving back a grant whose reply was lost.
//!
//! An acquire whose reply never came (the connection broke, or the reply
//! could not be read) may or may not have run on the server. The caller
//! gives the grant back before the error reaches its own caller: a hold
//! nobody knows of would block everyone for a whole lease. That give-back
//! can meet the same fault: its connection breaks, or its reply is
//! unreadable, and it may not have run either. It is idempotent (it ends
//! the holds of one holder id, or one permit id), and nothing else of that
//! holder runs while the failing call waits for it, so it goes once more,
//! on a fresh connection (a broken or unreadable connection is never
//! reused). Not after a timeout: the server may be frozen, and the failing
//! call has already waited its own response timeout; the grant, if there
//! is one, then expires with its lease.

use crate::error::{Error, Result};

/// Runs `give_back`, and once more when its connection broke or its reply
/// could not be read; returns the last attempt's result.
pub(crate) fn give_back<T>(mut give_back: impl FnMut() -> Result<T>) -> Result<T> {
    match give_back() {
        Err(Error::Connection(_) | Error::Protocol(_)) => give_back(),
        done => done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempts(first: Error) -> (Result<u8>, u8) {
        let mut calls = 0;
        let mut first = Some(first);
        let result = give_back(|| {
            calls += 1;
            match first.take() {
                Some(e) => Err(e),
                None => Ok(calls),
            }
        });
        (result, calls)
    }

    #[test]
    fn a_broken_or_unreadable_give_back_goes_once_more() {
        let broken = Error::io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(broken.is_connection(), "{broken:?}");
        assert!(matches!(attempts(broken), (Ok(2), 2)));
        assert!(matches!(
            attempts(Error::Protocol("garbage".into())),
            (Ok(2), 2)
        ));
    }

    #[test]
    fn a_timed_out_or_refused_give_back_does_not() {
        let (result, calls) = attempts(Error::Timeout {
            kind: crate::error::TimeoutKind::Reply,
            limit: std::time::Duration::from_secs(1),
            server: None,
            about: None,
        });
        assert!(result.unwrap_err().is_timeout());
        assert_eq!(calls, 1);
        let (result, calls) = attempts(Error::InvalidArgument("x".into()));
        assert!(matches!(result, Err(Error::InvalidArgument(_))));
        assert_eq!(calls, 1);
    }

    #[test]
    fn a_second_failure_is_the_answer() {
        let mut calls = 0;
        let result: Result<()> = give_back(|| {
            calls += 1;
            Err(Error::Protocol(format!("garbage {calls}")))
        });
        assert_eq!(calls, 2);
        assert!(matches!(result, Err(Error::Protocol(m)) if m == "garbage 2"));
    }
}
