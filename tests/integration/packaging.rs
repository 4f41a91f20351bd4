//! What a library user and a `cargo install` user get (read from
//! Cargo.toml, README.md and .ci/run themselves): a plain dependency
//! builds no CLI crate, the binary needs the opt-in `cli` feature, the
//! README says how to install it, and CI holds the MSRV.

const MANIFEST: &str = include_str!("../../Cargo.toml");
const README: &str = include_str!("../../README.md");
const CI: &str = include_str!("../../.ci/run");

/// The crates only the `redguard` binary uses.
const CLI_CRATES: [&str; 7] = [
    "clap",
    "humantime",
    "signal-hook",
    "libc",
    "indicatif",
    "serde_json",
    "env_logger",
];

/// The lines of one `[section]` of the manifest, up to the next section.
fn section<'a>(name: &str) -> Vec<&'a str> {
    MANIFEST
        .lines()
        .skip_while(|l| l.trim() != format!("[{name}]"))
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .collect()
}

/// The quoted items of `key = [ ... ]` in a section.
fn list(lines: &[&str], key: &str) -> Vec<String> {
    let line = lines
        .iter()
        .find(|l| l.split('=').next().is_some_and(|k| k.trim() == key))
        .unwrap_or_else(|| panic!("no `{key} = [...]` in {lines:?}"));
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_default_features_build_no_cli_crate() {
    let features = section("features");
    let default = list(&features, "default");
    assert!(
        !default.iter().any(|f| f == "cli"),
        "`cli` is a default feature: {default:?}"
    );
    let cli = list(&features, "cli");
    let dependencies = section("dependencies");
    for krate in CLI_CRATES {
        let Some(line) = dependencies
            .iter()
            .find(|l| l.split('=').next().is_some_and(|k| k.trim() == krate))
        else {
            continue;
        };
        assert!(
            line.contains("optional = true"),
            "{krate} is not optional: {line}"
        );
        assert!(
            cli.contains(&format!("dep:{krate}")),
            "the `cli` feature does not enable {krate}: {cli:?}"
        );
        for feature in &default {
            let enabled = list(&features, feature);
            assert!(
                !enabled.contains(&format!("dep:{krate}")),
                "default feature {feature} pulls {krate}"
            );
        }
    }
    let bin = MANIFEST
        .split("[[bin]]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("a [[bin]] section");
    assert!(
        bin.contains(r#"required-features = ["cli"]"#),
        "the binary does not require `cli`: {bin}"
    );
}

#[test]
fn the_readme_tells_both_users_how_to_get_what_they_want() {
    assert!(
        README.contains("cargo install redguard --features cli"),
        "README: no `cargo install redguard --features cli`"
    );
    assert!(
        README.contains("--features cli") && README.contains("no CLI crate"),
        "README: does not say that the library builds no CLI crate"
    );
}

#[test]
fn ci_checks_every_feature_the_library_alone_and_the_msrv() {
    assert!(
        CI.contains("cargo clippy --all-targets --all-features"),
        "{CI}"
    );
    // The library as a dependency builds it, and no CLI crate in it.
    assert!(CI.contains("cargo build --lib"), "{CI}");
    assert!(CI.contains("cargo tree"), "{CI}");
    // The layers of docs/ARCHITECTURE.md: no import cycle, no import up.
    assert!(CI.contains("scripts/check-layers"), "{CI}");
    let package = section("package");
    assert!(
        package.iter().any(|l| l.starts_with("rust-version = ")),
        "no rust-version"
    );
    let lints = section("lints.clippy");
    assert!(
        lints
            .iter()
            .any(|l| l.replace(' ', "") == r#"incompatible_msrv="deny""#),
        "clippy's incompatible_msrv is not denied: {lints:?}"
    );
}
