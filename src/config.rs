//! `hostpull.d` configuration: `config.toml` and `config.d/*.toml` drop-ins under
//! /usr/lib/hostpull, /etc/hostpull and /run/hostpull, read in that order, later
//! keys overriding earlier ones; and pull profiles, `pulls.d/NAME.toml`
//! ([`load_profile`]). Each file reads into [`Options`], taking only the keys
//! listed for its place; [`merge`] lays them over each other: drop-ins, then
//! the profile, then the command line.
//! [`parse`] is pure; [`load`] reads through a cap-std `Dir` for the root, so
//! tests point it at a temp dir.

use std::path::Path;

use cap_std_ext::cap_std::fs::Dir;
use cap_std_ext::dirext::CapStdExtDirExt;
use serde::Deserialize;

use crate::error::located::{self, Located};
use crate::error::{Failure, Kind};
use crate::options::Options;

/// The directories read, lowest precedence first, relative to the root.
pub const DIRS: &[&str] = &["usr/lib/hostpull", "etc/hostpull", "run/hostpull"];

/// The keys a drop-in's `[worker]` table takes: how the worker runs.
const WORKER_KEYS: &[&str] = &[
    "sandbox",
    "memory-max",
    "cpu-quota",
    "tasks-max",
    "io-weight",
    "selinux-context",
    "skopeo",
];

/// The keys of `[pull]`: time limits, in seconds, the bandwidth cap, and the
/// signature policy.
const PULL_KEYS: &[&str] = &[
    "timeout",
    "stall-timeout",
    "max-rate",
    "policy",
    "registries.d",
    "require-signature",
    "allow-metered",
];

/// The keys of `[cluster]`: how the worker reaches in-cluster registries, set
/// once for all pulls (`--dns`, `--dns-search`, `--add-host` and `--ca` add to
/// these).
const CLUSTER_KEYS: &[&str] = &[
    "dns",
    "dns-search",
    "add-host",
    "ca",
    "http-proxy",
    "https-proxy",
    "no-proxy",
];

/// A drop-in's tables and their keys. A key in another table than its own is
/// unknown there.
const TABLES: &[(&str, &[&str])] = &[
    ("worker", WORKER_KEYS),
    ("pull", PULL_KEYS),
    ("cluster", CLUSTER_KEYS),
];

/// The keys of a pull profile, flat: the command line's long options, lists for
/// repeatable ones. `image` and `dest` are required. In this order in the
/// error for an unknown key.
const PROFILE_KEYS: &[&str] = &[
    "image",
    "dest",
    "platform",
    "authfile",
    "pull-secret",
    "registry-token",
    "cert-dir",
    "ca",
    "policy",
    "registries.d",
    "require-signature",
    "max-rate",
    "allow-metered",
    "http-proxy",
    "https-proxy",
    "no-proxy",
];

/// Parse one drop-in: the keys of its tables, as [`Options`]. Unknown keys are
/// warned about, not fatal: a newer file must not break an older hostpull.
/// An error names the line, the column and the key, and quotes no value.
pub fn parse(name: &str, text: &str) -> anyhow::Result<Options> {
    let invalid =
        |e: Located| Failure::new(Kind::Usage, format!("invalid configuration {name}: {e}"));
    use crate::plan::nesting::{TOML_MAX_DEPTH, check};
    check(text, TOML_MAX_DEPTH).map_err(|why| invalid(Located::whole(why)))?;
    let file: toml::Table = located::toml(text).map_err(invalid)?;
    let (keys, unknown) =
        known_keys(file).map_err(|(table, e)| invalid(locate_drop_in(text, table, &e)))?;
    let options: Options = serde_path_to_error::deserialize(keys)
        .map_err(|e| invalid(locate_drop_in(text, e.path().to_string(), e.inner())))?;
    for key in unknown {
        tracing::warn!("{name}: unknown key {key}, ignored");
    }
    Ok(options)
}

