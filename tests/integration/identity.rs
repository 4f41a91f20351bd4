//! Holder ids and tokens are unguessable and never repeat (RELIABILITY J6).
//!
//! A client id is a version-4 UUID drawn from the operating system's
//! CSPRNG (`uuid`'s `v4` feature, through `getrandom`): 122 random bits.
//! A one-use [`redguard::Token`] is 128 bits from the OS CSPRNG (`OsRng`).
//! Fencing tokens are counters, ordered on purpose, not secrets.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::support::{TestContext, unique_name};

/// J6: client ids, all distinct, all well-formed v4 UUIDs (version nibble
/// 4, RFC 4122 variant), so 122 of their 128 bits are random. 2 × 10⁴ by
/// default (each is a whole `Client` built, about 180 µs in a debug
/// build); `REDGUARD_J6_IDS=1000000` runs the catalogue's 10⁶.
#[test]
fn j6_client_ids_are_distinct_v4_uuids() {
    let n: usize = std::env::var("REDGUARD_J6_IDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let t0 = Instant::now();
    let mut seen = HashSet::with_capacity(n);
    let builder = redguard::Client::builder().url("redis://127.0.0.1:1/");
    for _ in 0..n {
        let client = builder.clone().build().unwrap();
        let id = client.id().to_string();
        assert!(seen.insert(id), "a client id repeated");
    }
    let sample: Vec<&String> = seen.iter().take(1000).collect();
    for id in sample {
        let hex: Vec<char> = id.chars().filter(|c| *c != '-').collect();
        assert_eq!(hex.len(), 32, "{id}");
        assert_eq!(hex[12], '4', "version nibble of {id}");
        assert!(matches!(hex[16], '8' | '9' | 'a' | 'b'), "variant of {id}");
    }
    eprintln!("J6: {n} client ids, 0 duplicates, in {:?}", t0.elapsed());
}

/// J6: 10,000 one-use tokens issued by the server round trip are 128-bit,
/// distinct, and not sequential (no two share their first 8 bytes).
#[test]
fn j6_one_use_tokens_are_distinct_128_bit_values() {
    const N: usize = 10_000;
    let ctx = TestContext::new();
    let scope = unique_name("j6");
    let mut seen = HashSet::with_capacity(N);
    let mut prefixes = HashSet::with_capacity(N);
    for _ in 0..N {
        let token = ctx
            .client
            .issue_token(&scope, Duration::from_secs(5))
            .unwrap();
        assert_eq!(token.as_bytes().len(), redguard::TOKEN_BYTES);
        assert_eq!(redguard::TOKEN_BYTES * 8, 128);
        prefixes.insert(token.as_bytes()[..8].to_vec());
        assert!(seen.insert(*token.as_bytes()), "a token repeated");
    }
    assert_eq!(prefixes.len(), N, "tokens share 64-bit prefixes");
}
