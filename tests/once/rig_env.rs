//! The rig's env file (`$RIG_DIR/env`, tests/rig.sh's `env_line`): one format,
//! read the same way by each of its readers: `.` in bash (tests/demo.sh, and
//! bench's `rig()`, which sources it in a subshell) and [`util::rig`].

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

use crate::util::{rig, var};

/// Variables only some rigs have, all or none of each set: `RIG_BIG=0` leaves
/// out the first, and only `RIG_BENCH=1` (bench/suite.sh) brings the second.
const OPTIONAL: [&[&str]; 2] = [
    &["RIG_IMG_BIG", "RIG_LAYOUT_BIG"],
    &["RIG_IMG_BIG2", "RIG_IMG_HUGE"],
];

/// What bash `-u` makes of the env file, sourced as tests/demo.sh does: each of
/// `keys` with its value (bash fails on an unset one, and `set -e` on a line
/// that runs a command instead of assigning).
fn sourced(env: &Path, keys: &[&String]) -> HashMap<String, String> {
    let script = r#"set -e; . "$1"; shift; for k; do printf '%s\0%s\0' "$k" "${!k}"; done"#;
    let out = Command::new("bash")
        .args(["-u", "-c", script, "bash"])
        .arg(env)
        .args(keys)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bash -u cannot source {}: {}",
        env.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let fields: Vec<&str> = text.split_terminator('\0').collect();
    (fields.chunks(2))
        .map(|kv| (kv[0].to_owned(), kv[1].to_owned()))
        .collect()
}

/// A port: digits, 1 to 65535.
fn port(text: &str) -> Result<(), String> {
    match text.parse::<u16>() {
        Ok(p) if p > 0 && text.bytes().all(|b| b.is_ascii_digit()) => Ok(()),
        _ => Err(format!("{text:?} is not a port")),
    }
}

/// Whether `value` is sane for `key`; an unknown key is an error, so that a new
/// variable of tests/rig.sh gets its rule here.
fn sane(key: &str, value: &str) -> Result<(), String> {
    let registry = var("RIG_REGISTRY");
    match key {
        "RIG_PORT" => port(value),
        "RIG_REGISTRY" | "RIG_MTLS_REGISTRY" | "RIG_MIRROR_REGISTRY" => {
            let p = value
                .strip_prefix("127.0.0.1:")
                .ok_or("not 127.0.0.1:PORT")?;
            port(p)
        }
        "RIG_USER" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_lowercase()) => Ok(()),
        "RIG_CLUSTER_NAME" | "RIG_PROXIED_NAME"
            if value.split('.').count() > 2 && !value.contains(' ') =>
        {
            Ok(())
        }
        "RIG_SIGNER_FPR" if value.len() == 40 && value.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(())
        }
        "RIG_BUNDLED_DIGEST" if hostpull::digest::Sha256Digest::parse(value).is_some() => Ok(()),
        "RIG_WORKERS" => {
            for w in value.split(' ') {
                let out = Command::new(w).arg("--version").output();
                match &out {
                    Ok(o) if o.status.success() && o.stdout.starts_with(b"skopeo version") => {}
                    _ => return Err(format!("worker {w:?} does not run: {out:?}")),
                }
            }
            Ok(())
        }
        k if k.starts_with("RIG_IMG_") => {
            let rest = (value.strip_prefix(registry))
                .and_then(|r| r.strip_prefix("/hostpull/"))
                .ok_or(format!("not an image of {registry}"))?;
            match rest.split_once(':') {
                Some((name, tag)) if !name.is_empty() && !tag.is_empty() => Ok(()),
                _ => Err("no NAME:TAG".into()),
            }
        }
        "RIG_DIR"
        | "RIG_MIRROR_AUTHFILE"
        | "RIG_CLIENT_CERT"
        | "RIG_CLIENT_KEY"
        | "RIG_CA"
        | "RIG_CERT_DIR"
        | "RIG_CERTS_D"
        | "RIG_AUTHFILE"
        | "RIG_BAD_AUTHFILE"
        | "RIG_PASSWORD_FILE"
        | "RIG_STORAGE"
        | "RIG_REGISTRY_LOG"
        | "RIG_SIG_DIR"
        | "RIG_TAMPER_BLOB"
        | "RIG_LAYOUT_BIG" => match Path::new(value).try_exists() {
            Ok(true) if value.starts_with('/') => Ok(()),
            _ => Err("no such absolute path".into()),
        },
        "RIG_USER" | "RIG_CLUSTER_NAME" | "RIG_PROXIED_NAME" | "RIG_SIGNER_FPR"
        | "RIG_BUNDLED_DIGEST" => Err("malformed".into()),
        _ => Err("no rule in tests/once/rig_env.rs for this variable: add one".into()),
    }
}