/// Where in `text` the error that its tables' keys made, once merged, is:
/// the same keys read again in their tables from the text itself, whose
/// error has the place. Should that error be another one (a key that its
/// table does not take, which the merge leaves out, may fail there first),
/// the key's path alone.
fn locate_drop_in(text: &str, key: String, e: &toml::de::Error) -> Located {
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Tables {
        worker: Option<Options>,
        pull: Option<Options>,
        cluster: Option<Options>,
    }
    let table = TABLES
        .iter()
        .find(|(t, keys)| {
            let starts = |k: &&str| {
                key.strip_prefix(k)
                    .is_some_and(|r| r.is_empty() || r.starts_with(['[', '.']))
            };
            *t == key || keys.iter().any(starts)
        })
        .map(|(t, _)| *t);
    let path = match table {
        Some(t) if t != key => format!("{t}.{key}"),
        _ => key,
    };
    Located {
        at: match located::toml::<Tables>(text) {
            Err(l) if l.path == path => l.at,
            _ => None,
        },
        path,
        message: crate::error::serde_redacted(&crate::error::one_line(e.message())),
    }
}

/// A drop-in's keys, flat, that its tables take; and the unknown ones, as
/// `table.key` or `table`.
/// The error is a table's that is not one, with its name.
fn known_keys(file: toml::Table) -> Result<(toml::Table, Vec<String>), (String, toml::de::Error)> {
    let mut keys = toml::Table::new();
    let mut unknown = Vec::new();
    for (table, value) in file {
        let Some((_, allowed)) = TABLES.iter().find(|(t, _)| *t == table) else {
            unknown.push(table);
            continue;
        };
        let value = toml::Table::deserialize(value).map_err(|e| (table.clone(), e))?;
        for (key, value) in value {
            if allowed.contains(&key.as_str()) {
                keys.insert(key, value);
            } else {
                unknown.push(format!("{table}.{key}"));
            }
        }
    }
    Ok((keys, unknown))
}

/// Parse a pull profile. A misspelled key fails: a profile is a unit's whole job.
fn parse_profile(text: &str) -> Result<Options, Located> {
    crate::plan::nesting::check(text, crate::plan::nesting::TOML_MAX_DEPTH)
        .map_err(Located::whole)?;
    let keys: toml::Table = located::toml(text)?;
    if let Some(key) = keys.keys().find(|k| !PROFILE_KEYS.contains(&k.as_str())) {
        let expected: Vec<String> = PROFILE_KEYS.iter().map(|k| format!("`{k}`")).collect();
        return Err(Located {
            at: None,
            path: key.clone(),
            message: format!("unknown key, expected one of {}", expected.join(", ")),
        });
    }
    // Only the profile's keys, as they are in the file, so that an error has
    // its place.
    let options: Options = located::toml(text)?;
    let missing = |key: &str| Located {
        at: None,
        path: ".".into(),
        message: format!("missing key `{key}`"),
    };
    if options.image.is_none() {
        return Err(missing("image"));
    }
    if options.dest.is_none() {
        return Err(missing("dest"));
    }
    Ok(options)
}

/// The options of all layers, lowest precedence first: defaults, then each
/// one laid over those before it ([`Options::overlay`]).
pub fn merge(layers: impl IntoIterator<Item = Options>) -> Options {
    layers
        .into_iter()
        .fold(Options::default(), |mut below, layer| {
            below.overlay(layer);
            below
        })
}

/// A configuration file that cannot be read is a configuration error (2) that
/// names it, whatever the reason: a directory where the file belongs or the
/// reverse, a symlink out of the root or in a loop, bytes that are not UTF-8.
fn unreadable(rel: &Path, why: &dyn std::fmt::Display) -> anyhow::Error {
    Failure::new(
        Kind::Usage,
        format!("cannot read configuration {}: {why}", rel.display()),
    )
    .into()
}

