//! What a holder record says the client runs: the program text as given,
//! with credentials masked, reduced to the program's name, or nothing
//! ([`RecordCommand`]). Any client that can read the lock's keys can read
//! the record, so a password on a command line must not reach it.

/// How much of the program text ([`Builder::program`](crate::Builder::program),
/// or `argv[0]`) the holder record keeps, set with
/// [`Builder::record_command`](crate::Builder::record_command) and
/// `redguard exec|once --record-command`. Redisson keeps no such record;
/// this only decides what redguard's own record field `program` holds.
///
/// The text is read as words separated by white space; a word may hold
/// white space inside single or double quotes, as a shell writes it (the
/// `redguard` tool quotes such words of CMD so).
///
/// [`Masked`](RecordCommand::Masked) replaces by `***`:
///
/// * the password of a URL (`postgres://app:DbPa55word@db/x` becomes
///   `postgres://app:***@db/x`), or its whole user part when it has no
///   password (`https://ghp_x@host`: a lone user part may be a token);
/// * the value of a flag whose name names a secret, in `--name=value`,
///   `-name=value` and `--name value` forms (`--token=abc`,
///   `--password abc`, `--db-password`, `--api-key`, `--client-secret`):
///   a name is secret when one of its parts (split at `-`, `_`, `.`) is or
///   ends with `password`, `passwd`, `pwd`, `pass`, `passphrase`,
///   `secret`, `token`, `key`, `auth` or `credential(s)`;
/// * the value of `-a` and `-p` (the next word; for `-p` also one joined
///   to it, `-pSECRET`, unless it is lower case letters only, as `find`'s
///   `-print`): `redis-cli -a` and `mysql -p` take a password so.
///   Other tools give them other meanings (`docker run -p 8080:80`,
///   `cp -a`): those values are masked too, as a mask costs less than a
///   leaked password;
/// * the value of a `NAME=value` word whose name names a secret, by the
///   same rule (`DB_PASSWORD=x`, `PGPASSWORD=x`, `AWS_SECRET_ACCESS_KEY=x`).
///
/// Masking recognises these shapes only: a secret in another place (a
/// positional argument, a header value, a file's content shown on the
/// command line) stays. Record such commands with
/// [`Name`](RecordCommand::Name) or [`None`](RecordCommand::None).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RecordCommand {
    /// The text as given, secrets included.
    Full,
    /// The text with credentials masked (see the type's documentation).
    /// The default.
    #[default]
    Masked,
    /// The program's name only: the first word; for a text that runs a
    /// command after a `--` word (`redguard exec NAME -- CMD ARGS...`),
    /// everything up to that command's name (`redguard exec NAME -- CMD`).
    /// Masked as [`Masked`](RecordCommand::Masked) too.
    Name,
    /// No command: for a text with a `--` word, what comes before it
    /// (`redguard exec NAME`); else an empty `program` field.
    None,
}

/// What replaces a secret.
const MASK: &str = "***";

/// The record's `program` text for `text`, as `how` says.
pub(crate) fn recorded(text: &str, how: RecordCommand) -> String {
    match how {
        RecordCommand::Full => text.to_owned(),
        RecordCommand::Masked => masked(&words(text)),
        RecordCommand::Name => {
            let words = words(text);
            let end = match words.iter().position(|w| *w == "--") {
                Some(dashes) => (dashes + 2).min(words.len()),
                None => words.len().min(1),
            };
            masked(&words[..end])
        }
        RecordCommand::None => {
            let words = words(text);
            match words.iter().position(|w| *w == "--") {
                Some(dashes) => masked(&words[..dashes]),
                None => String::new(),
            }
        }
    }
}

/// `text` split into words at white space outside quotes (a backslash
/// outside quotes escapes the next character). A quote left open splits
/// the whole text at every white space instead: one open quote must not
/// make the rest of the line one word that no rule looks into.
fn words(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut start = None;
    let mut quote = None;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if std::mem::take(&mut escaped) => {}
            None if c.is_whitespace() => {
                if let Some(s) = start.take() {
                    words.push(&text[s..i]);
                }
            }
            None => {
                start.get_or_insert(i);
                match c {
                    '\'' | '"' => quote = Some(c),
                    '\\' => escaped = true,
                    _ => {}
                }
            }
        }
    }
    if quote.is_some() {
        return text.split_whitespace().collect();
    }
    if let Some(s) = start {
        words.push(&text[s..]);
    }
    words
}

/// `words` joined by spaces, with their secrets masked. Each word is
/// judged as the program receives it, its quotes removed: a shell-quoted
/// `'--password=with space'` or `TOKEN='a b'` is a secret flag or variable
/// like its plain form. A word with nothing masked is kept as written.
fn masked(words: &[&str]) -> String {
    let mut out: Vec<String> = Vec::with_capacity(words.len());
    let mut value_next = false;
    for word in words {
        let plain = unquoted(word);
        if std::mem::take(&mut value_next) && !plain.starts_with("--") {
            out.push(MASK.to_owned());
            continue;
        }
        let (masked, takes_value) = mask_word(&plain);
        value_next = takes_value;
        if masked == *plain {
            out.push((*word).to_owned());
        } else {
            out.push(quoted(&masked));
        }
    }
    out.join(" ")
}

