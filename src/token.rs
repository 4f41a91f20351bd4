//! One-use tokens: [`Client::issue_token`] hands out a random [`Token`]
//! stored under a scope for a while; [`Client::consume_token`] lets exactly
//! one request through with it.
//!
//! This is the server-issued idempotency token: the server issues a token
//! with the form (or the first response), the client sends it back with
//! its request, and the server consumes it before doing the work. A
//! retried or doubled request carries the same token and finds it gone.
//!
//! Consuming **deletes first**: one `DEL` of the token's key, which Redis
//! runs atomically, so of any number of concurrent consumers exactly one is
//! told `true`. There is no read-then-delete window in which two requests
//! could both see the token. A consumer that is told `true` and then
//! crashes has used the token up: pair tokens with work that is itself
//! safe to retry, or with [`Client::once`](crate::Client::once), when a
//! crash between consume and work must not lose the request.
//!
//! Redisson has no counterpart; the seed's recommendation (issue a token,
//! delete it first when the request comes) is what these two calls do.
//!
//! # Keys
//!
//! One string key per live token, `redguard_token:{<scope>}:<token>`
//! (value `1`, `PX` = the token's ttl): every token of a scope carries the
//! scope as hash tag and lives in one cluster slot. Issuing uses
//! `SET ... NX PX`, so a token is never written over an existing one.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::TryRngCore;
use rand::rngs::OsRng;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys;
use crate::once::ttl_ms;

/// How many random bytes a [`Token`] carries: 16 (128 bits), drawn from the
/// operating system's CSPRNG.
pub const TOKEN_BYTES: usize = 16;

/// A one-use token from [`Client::issue_token`]: 128 bits from the
/// operating system's cryptographically secure random number generator.
///
/// Opaque. Its text form (`Display` / `FromStr`) is 32 lowercase hex
/// digits, to hand to a client (a form field, a header) and parse back
/// from its request. `Debug` shows only the first 4 digits, so logging a
/// token does not give it away.
///
/// # Examples
///
/// ```
/// let token: redguard::Token = "00112233445566778899aabbccddeeff".parse()?;
/// assert_eq!(token.to_string(), "00112233445566778899aabbccddeeff");
/// assert!("not a token".parse::<redguard::Token>().is_err());
/// # Ok::<(), redguard::ParseTokenError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token([u8; TOKEN_BYTES]);

impl Token {
    /// A fresh token from the operating system's CSPRNG.
    fn random() -> Result<Token> {
        let mut bytes = [0u8; TOKEN_BYTES];
        OsRng
            .try_fill_bytes(&mut bytes)
            .map_err(|e| Error::Random(e.to_string()))?;
        Ok(Token(bytes))
    }

    /// The token's 16 bytes.
    pub fn as_bytes(&self) -> &[u8; TOKEN_BYTES] {
        &self.0
    }

    fn hex(&self) -> [u8; 2 * TOKEN_BYTES] {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 2 * TOKEN_BYTES];
        for (i, b) in self.0.iter().enumerate() {
            out[2 * i] = DIGITS[usize::from(b >> 4)];
            out[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
        }
        out
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = self.hex();
        // Only ASCII hex digits were written.
        f.write_str(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = self.hex();
        let shown = std::str::from_utf8(&hex[..4]).map_err(|_| fmt::Error)?;
        write!(f, "Token({shown}…)")
    }
}

/// The error of parsing a [`Token`] from text: not exactly 32 hex digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseTokenError(());

impl fmt::Display for ParseTokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a token is {} hex digits", 2 * TOKEN_BYTES)
    }
}

impl std::error::Error for ParseTokenError {}

impl FromStr for Token {
    type Err = ParseTokenError;

    /// Parses the text form: exactly 32 hex digits, either case.
    fn from_str(text: &str) -> Result<Token, ParseTokenError> {
        let text = text.as_bytes();
        if text.len() != 2 * TOKEN_BYTES {
            return Err(ParseTokenError(()));
        }
        let digit = |c: u8| match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(ParseTokenError(())),
        };
        let mut bytes = [0u8; TOKEN_BYTES];
        for (i, pair) in text.chunks_exact(2).enumerate() {
            bytes[i] = digit(pair[0])? << 4 | digit(pair[1])?;
        }
        Ok(Token(bytes))
    }
}

/// How many times [`Client::issue_token`] draws again when a drawn token
/// is already stored (with 128 random bits this does not happen; the bound
/// keeps a broken random source from looping).
const ISSUE_ATTEMPTS: usize = 3;

