//! Every line redguard writes to stderr goes through here, so that no
//! password ever reaches a terminal or a log: the passwords of the URL in
//! use are replaced by `***`, and so is the password part of anything that
//! looks like a URL with credentials.

use std::sync::{Mutex, PoisonError};

/// Passwords to mask, as given and as decoded.
static SECRETS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Registers a secret to mask from now on (empty strings are ignored).
pub(crate) fn add_secret(secret: &str) {
    if secret.is_empty() {
        return;
    }
    let mut secrets = SECRETS.lock().unwrap_or_else(PoisonError::into_inner);
    if !secrets.iter().any(|s| s == secret) {
        secrets.push(secret.to_owned());
        // Longest first, so a secret containing another is masked whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// `text` with every registered secret and every URL password replaced by
/// `***`.
pub(crate) fn mask(text: &str) -> String {
    let mut text = mask_url_passwords(text);
    let secrets = SECRETS.lock().unwrap_or_else(PoisonError::into_inner);
    for secret in secrets.iter() {
        if text.contains(secret.as_str()) {
            text = text.replace(secret.as_str(), "***");
        }
    }
    text
}

/// Replaces the password of `scheme://user:password@host` forms.
fn mask_url_passwords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // The authority ends at the first '/', whitespace or quote.
        let end = tail
            .find(|c: char| c == '/' || c.is_whitespace() || c == '\'' || c == '"')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                match userinfo.find(':') {
                    Some(colon) => {
                        out.push_str(&userinfo[..colon]);
                        out.push_str(":***");
                    }
                    // A lone userinfo is a password for redis:// URLs
                    // (`redis://secret@host` is AUTH secret on old servers).
                    None if !userinfo.is_empty() => out.push_str("***"),
                    None => {}
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// The version of the `--json` outputs' shape. Within one schema version
/// fields are only ever added, never renamed, removed or given another
/// meaning; anything else raises it.
pub(crate) const JSON_SCHEMA: u64 = 1;

/// `value` with `"schema": JSON_SCHEMA` in it: in the object itself, or in
/// every object of an array (`list --json` stays an array, so that a
/// script reading it as one keeps working; an empty array carries none).
pub(crate) fn with_schema(mut value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let stamp = |o: &mut serde_json::Map<String, Value>| {
        o.insert("schema".to_owned(), Value::from(JSON_SCHEMA));
    };
    match &mut value {
        Value::Object(o) => stamp(o),
        Value::Array(items) => {
            for item in items {
                if let Value::Object(o) = item {
                    stamp(o);
                }
            }
        }
        _ => {}
    }
    value
}

/// Prints one `--json` output on stdout, on one line, with its schema
/// version ([`with_schema`]). Every `--json` output goes through here.
pub(crate) fn print_json(value: serde_json::Value) {
    println!("{}", with_schema(value));
}

/// Prints `redguard: <message>` on stderr, masked.
pub(crate) fn error(message: &str) {
    eprintln!("redguard: {}", mask(message));
}

/// Prints `redguard: warning: <message>` on stderr, masked.
pub(crate) fn warn(message: &str) {
    eprintln!("redguard: warning: {}", mask(message));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_passwords_are_masked() {
        assert_eq!(
            mask_url_passwords("bad redis://user:p%40ss@127.0.0.1:7000/0 here"),
            "bad redis://user:***@127.0.0.1:7000/0 here"
        );
        assert_eq!(
            mask_url_passwords("'rediss://:pw@h' and redis://h:1/"),
            "'rediss://:***@h' and redis://h:1/"
        );
        assert_eq!(mask_url_passwords("redis://secret@h"), "redis://***@h");
        assert_eq!(mask_url_passwords("no url"), "no url");
    }

    #[test]
    fn json_outputs_carry_the_schema_in_every_object() {
        use serde_json::json;
        assert_eq!(with_schema(json!({"a": 1}))["schema"], 1);
        let list = with_schema(json!([{"a": 1}, {"b": 2}]));
        assert!(list.as_array().unwrap().iter().all(|v| v["schema"] == 1));
        assert_eq!(with_schema(json!([])), json!([]));
    }

    #[test]
    fn registered_secrets_are_masked_anywhere() {
        add_secret("s3cr3t-x");
        add_secret("");
        assert_eq!(mask("AUTH s3cr3t-x failed"), "AUTH *** failed");
    }
}