/// `word` as a shell passes it to the program: `'…'` taken literally,
/// `"…"` with `\"` and `\\` unescaped, a backslash outside quotes
/// escaping the next character. Borrowed when there is nothing to remove.
fn unquoted(word: &str) -> std::borrow::Cow<'_, str> {
    if !word.contains(['\'', '"', '\\']) {
        return std::borrow::Cow::Borrowed(word);
    }
    let mut out = String::with_capacity(word.len());
    let mut chars = word.chars();
    let mut quote = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '\\') | (Some('"'), '\\') => {
                if let Some(next) = chars.next() {
                    if quote.is_some() && !matches!(next, '"' | '\\') {
                        out.push('\\');
                    }
                    out.push(next);
                }
            }
            (_, c) => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `word` quoted for a shell when it has white space, quotes or
/// backslashes in it (a masked word keeps the rest of its text).
fn quoted(word: &str) -> String {
    if word.is_empty()
        || word.contains(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '\\'))
    {
        format!("'{}'", word.replace('\'', "'\\''"))
    } else {
        word.to_owned()
    }
}

/// One word with its secrets masked, and whether the next word is a
/// secret flag's value.
fn mask_word(word: &str) -> (String, bool) {
    if word == "-a" || word == "-p" {
        return (word.to_owned(), true);
    }
    if let Some(flag) = word.strip_prefix('-') {
        let flag = flag.strip_prefix('-').unwrap_or(flag);
        return match flag.split_once('=') {
            Some((name, _)) if names_secret(name) => {
                let flag_end = word.len() - flag.len() + name.len();
                (format!("{}={MASK}", &word[..flag_end]), false)
            }
            Some(_) => (mask_urls(word), false),
            None if is_joined_password(word) => (format!("-p{MASK}"), false),
            None => (word.to_owned(), names_secret(flag)),
        };
    }
    if let Some((name, _)) = word.split_once('=')
        && is_variable_name(name)
        && names_secret(name)
    {
        return (format!("{name}={MASK}"), false);
    }
    (mask_urls(word), false)
}

/// `true` for `-pVALUE`, mysql's password joined to its flag, unless
/// VALUE is lower case letters only: a single-dash word flag such as
/// `find`'s `-print`, `-prune` or `-perm`.
fn is_joined_password(word: &str) -> bool {
    word.strip_prefix("-p")
        .is_some_and(|v| !v.is_empty() && !v.chars().all(|c| c.is_ascii_lowercase()))
}

/// `true` for a shell variable's name: letters, digits and `_`, not
/// starting with a digit.
fn is_variable_name(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Words that make a flag or variable name a secret's, as one of its parts
/// or at a part's end (`PGPASSWORD`, `apikey`, `accesstoken`).
const SECRET_WORDS: [&str; 11] = [
    "password",
    "passwd",
    "pwd",
    "pass",
    "passphrase",
    "secret",
    "token",
    "key",
    "auth",
    "credential",
    "credentials",
];

/// `true` when a flag or variable name names a secret (see
/// [`RecordCommand`]).
fn names_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.split(['-', '_', '.'])
        .any(|part| SECRET_WORDS.iter().any(|w| part.ends_with(w)))
}