/// The text of `rel` under `root`, or `None` if there is no such file; `at`
/// is where `root` is, which an error names.
fn read_optional(root: &Dir, at: &Path, rel: &Path) -> anyhow::Result<Option<String>> {
    let shown = at.join(rel);
    let Some(f) = root
        .open_optional(rel)
        .map_err(|e| unreadable(&shown, &e))?
    else {
        return Ok(None);
    };
    // Opening a directory succeeds; say what is wrong rather than EISDIR.
    if f.metadata().map_err(|e| unreadable(&shown, &e))?.is_dir() {
        return Err(unreadable(&shown, &"it is a directory, not a file"));
    }
    std::io::read_to_string(f)
        .map(Some)
        .map_err(|e| unreadable(&shown, &e))
}

/// Read every configuration file under `root` and merge them, in precedence
/// order. `at` is where `root` is (`/`, or `--config-root`): errors name the
/// files there.
pub fn load(root: &Dir, at: &Path) -> anyhow::Result<Options> {
    let mut layers = Vec::new();
    for dir in DIRS {
        let mut files = vec![Path::new(dir).join("config.toml")];
        let dropins = Path::new(dir).join("config.d");
        let unreadable = |e: std::io::Error| unreadable(&at.join(&dropins), &e);
        if let Some(d) = root.open_dir_optional(&dropins).map_err(unreadable)? {
            let mut names: Vec<String> = d
                .entries()
                .map_err(unreadable)?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.ends_with(".toml"))
                .collect();
            names.sort();
            files.extend(
                names
                    .into_iter()
                    .map(|n| Path::new(dir).join("config.d").join(n)),
            );
        }
        for f in files {
            let Some(text) = read_optional(root, at, &f)? else {
                continue;
            };
            layers.push(parse(&at.join(&f).display().to_string(), &text)?);
        }
    }
    Ok(merge(layers))
}