/// The `RIG_…` variables the suite, the benchmarks and the demo read.
fn read_by_readers() -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut names = BTreeSet::new();
    for dir in ["tests", "bench"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let reader = match path.extension().and_then(|e| e.to_str()) {
                Some("rs") => path.file_name() != Some(OsStr::new("rig_env.rs")),
                Some("sh") => path.file_name() != Some(OsStr::new("rig.sh")),
                _ => false,
            };
            if !reader {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (i, _) in text.match_indices("RIG_") {
                let before = text[..i].chars().next_back();
                let name: String = text[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                // var("RIG_X"), rig RIG_X, $RIG_X and ${RIG_X}
                let read = matches!(before, Some('"' | ' ' | '$' | '{'));
                if read && !name.ends_with('_') {
                    names.insert(name);
                }
            }
        }
    }
    names
}

/// The env file sources cleanly in `bash -u` (as tests/demo.sh sources it under
/// `set -e`), bash reads every variable as util.rs does, each is sane (paths
/// exist, ports are ports, every worker runs), and every variable a reader
/// uses is there. Knobs of tests/rig.sh itself (RIG_BIG, ...) are not in it.
#[test]
fn rig_env_sources_in_bash_as_the_suite_reads_it() {
    let env = Path::new(var("RIG_DIR")).join("env");
    let ours = rig();
    let keys: Vec<&String> = ours.keys().collect();
    assert_eq!(
        &sourced(&env, &keys),
        ours,
        "bash and util.rs read {env:?} differently"
    );
    for (k, v) in ours {
        if let Err(e) = sane(k, v) {
            panic!("{k}={v:?} in {}: {e}", env.display());
        }
    }
    let knobs = ["RIG_DIR", "RIG_BIG", "RIG_BENCH", "RIG_WORKERS_PREFIX"];
    for name in read_by_readers() {
        let optional = OPTIONAL.iter().find(|set| set.contains(&name.as_str()));
        let present = ours.contains_key(&name);
        match optional {
            Some(set) => {
                let all = set.iter().all(|k| ours.contains_key(*k));
                let none = set.iter().all(|k| !ours.contains_key(*k));
                assert!(all || none, "{set:?}: some in {env:?}, not all");
            }
            None => assert!(
                present || knobs.contains(&name.as_str()),
                "{name} is read by the tests or bench/, but not in {}",
                env.display()
            ),
        }
    }
}

/// What bash reads back of values that need quoting is what util.rs's reader
/// makes of the same line: the writer's quoting, both readers, on a file of
/// hard cases (space, `'`, `$`, backquote, `;`, `*`).
#[test]
fn rig_env_quoting_round_trips_through_both_readers() {
    let dir = tempfile::tempdir().unwrap();
    let env = dir.path().join("env");
    let values = [
        ("A", "/usr/bin/skopeo /opt/x/skopeo"),
        ("B", "it's"),
        ("C", "$HOME `id`; *"),
        ("D", ""),
        ("E", "''"),
    ];
    let writer = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/rig.sh");
    // tests/rig.sh's own env_line, each value as a positional parameter.
    let mut script = format!(
        "die() {{ echo \"$*\" >&2; exit 1; }}; eval \"$(sed -n '/^env_line() {{/,/^}}/p' {writer})\";"
    );
    for (i, (k, _)) in values.iter().enumerate() {
        script += &format!(" env_line {k} \"${}\";", i + 1);
    }
    let out = Command::new("bash")
        .args(["-c", script.as_str(), "bash"])
        .args(values.map(|(_, v)| v))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::write(&env, &out.stdout).unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let parsed: HashMap<String, String> = text.lines().map(crate::util::env_line).collect();
    let want: HashMap<String, String> = (values.iter())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(parsed, want, "{text}");
    let keys: Vec<&String> = want.keys().collect();
    assert_eq!(sourced(&env, &keys), want, "{text}");
}