/// `word` with the user part of every URL in it masked: the password after
/// `user:`, or the whole user part when it has no password.
fn mask_urls(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let authority_end = after
            .find(['/', '?', '#', '\'', '"'])
            .unwrap_or(after.len());
        let authority = &after[..authority_end];
        match authority.rfind('@') {
            Some(user_end) => {
                let user = &authority[..user_end];
                if let Some((name, _)) = user.split_once(':') {
                    out.push_str(name);
                    out.push(':');
                }
                out.push_str(MASK);
                out.push_str(&authority[user_end..]);
            }
            None => out.push_str(authority),
        }
        rest = &after[authority_end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Quoted as `redguard exec` quotes CMD's words (or as a shell user
    /// wrote them), secrets are masked as in their plain form.
    #[test]
    fn quoted_secrets_are_masked() {
        let cases = [
            ("job '--password=with space'", "job --password=***"),
            ("job TOKEN='a b'", "job TOKEN=***"),
            ("job 'TOKEN=a b'", "job TOKEN=***"),
            (r"job '--secret=it'\''s'", "job --secret=***"),
            ("job '--key=a\"b'", "job --key=***"),
            ("job \"--api-key=x y\"", "job --api-key=***"),
            ("job --password 'two words'", "job --password ***"),
            (
                "psql 'postgres://app:p w@db/x y'",
                "psql 'postgres://app:***@db/x y'",
            ),
            // Nothing to mask: kept as written.
            ("echo 'hello world' \"it's\"", "echo 'hello world' \"it's\""),
        ];
        for (text, want) in cases {
            assert_eq!(recorded(text, RecordCommand::Masked), want, "{text}");
        }
    }

    /// Each case: the text, and what the default (masked) record keeps.
    #[test]
    fn masked_records_hide_credentials_and_keep_the_rest() {
        let cases = [
            // URL user parts.
            (
                "psql postgres://app:DbPa55word@db/x",
                "psql postgres://app:***@db/x",
            ),
            (
                "redis-cli -u redis://:pw@h:6379/0",
                "redis-cli -u redis://:***@h:6379/0",
            ),
            (
                "git clone https://ghp_T0KEN@github.com/o/r",
                "git clone https://***@github.com/o/r",
            ),
            (
                "curl https://example.com/a@b",
                "curl https://example.com/a@b",
            ),
            (
                "sync --url=postgres://u:p%40ss@h:5432/db?sslmode=require",
                "sync --url=postgres://u:***@h:5432/db?sslmode=require",
            ),
            (
                "a http://x:y@h b http://z@h",
                "a http://x:***@h b http://***@h",
            ),
            // Secret flags, joined and separate.
            ("job --token=abc123TOKEN", "job --token=***"),
            ("job --password abc next", "job --password *** next"),
            (
                "job --db-password=x --verbose",
                "job --db-password=*** --verbose",
            ),
            (
                "job --api-key K --client_secret S",
                "job --api-key *** --client_secret ***",
            ),
            ("java -Dx=1 -password=hunter2", "java -Dx=1 -password=***"),
            (
                "job --apikey=k --authToken=t",
                "job --apikey=*** --authToken=***",
            ),
            ("job --credentials c.json", "job --credentials ***"),
            // A flag's value never swallows the next flag.
            ("job --token --verbose", "job --token --verbose"),
            // Short flags that take a password in redis-cli and mysql.
            ("redis-cli -a s3cret ping", "redis-cli -a *** ping"),
            ("mysql -pS3cret db", "mysql -p*** db"),
            ("mysql -p S3cret db", "mysql -p *** db"),
            ("find . -prune -print", "find . -prune -print"),
            // Variables.
            (
                "env DB_PASSWORD=x PGPASSWORD=y run",
                "env DB_PASSWORD=*** PGPASSWORD=*** run",
            ),
            (
                "AWS_SECRET_ACCESS_KEY=abc aws s3 ls",
                "AWS_SECRET_ACCESS_KEY=*** aws s3 ls",
            ),
            ("env MODE=fast run", "env MODE=fast run"),
            // Quoted words are one word.
            ("job --password 'a b c' after", "job --password *** after"),
            (
                "sh -c 'sleep 2' --token=\"x y\"",
                "sh -c 'sleep 2' --token=***",
            ),
            // An escaped quote opens nothing; an open quote splits at spaces.
            ("echo 'it'\\''s' --token t", "echo 'it'\\''s' --token ***"),
            ("echo 'open --token t", "echo 'open --token ***"),
            // Nothing secret: unchanged.
            (
                "redguard exec nightly -- backup.sh --full",
                "redguard exec nightly -- backup.sh --full",
            ),
            ("", ""),
        ];
        for (text, want) in cases {
            assert_eq!(recorded(text, RecordCommand::Masked), want, "{text:?}");
        }
    }

    #[test]
    fn the_issue_command_line_keeps_no_secret() {
        let text = "redguard exec sec1 -- sh -c 'sleep 2' postgres://app:DbPa55word@db/x \
                    --token=abc123TOKEN";
        let kept = recorded(text, RecordCommand::default());
        assert_eq!(
            kept,
            "redguard exec sec1 -- sh -c 'sleep 2' postgres://app:***@db/x --token=***"
        );
    }

    #[test]
    fn other_modes_keep_all_the_name_or_nothing() {
        let text = "redguard exec sec1 -- psql postgres://app:pw@db/x --token=t";
        assert_eq!(recorded(text, RecordCommand::Full), text);
        assert_eq!(
            recorded(text, RecordCommand::Name),
            "redguard exec sec1 -- psql"
        );
        assert_eq!(recorded(text, RecordCommand::None), "redguard exec sec1");
        assert_eq!(recorded("job --token=t", RecordCommand::Name), "job");
        assert_eq!(recorded("job --token=t", RecordCommand::None), "");
        assert_eq!(
            recorded("redguard exec x --", RecordCommand::Name),
            "redguard exec x --"
        );
        // The name itself is masked when it holds a URL's password.
        assert_eq!(
            recorded("http://u:p@h/run", RecordCommand::Name),
            "http://u:***@h/run"
        );
    }

    #[test]
    fn secret_names_are_recognised_by_their_parts() {
        for name in [
            "password",
            "PGPASSWORD",
            "db-pass",
            "api_key",
            "apikey",
            "x.secret",
            "authToken",
            "pwd",
            "auth",
        ] {
            assert!(names_secret(name), "{name}");
        }
        for name in ["verbose", "port", "user", "full", "mode", "passive"] {
            assert!(!names_secret(name), "{name}");
        }
    }
}