/// The profile `name` from the first of `DIRS` (highest precedence first) that
/// has `pulls.d/NAME.toml`: what `hostpull-pull@NAME.service` pulls. A
/// misspelled key fails: a profile is a unit's whole job. `at` is where
/// `root` is, as in [`load`].
pub fn load_profile(root: &Dir, at: &Path, name: &str) -> anyhow::Result<Options> {
    if name.is_empty() || name.contains(['/', '.']) {
        let why = format!("invalid profile name: {}", crate::error::quoted(name));
        return Err(Failure::new(Kind::Usage, why).into());
    }
    for dir in DIRS.iter().rev() {
        let rel = Path::new(dir).join("pulls.d").join(format!("{name}.toml"));
        let Some(text) = read_optional(root, at, &rel)? else {
            continue;
        };
        return parse_profile(&text).map_err(|e| {
            Failure::new(
                Kind::Usage,
                format!("invalid pull profile {}: {e}", at.join(&rel).display()),
            )
            .into()
        });
    }
    let dirs: Vec<String> = (DIRS.iter().rev())
        .map(|d| at.join(d).join("pulls.d").display().to_string())
        .collect();
    Err(Failure::new(
        Kind::Usage,
        format!(
            "no pull profile in {}: {}",
            dirs.join(", "),
            crate::error::quoted(name)
        ),
    )
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::SandboxMode;
    use cap_std_ext::cap_std::ambient_authority;

    /// Every file that cannot be read is exit 2 with its name, never exit 1.
    #[test]
    fn unreadable_files_are_config_errors_naming_the_file() {
        use std::os::unix::fs::symlink;
        type Setup = fn(&Path);
        let cases: &[(&str, Setup, &str)] = &[
            (
                "non-UTF-8 config.toml",
                |r| {
                    std::fs::write(
                        r.join("etc/hostpull/config.toml"),
                        b"[pull]\ntimeout = \xff\n",
                    )
                    .unwrap()
                },
                "/etc/hostpull/config.toml",
            ),
            (
                "config.toml a directory",
                |r| std::fs::create_dir(r.join("etc/hostpull/config.toml")).unwrap(),
                "/etc/hostpull/config.toml",
            ),
            (
                "config.d a file",
                |r| std::fs::write(r.join("etc/hostpull/config.d"), b"").unwrap(),
                "/etc/hostpull/config.d",
            ),
            (
                "a drop-in a directory",
                |r| std::fs::create_dir_all(r.join("etc/hostpull/config.d/10-x.toml")).unwrap(),
                "/etc/hostpull/config.d/10-x.toml",
            ),
            (
                "absolute symlink",
                |r| symlink("/etc/passwd", r.join("etc/hostpull/config.toml")).unwrap(),
                "/etc/hostpull/config.toml",
            ),
            (
                "symlink loop",
                |r| symlink("config.toml", r.join("etc/hostpull/config.toml")).unwrap(),
                "/etc/hostpull/config.toml",
            ),
        ];
        for (what, setup, file) in cases {
            let td = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(td.path().join("etc/hostpull")).unwrap();
            setup(td.path());
            let root = Dir::open_ambient_dir(td.path(), ambient_authority()).unwrap();
            let e = load(&root, Path::new("/")).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{what}: {e:#}");
            assert!(format!("{e:#}").contains(file), "{what}: {e:#}");
        }
        // And a profile.
        let td = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(td.path().join("etc/hostpull/pulls.d")).unwrap();
        std::fs::write(
            td.path().join("etc/hostpull/pulls.d/p.toml"),
            b"image = \"\xff\"\n",
        )
        .unwrap();
        let root = Dir::open_ambient_dir(td.path(), ambient_authority()).unwrap();
        let e = load_profile(&root, Path::new("/"), "p").unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2, "{e:#}");
        assert!(
            format!("{e:#}").contains("/etc/hostpull/pulls.d/p.toml"),
            "{e:#}"
        );
    }

    #[test]
    fn parse_table() {
        let c = parse(
            "t",
            r#"
[worker]
sandbox = "systemd"
memory-max = "256M"
tasks-max = 64
skopeo = "/opt/skopeo-1.22/bin/skopeo"
[pull]
stall-timeout = 30
max-rate = "20M"
policy = "/etc/hostpull/policy.json"
"registries.d" = "/etc/hostpull/registries.d"
require-signature = true
allow-metered = true
[cluster]
dns = ["10.0.0.10"]
add-host = ["reg.svc:10.0.0.5"]
"#,
        )
        .unwrap();
        assert_eq!(
            c,
            Options {
                sandbox: Some(SandboxMode::Systemd),
                memory_max: Some("256M".into()),
                tasks_max: Some(64),
                skopeo: Some("/opt/skopeo-1.22/bin/skopeo".into()),
                stall_timeout: Some(30),
                max_rate: Some("20M".into()),
                policy: Some("/etc/hostpull/policy.json".into()),
                registries_d: Some("/etc/hostpull/registries.d".into()),
                require_signature: true,
                allow_metered: true,
                dns: vec!["10.0.0.10".into()],
                add_hosts: vec!["reg.svc:10.0.0.5".into()],
                ..Default::default()
            }
        );
        assert_eq!(parse("t", "").unwrap(), Options::default());
        assert_eq!(
            parse("t", "[worker]\nbogus = 1\n[other]\n").unwrap(),
            Options::default(),
            "unknown keys warn"
        );
        for bad in [
            "[worker",
            "[worker]\ntasks-max = \"x\"",
            "[worker]\nsandbox = \"chroot\"",
            "[pull]\ntimeout = -1",
            "[cluster]\ndns = \"10.0.0.10\"",
            "worker = 3",
        ] {
            let e = parse("t", bad).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
            assert!(
                e.to_string().starts_with("invalid configuration t: "),
                "{e}"
            );
            assert!(!e.to_string().contains('\n'), "{e}");
        }
    }

    /// An error names the line, the column and the key in its table, and
    /// quotes no value; where the place cannot be told apart from another
    /// error's (a key in the wrong table, which is ignored, fails first), the
    /// key alone.
    #[test]
    fn drop_in_errors_point_at_the_line() {
        let cases = [
            (
                "[pull]\nstall-timeout = 5\ntimeout = \"s3cr3t\"",
                "line 3 column 11: pull.timeout: invalid type: string, expected u64",
            ),
            (
                "[cluster]\n\"dns\" = [\"1.1.1.1\", 5]",
                "line 2 column 21: cluster.dns[1]: invalid type: integer, expected a string",
            ),
            (
                "pull = { \"registries.d\" = 5 }",
                "line 1 column 27: pull.registries.d: invalid type: integer, expected path string",
            ),
            (
                "worker = \"s3cr3t\"",
                "line 1 column 10: worker: invalid type: string, expected a map",
            ),
            (
                "[worker]\ntimeout = \"s3cr3t\"\ntasks-max = \"s3cr3t\"",
                "worker.tasks-max: invalid type: string, expected u32",
            ),
            (
                "[pull]\ntimeout = s3cr3t",
                "line 2 column 11: invalid string",
            ),
        ];
        for (text, want) in cases {
            let got = parse("t", text).unwrap_err().to_string();
            assert!(
                got.starts_with(&format!("invalid configuration t: {want}")),
                "{text}: {got}"
            );
            assert!(!got.contains("s3cr3t"), "{got}");
        }
    }

    /// Each table takes its own keys; any other key, in a table or out of
    /// one, is unknown (warned about and ignored), whatever its value.
    #[test]
    fn drop_in_key_sets() {
        let cases: &[(&str, &[&str])] = &[
            ("[pull]\ntimeout = 5", &[]),
            ("[worker]\ntimeout = 5", &["worker.timeout"]),
            ("[worker]\ntimeout = \"not a number\"", &["worker.timeout"]),
            ("[cluster]\nsandbox = \"none\"", &["cluster.sandbox"]),
            ("[pull]\nca = [\"h=/f\"]\n[cluster]\nca = []", &["pull.ca"]),
            ("image = \"a.io/x:1\"", &["image"]),
            (
                "[pull]\nimage = \"a.io/x:1\"\ndest = \"oci:/x\"",
                &["pull.dest", "pull.image"],
            ),
            (
                "[pull]\nauthfile = []\nno-default-creds = true",
                &["pull.authfile", "pull.no-default-creds"],
            ),
            ("[worker]\ntls-verify = false", &["worker.tls-verify"]),
            ("[other]\nx = 1", &["other"]),
            ("[worker]\nbogus = 1\n[other]\n", &["other", "worker.bogus"]),
        ];
        for (text, want) in cases {
            let (keys, unknown) = known_keys(toml::from_str(text).unwrap()).unwrap();
            assert_eq!(unknown, *want, "{text}");
            // What is left reads, and sets nothing a table does not take.
            let o = Options::deserialize(keys).unwrap();
            assert!(o.image.is_none() && o.dest.is_none() && o.tls_verify.is_none());
            assert!(o.timeout.is_none() || text.starts_with("[pull]\ntimeout"));
        }
        // Every key of every list is a key of Options: a misspelled list
        // entry is an unknown field to serde, a known one a type error
        // (a table fits none of them).
        let lists = TABLES.iter().map(|(_, keys)| *keys).chain([PROFILE_KEYS]);
        for key in lists.flatten() {
            let mut t = toml::Table::new();
            t.insert((*key).into(), toml::Value::Table(Default::default()));
            let e = Options::deserialize(t).unwrap_err().to_string();
            assert!(e.contains(&format!("in `{key}`")), "{key}: {e}");
            assert!(!e.contains("unknown field"), "{key}: {e}");
        }
    }

    /// README's example configuration and the example profile read, every key known.
    #[test]
    fn documented_examples_read() {
        let readme = include_str!("../README.md");
        let (_, section) = readme.split_once("- **Configuration**").unwrap();
        let (_, block) = section.split_once("```toml\n").unwrap();
        let (block, _) = block.split_once("```").unwrap();
        let text: String = block
            .lines()
            .map(|l| l.trim_start().to_owned() + "\n")
            .collect();
        let (keys, unknown) = known_keys(toml::from_str(&text).unwrap()).unwrap();
        assert_eq!(unknown, Vec::<String>::new());
        let listed: usize = TABLES.iter().map(|(_, keys)| keys.len()).sum();
        assert_eq!(keys.len(), listed, "README shows every key: {keys:?}");
        parse("README", &text).unwrap();
        let example = include_str!("../contrib/examples/pulls.d/os.toml");
        // With its commented keys too.
        let all: String = example
            .lines()
            .map(|l| l.replacen("# ", "", 1))
            .filter(|l| l.contains(" = "))
            .map(|l| l + "\n")
            .collect();
        for text in [example, &all] {
            parse_profile(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        }
    }

    /// A profile takes its keys only, flat; a misspelled one fails, naming
    /// it and the keys there are; `image` and `dest` must be there.
    #[test]
    fn profile_key_set() {
        let expected = "expected one of `image`, `dest`, `platform`, `authfile`, \
            `pull-secret`, `registry-token`, `cert-dir`, `ca`, `policy`, `registries.d`, \
            `require-signature`, `max-rate`, `allow-metered`, `http-proxy`, `https-proxy`, \
            `no-proxy`";
        let base = "image = \"a.io/os:1\"\ndest = \"oci:/x\"\n";
        let cases: &[(&str, Result<Options, String>)] = &[
            (
                "require-signature = true\nca = [\"h=/f\"]\nregistry-token = [\"h=/t\"]\n\
                 pull-secret = [\"/s\"]\nauthfile = [\"/a\"]\ncert-dir = \"/c\"\n\
                 platform = \"linux/arm64\"\npolicy = \"/p\"\n\"registries.d\" = \"/r\"\n\
                 max-rate = \"1M\"\nallow-metered = true\nhttps-proxy = \"http://p:3128\"\n\
                 no-proxy = [\".corp\"]",
                Ok(Options {
                    image: Some("a.io/os:1".into()),
                    dest: Some("oci:/x".parse().unwrap()),
                    require_signature: true,
                    cas: vec!["h=/f".into()],
                    tokens: vec!["h=/t".into()],
                    pull_secrets: vec!["/s".into()],
                    authfiles: vec!["/a".into()],
                    cert_dir: Some("/c".into()),
                    platform: Some("linux/arm64".into()),
                    policy: Some("/p".into()),
                    registries_d: Some("/r".into()),
                    max_rate: Some("1M".into()),
                    allow_metered: true,
                    https_proxy: Some("http://p:3128".into()),
                    no_proxy: vec![".corp".into()],
                    ..Default::default()
                }),
            ),
            (
                "authfiles = []",
                Err(format!("authfiles: unknown key, {expected}")),
            ),
            (
                "sandbox = \"none\"",
                Err(format!("sandbox: unknown key, {expected}")),
            ),
            (
                "[pull]\ntimeout = 1",
                Err(format!("pull: unknown key, {expected}")),
            ),
            (
                "max-rate = 5",
                Err("line 3 column 12: max-rate: invalid type: integer, expected a string".into()),
            ),
        ];
        for (text, want) in cases {
            let got = parse_profile(&format!("{base}{text}")).map_err(|e| e.to_string());
            assert_eq!(&got, want, "{text}");
        }
        let missing = [
            ("dest = \"oci:/x\"", "missing key `image`"),
            ("image = \"a.io/os:1\"", "missing key `dest`"),
            ("", "missing key `image`"),
        ];
        for (text, want) in missing {
            assert_eq!(parse_profile(text).unwrap_err().to_string(), want, "{text}");
        }
    }

    /// Lowest precedence first: defaults, drop-ins in their order, profile,
    /// command line. A set value wins over those below, lists add up from the
    /// bottom, a flag set anywhere stays set.
    #[test]
    fn merge_order() {
        let dropin_a = Options {
            timeout: Some(1),
            tasks_max: Some(10),
            cas: vec!["a".into()],
            require_signature: true,
            ..Default::default()
        };
        let dropin_b = Options {
            timeout: Some(2),
            memory_max: Some("1G".into()),
            cas: vec!["b".into()],
            ..Default::default()
        };
        let profile = Options {
            image: Some("a.io/os:1".into()),
            dest: Some("oci:/profile".parse().unwrap()),
            max_rate: Some("500K".into()),
            policy: Some("/profile.json".into()),
            cas: vec!["p".into()],
            authfiles: vec!["/p.json".into()],
            ..Default::default()
        };
        let cli = Options {
            dest: Some("oci:/cli".parse().unwrap()),
            max_rate: Some("2G".into()),
            memory_max: Some("2G".into()),
            cas: vec!["c".into()],
            authfiles: vec!["/cli.json".into()],
            ..Default::default()
        };
        let all = merge([
            dropin_a.clone(),
            dropin_b.clone(),
            profile.clone(),
            cli.clone(),
        ]);
        assert_eq!(
            all,
            Options {
                image: Some("a.io/os:1".into()),
                dest: Some("oci:/cli".parse().unwrap()),
                timeout: Some(2),
                tasks_max: Some(10),
                memory_max: Some("2G".into()),
                max_rate: Some("2G".into()),
                policy: Some("/profile.json".into()),
                cas: vec!["a".into(), "b".into(), "p".into(), "c".into()],
                authfiles: vec!["/p.json".into(), "/cli.json".into()],
                require_signature: true,
                ..Default::default()
            }
        );
        // Without a profile, and with nothing at all.
        let no_profile = merge([dropin_a, dropin_b, cli]);
        assert_eq!(no_profile.max_rate.as_deref(), Some("2G"));
        assert_eq!(no_profile.policy, None);
        assert_eq!(merge([]), Options::default());
        // A profile's cap wins over the drop-ins'.
        let dropin = Options {
            max_rate: Some("20M".into()),
            ..Default::default()
        };
        let r = merge([dropin, profile, Options::default()]);
        assert_eq!(r.max_rate.as_deref(), Some("500K"));
    }

    /// A layer that sets nothing changes nothing, whichever side it is on.
    #[test]
    fn overlay_of_nothing() {
        let full = Options {
            image: Some("i".into()),
            dest: Some("oci:/d".parse().unwrap()),
            authfiles: vec!["/a".into()],
            pull_secrets: vec!["/s".into()],
            tokens: vec!["t".into()],
            token_user: Some("u".into()),
            no_default_creds: true,
            registries_conf: Some("/r".into()),
            provider_config: Some("/pc".into()),
            provider_bin_dir: Some("/pb".into()),
            cert_dir: Some("/c".into()),
            tls_verify: Some(false),
            platform: Some("linux/arm64".into()),
            sandbox: Some(SandboxMode::None),
            selinux_context: Some("x".into()),
            skopeo: Some("/s".into()),
            memory_max: Some("1G".into()),
            cpu_quota: Some("50%".into()),
            tasks_max: Some(1),
            io_weight: Some(2),
            timeout: Some(3),
            stall_timeout: Some(4),
            max_rate: Some("1M".into()),
            cas: vec!["ca".into()],
            dns: vec!["dns".into()],
            dns_search: vec!["search".into()],
            add_hosts: vec!["h:1.2.3.4".into()],
            http_proxy: Some("hp".into()),
            https_proxy: Some("hsp".into()),
            no_proxy: vec!["np".into()],
            policy: Some("/p".into()),
            registries_d: Some("/rd".into()),
            require_signature: true,
            defer_if_metered: true,
            allow_metered: true,
        };
        assert_eq!(merge([full.clone(), Options::default()]), full);
        assert_eq!(merge([Options::default(), full.clone()]), full);
    }

    #[test]
    fn profiles() {
        let td = tempfile::tempdir().unwrap();
        let root = Dir::open_ambient_dir(td.path(), ambient_authority()).unwrap();
        let w = |p: &str, s: &str| {
            let p = td.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, s).unwrap();
        };
        w(
            "usr/lib/hostpull/pulls.d/os.toml",
            "image = \"a.io/os:1\"\ndest = \"oci:/x\"\n",
        );
        w(
            "etc/hostpull/pulls.d/os.toml",
            "image = \"a.io/os:2\"\ndest = \"oci:/y\"\nauthfile = [\"/p.json\"]\npolicy = \"/os-policy.json\"\nrequire-signature = true\nmax-rate = \"500K\"\n",
        );
        let p = load_profile(&root, Path::new("/"), "os").unwrap();
        assert_eq!(
            p.image.as_deref(),
            Some("a.io/os:2"),
            "/etc wins over /usr/lib"
        );
        assert_eq!(p.authfiles, [std::path::PathBuf::from("/p.json")]);
        assert_eq!(p.policy.as_deref(), Some(Path::new("/os-policy.json")));
        assert!(p.require_signature);
        w(
            "etc/hostpull/pulls.d/typo.toml",
            "image = \"x\"\ndest = \"oci:/y\"\nauthfiles = []\n",
        );
        w("etc/hostpull/pulls.d/nodest.toml", "image = \"x\"\n");
        for bad in ["typo", "nodest", "missing", "../etc/x", ""] {
            let e = load_profile(&root, Path::new("/"), bad).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
        }
        assert_eq!(
            load_profile(&root, Path::new("/"), "typo")
                .unwrap_err()
                .to_string(),
            "invalid pull profile /etc/hostpull/pulls.d/typo.toml: authfiles: unknown key, \
             expected one of `image`, `dest`, `platform`, `authfile`, `pull-secret`, \
             `registry-token`, `cert-dir`, `ca`, `policy`, `registries.d`, \
             `require-signature`, `max-rate`, `allow-metered`, `http-proxy`, \
             `https-proxy`, `no-proxy`"
        );
    }

    #[test]
    fn precedence() {
        let td = tempfile::tempdir().unwrap();
        let w = |p: &str, s: &str| {
            let p = td.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, s).unwrap();
        };
        w(
            "usr/lib/hostpull/config.toml",
            "[worker]\nmemory-max = \"1G\"\ntasks-max = 10\nio-weight = 5\n",
        );
        w(
            "etc/hostpull/config.toml",
            "[worker]\nmemory-max = \"2G\"\nskopeo = \"/usr/local/bin/skopeo\"\n",
        );
        w(
            "etc/hostpull/config.d/10-a.toml",
            "[worker]\ntasks-max = 20\n",
        );
        w(
            "etc/hostpull/config.d/20-b.toml",
            "[worker]\ntasks-max = 30\n",
        );
        w("etc/hostpull/config.d/README", "not toml");
        w(
            "run/hostpull/config.d/x.toml",
            "[pull]\ntimeout = 99\n[cluster]\ndns = [\"10.0.0.10\"]\n",
        );
        w(
            "etc/hostpull/config.d/30-c.toml",
            "[cluster]\nadd-host = [\"reg.svc:10.0.0.5\"]\ndns = [\"10.0.0.9\"]\n",
        );
        let root = Dir::open_ambient_dir(td.path(), ambient_authority()).unwrap();
        let c = load(&root, Path::new("/")).unwrap();
        assert_eq!(c.memory_max.as_deref(), Some("2G"));
        assert_eq!(c.tasks_max, Some(30));
        assert_eq!(c.io_weight, Some(5));
        assert_eq!(c.timeout, Some(99));
        assert_eq!(c.dns, ["10.0.0.9", "10.0.0.10"], "in file order");
        assert_eq!(c.add_hosts, ["reg.svc:10.0.0.5"]);
        // The command line wins; config fills the rest.
        let cli = Options {
            tasks_max: Some(7),
            skopeo: Some("/opt/other/skopeo".into()),
            dns: vec!["10.0.0.1".into()],
            ..Default::default()
        };
        let req = merge([c, cli]);
        assert_eq!(
            (req.tasks_max, req.memory_max.as_deref(), req.timeout),
            (Some(7), Some("2G"), Some(99))
        );
        assert_eq!(req.skopeo.as_deref(), Some(Path::new("/opt/other/skopeo")));
        assert_eq!(req.dns, ["10.0.0.9", "10.0.0.10", "10.0.0.1"]);
        let empty = tempfile::tempdir().unwrap();
        let root = Dir::open_ambient_dir(empty.path(), ambient_authority()).unwrap();
        assert_eq!(load(&root, Path::new("/")).unwrap(), Options::default());
    }
}