impl Client {
    /// Issues a one-use token in `scope`, valid for `ttl`: 128 bits from the
    /// OS CSPRNG, stored at `redguard_token:{<scope>}:<token>` with `PX` =
    /// `ttl`. Hand its text form to the party that will send the request;
    /// [`Client::consume_token`] lets exactly one request with it through.
    ///
    /// `scope` groups tokens (say `"checkout"` or `"user:42:orders"`): a
    /// token is only valid in the scope it was issued in.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty scope or one longer than
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN), and for a `ttl` under 5 ms
    /// (zero included) or above 365 days (the lease bounds,
    /// [`MIN_LEASE`](crate::MIN_LEASE) and [`MAX_LEASE`](crate::MAX_LEASE));
    /// [`Error::Random`] when the OS random source fails;
    /// [`Error::Shutdown`], connection, timeout and server errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let client = redguard::Client::open("redis://127.0.0.1/")?;
    /// let token = client.issue_token("checkout", Duration::from_secs(600))?;
    /// let form_field = token.to_string(); // sent with the form, comes back with the POST
    /// let token: redguard::Token = form_field.parse().expect("a token we issued");
    /// if client.consume_token("checkout", &token)? {
    ///     // first time: place the order
    /// } else {
    ///     // a retry, a double click, or an expired form: do nothing again
    /// }
    /// # Ok::<(), redguard::Error>(())
    /// ```
    pub fn issue_token(&self, scope: impl AsRef<[u8]>, ttl: Duration) -> Result<Token> {
        let scope = scope.as_ref();
        keys::validate_name(scope).map_err(|e| Error::invalid(format!("token scope: {e}")))?;
        let ms = ttl_ms("token", ttl)?;
        self.check_open()?;
        for _ in 0..ISSUE_ATTEMPTS {
            let token = Token::random()?;
            let key = keys::one_use_token(scope, &token.hex());
            let stored: Option<String> = self.with_conn(&key, |conn| {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(1)
                    .arg("NX")
                    .arg("PX")
                    .arg(ms)
                    .query(conn)
                    .map_err(|e| Error::from_redis(e, &key))
            })?;
            if stored.is_some() {
                return Ok(token);
            }
        }
        Err(Error::Random(format!(
            "{ISSUE_ATTEMPTS} tokens drawn in a row were already stored"
        )))
    }

    /// Consumes `token` in `scope`: `true` for the one caller that finds
    /// it, `false` for every other (already consumed, expired, never
    /// issued, or issued in another scope). An unknown token is never an
    /// error.
    ///
    /// Atomic and delete-first: the token's key is deleted in one command
    /// and the reply says whether there was one, so of N concurrent calls
    /// with the same token exactly one gets `true`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty or too long scope,
    /// [`Error::Shutdown`], connection, timeout and server errors. After a
    /// connection or timeout error the token may or may not be consumed.
    pub fn consume_token(&self, scope: impl AsRef<[u8]>, token: &Token) -> Result<bool> {
        let scope = scope.as_ref();
        keys::validate_name(scope).map_err(|e| Error::invalid(format!("token scope: {e}")))?;
        self.check_open()?;
        let key = keys::one_use_token(scope, &token.hex());
        let deleted: i64 = self.with_conn(&key, |conn| {
            redis::cmd("DEL")
                .arg(&key)
                .query(conn)
                .map_err(|e| Error::from_redis(e, &key))
        })?;
        Ok(deleted == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips() {
        for _ in 0..100 {
            let t = Token::random().unwrap();
            let text = t.to_string();
            assert_eq!(text.len(), 32);
            assert!(
                text.bytes()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            );
            assert_eq!(text.parse::<Token>().unwrap(), t);
            assert_eq!(text.to_uppercase().parse::<Token>().unwrap(), t);
        }
    }

    #[test]
    fn bad_text_is_refused() {
        let accented = format!("é{}", "0".repeat(30)); // 32 bytes, not all hex
        for bad in [
            "",
            "0",
            &"0".repeat(31),
            &"0".repeat(33),
            &"g".repeat(32),
            &accented,
            " 0123456789abcdef0123456789abcde",
        ] {
            assert!(bad.parse::<Token>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn debug_hides_most_of_the_token() {
        let t: Token = "0123456789abcdef0123456789abcdef".parse().unwrap();
        assert_eq!(format!("{t:?}"), "Token(0123…)");
    }

    /// TOKEN-1 / J6: 10^6 tokens from the OS random source, no duplicates,
    /// and every one of the 128 bits is used (set in 50 % ± 1 % of them).
    #[test]
    fn token_1_a_million_tokens_are_distinct_and_use_every_bit() {
        const N: usize = 1_000_000;
        let mut seen = std::collections::HashSet::with_capacity(N);
        let mut ones = [0u32; 8 * TOKEN_BYTES];
        for _ in 0..N {
            let t = Token::random().unwrap();
            for (i, byte) in t.0.iter().enumerate() {
                for bit in 0..8 {
                    ones[8 * i + bit] += u32::from(byte >> bit & 1);
                }
            }
            assert!(seen.insert(t), "duplicate token {t}");
        }
        for (bit, n) in ones.iter().enumerate() {
            let share = f64::from(*n) / N as f64;
            assert!(
                (0.49..=0.51).contains(&share),
                "bit {bit} set in {share:.4}"
            );
        }
    }
}
