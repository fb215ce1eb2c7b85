//! `hostpull.d` configuration: `config.toml` and `config.d/*.toml` drop-ins under
//! /usr/lib/hostpull, /etc/hostpull and /run/hostpull, read in that order, later
//! keys overriding earlier ones; the command line overrides them all.
//! [`parse`] is pure; [`load`] reads through a cap-std `Dir` for the root, so
//! tests point it at a temp dir.

use std::path::{Path, PathBuf};

use cap_std_ext::cap_std::fs::Dir;
use cap_std_ext::dirext::CapStdExtDirExt;
use serde::Deserialize;

use crate::error::{Failure, Kind};
use crate::options::Options;
use crate::options::SandboxMode;

/// The directories read, lowest precedence first, relative to the root.
pub const DIRS: &[&str] = &["usr/lib/hostpull", "etc/hostpull", "run/hostpull"];

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Config {
    #[serde(default)]
    pub worker: WorkerConfig,
    #[serde(default)]
    pub pull: PullConfig,
    #[serde(default)]
    pub cluster: ClusterConfig,
}

/// `[cluster]`: how the worker reaches in-cluster registries, set once for all
/// pulls (the same as `--dns`, `--dns-search`, `--add-host` and `--ca`, which add
/// to these).
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ClusterConfig {
    #[serde(default)]
    pub dns: Vec<String>,
    #[serde(default)]
    pub dns_search: Vec<String>,
    /// `NAME:IP` entries.
    #[serde(default)]
    pub add_host: Vec<String>,
    /// `HOST[:PORT]=FILE` entries.
    #[serde(default)]
    pub ca: Vec<String>,
}

/// `[worker]`: how the worker runs (the same as the command line's options).
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct WorkerConfig {
    pub sandbox: Option<SandboxMode>,
    pub memory_max: Option<String>,
    pub cpu_quota: Option<String>,
    pub tasks_max: Option<u32>,
    pub io_weight: Option<u32>,
    pub selinux_context: Option<String>,
    /// The skopeo binary that runs as the worker.
    pub skopeo: Option<PathBuf>,
}

/// `[pull]`: time limits, in seconds, the bandwidth cap, and the signature policy.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PullConfig {
    pub timeout: Option<u64>,
    pub stall_timeout: Option<u64>,
    /// `--max-rate`.
    pub max_rate: Option<String>,
    pub policy: Option<PathBuf>,
    #[serde(rename = "registries.d")]
    pub registries_d: Option<PathBuf>,
    pub require_signature: Option<bool>,
}

/// Parse one file. Unknown keys are warned about, not fatal: a newer file must
/// not break an older hostpull.
pub fn parse(name: &str, text: &str) -> anyhow::Result<Config> {
    let de = toml::Deserializer::new(text);
    let mut unknown = Vec::new();
    let config: Config = serde_ignored::deserialize(de, |path| unknown.push(path.to_string()))
        .map_err(|e| {
            Failure::new(
                Kind::Usage,
                format!(
                    "invalid configuration {name}: {}",
                    crate::error::one_line(e.message())
                ),
            )
        })?;
    for key in unknown {
        tracing::warn!("{name}: unknown key {key}, ignored");
    }
    Ok(config)
}

impl Config {
    /// Keys set in `later` override ours.
    fn merge(&mut self, later: Config) {
        let w = later.worker;
        let p = later.pull;
        let c = later.cluster;
        self.cluster.dns.extend(c.dns);
        self.cluster.dns_search.extend(c.dns_search);
        self.cluster.add_host.extend(c.add_host);
        self.cluster.ca.extend(c.ca);
        macro_rules! take {
            ($($dst:expr => $src:expr),* $(,)?) => { $( if $src.is_some() { $dst = $src; } )* };
        }
        take!(
            self.worker.sandbox => w.sandbox,
            self.worker.memory_max => w.memory_max,
            self.worker.cpu_quota => w.cpu_quota,
            self.worker.tasks_max => w.tasks_max,
            self.worker.io_weight => w.io_weight,
            self.worker.selinux_context => w.selinux_context,
            self.worker.skopeo => w.skopeo,
            self.pull.timeout => p.timeout,
            self.pull.stall_timeout => p.stall_timeout,
            self.pull.max_rate => p.max_rate,
            self.pull.policy => p.policy,
            self.pull.registries_d => p.registries_d,
            self.pull.require_signature => p.require_signature,
        );
    }

    /// Fill what the command line left unset.
    pub fn fill(&self, req: &mut Options) {
        let w = &self.worker;
        req.sandbox = req.sandbox.or(w.sandbox);
        req.memory_max = req.memory_max.take().or_else(|| w.memory_max.clone());
        req.cpu_quota = req.cpu_quota.take().or_else(|| w.cpu_quota.clone());
        req.tasks_max = req.tasks_max.or(w.tasks_max);
        req.io_weight = req.io_weight.or(w.io_weight);
        req.selinux_context = req
            .selinux_context
            .take()
            .or_else(|| w.selinux_context.clone());
        req.skopeo = req.skopeo.take().or_else(|| w.skopeo.clone());
        req.timeout = req.timeout.or(self.pull.timeout);
        req.stall_timeout = req.stall_timeout.or(self.pull.stall_timeout);
        req.max_rate = req.max_rate.take().or_else(|| self.pull.max_rate.clone());
        req.policy = req.policy.take().or_else(|| self.pull.policy.clone());
        req.registries_d = req
            .registries_d
            .take()
            .or_else(|| self.pull.registries_d.clone());
        req.require_signature |= self.pull.require_signature.unwrap_or(false);
        let c = &self.cluster;
        prepend(&mut req.dns, &c.dns);
        prepend(&mut req.dns_search, &c.dns_search);
        prepend(&mut req.add_hosts, &c.add_host);
        prepend(&mut req.cas, &c.ca);
    }
}

/// `mine` first, then what the command line gave.
fn prepend<T: Clone>(cli: &mut Vec<T>, mine: &[T]) {
    let mut all = mine.to_vec();
    all.append(cli);
    *cli = all;
}

/// A configuration file that cannot be read is a configuration error (2) that
/// names it, whatever the reason: a directory where the file belongs or the
/// reverse, a symlink out of the root or in a loop, bytes that are not UTF-8.
fn unreadable(rel: &Path, why: &dyn std::fmt::Display) -> anyhow::Error {
    Failure::new(
        Kind::Usage,
        format!("cannot read configuration /{}: {why}", rel.display()),
    )
    .into()
}

/// The text of `rel` under `root`, or `None` if there is no such file.
fn read_optional(root: &Dir, rel: &Path) -> anyhow::Result<Option<String>> {
    let Some(f) = root.open_optional(rel).map_err(|e| unreadable(rel, &e))? else {
        return Ok(None);
    };
    // Opening a directory succeeds; say what is wrong rather than EISDIR.
    if f.metadata().map_err(|e| unreadable(rel, &e))?.is_dir() {
        return Err(unreadable(rel, &"it is a directory, not a file"));
    }
    std::io::read_to_string(f)
        .map(Some)
        .map_err(|e| unreadable(rel, &e))
}

/// Read every configuration file under `root`, in precedence order.
pub fn load(root: &Dir) -> anyhow::Result<Config> {
    let mut config = Config::default();
    for dir in DIRS {
        let mut files = vec![Path::new(dir).join("config.toml")];
        let dropins = Path::new(dir).join("config.d");
        let unreadable = |e: std::io::Error| unreadable(&dropins, &e);
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
            let Some(text) = read_optional(root, &f)? else {
                continue;
            };
            config.merge(parse(&format!("/{}", f.display()), &text)?);
        }
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
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
            let e = load(&root).unwrap_err();
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
        let e = load_profile(&root, "p").unwrap_err();
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
"#,
        )
        .unwrap();
        assert_eq!(
            (
                c.pull.policy.as_deref(),
                c.pull.registries_d.as_deref(),
                c.pull.require_signature
            ),
            (
                Some(Path::new("/etc/hostpull/policy.json")),
                Some(Path::new("/etc/hostpull/registries.d")),
                Some(true)
            )
        );
        let mut req = Options::default();
        c.fill(&mut req);
        assert!(req.require_signature);
        assert_eq!(req.policy.as_deref(), c.pull.policy.as_deref());
        assert_eq!(c.worker.sandbox, Some(SandboxMode::Systemd));
        assert_eq!(c.worker.memory_max.as_deref(), Some("256M"));
        assert_eq!(c.worker.tasks_max, Some(64));
        assert_eq!(
            req.skopeo.as_deref(),
            Some(Path::new("/opt/skopeo-1.22/bin/skopeo"))
        );
        assert_eq!(c.pull.stall_timeout, Some(30));
        assert_eq!(req.max_rate.as_deref(), Some("20M"));
        assert_eq!(parse("t", "").unwrap(), Config::default());
        assert_eq!(
            parse("t", "[worker]\nbogus = 1\n[other]\n").unwrap(),
            Config::default(),
            "unknown keys warn"
        );
        for bad in [
            "[worker",
            "[worker]\ntasks-max = \"x\"",
            "[worker]\nsandbox = \"chroot\"",
            "worker = 3",
        ] {
            let e = parse("t", bad).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
            assert!(!e.to_string().contains('\n'), "{e}");
        }
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
        let p = load_profile(&root, "os").unwrap();
        assert_eq!(p.image, "a.io/os:2", "/etc wins over /usr/lib");
        let mut req = Options {
            dest: Some("oci:/cli".into()),
            authfiles: vec!["/cli.json".into()],
            ..Default::default()
        };
        p.fill(&mut req);
        assert_eq!(
            (req.image.as_deref(), req.dest.as_deref()),
            (Some("a.io/os:2"), Some("oci:/cli"))
        );
        assert_eq!(
            req.authfiles,
            [std::path::PathBuf::from("/p.json"), "/cli.json".into()]
        );
        assert_eq!(req.policy.as_deref(), Some(Path::new("/os-policy.json")));
        assert!(req.require_signature);
        // A profile's cap wins over config.toml's (cli.rs fills the profile first).
        Config {
            pull: PullConfig {
                max_rate: Some("20M".into()),
                ..Default::default()
            },
            ..Default::default()
        }
        .fill(&mut req);
        assert_eq!(req.max_rate.as_deref(), Some("500K"));
        w(
            "etc/hostpull/pulls.d/typo.toml",
            "image = \"x\"\ndest = \"oci:/y\"\nauthfiles = []\n",
        );
        for bad in ["typo", "missing", "../etc/x", ""] {
            assert_eq!(
                crate::error::exit_code(&load_profile(&root, bad).unwrap_err()),
                2,
                "{bad}"
            );
        }
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
        let c = load(&root).unwrap();
        assert_eq!(c.worker.memory_max.as_deref(), Some("2G"));
        assert_eq!(c.worker.tasks_max, Some(30));
        assert_eq!(c.worker.io_weight, Some(5));
        assert_eq!(c.pull.timeout, Some(99));
        // The command line wins; config fills the rest.
        let mut req = Options {
            tasks_max: Some(7),
            skopeo: Some("/opt/other/skopeo".into()),
            ..Default::default()
        };
        c.fill(&mut req);
        assert_eq!(
            (req.tasks_max, req.memory_max.as_deref(), req.timeout),
            (Some(7), Some("2G"), Some(99))
        );
        assert_eq!(req.skopeo.as_deref(), Some(Path::new("/opt/other/skopeo")));
        let empty = tempfile::tempdir().unwrap();
        let root = Dir::open_ambient_dir(empty.path(), ambient_authority()).unwrap();
        assert_eq!(load(&root).unwrap(), Config::default());
    }
}

/// A pull profile, `pulls.d/NAME.toml`: what `hostpull-pull@NAME.service`
/// pulls. Keys are the command line's long options; lists for repeatable ones.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Profile {
    pub image: String,
    pub dest: String,
    pub platform: Option<String>,
    #[serde(default)]
    pub authfile: Vec<std::path::PathBuf>,
    #[serde(default)]
    pub pull_secret: Vec<std::path::PathBuf>,
    #[serde(default)]
    pub registry_token: Vec<String>,
    pub cert_dir: Option<std::path::PathBuf>,
    #[serde(default)]
    pub ca: Vec<String>,
    pub policy: Option<PathBuf>,
    #[serde(rename = "registries.d")]
    pub registries_d: Option<PathBuf>,
    #[serde(default)]
    pub require_signature: bool,
    pub max_rate: Option<String>,
}

/// The profile `name` from the first of `DIRS` (highest precedence first) that
/// has `pulls.d/NAME.toml`. A misspelled key fails: a profile is a unit's whole job.
pub fn load_profile(root: &Dir, name: &str) -> anyhow::Result<Profile> {
    if name.is_empty() || name.contains(['/', '.']) {
        return Err(Failure::new(Kind::Usage, format!("invalid profile name {name:?}")).into());
    }
    for dir in DIRS.iter().rev() {
        let rel = Path::new(dir).join("pulls.d").join(format!("{name}.toml"));
        let Some(text) = read_optional(root, &rel)? else {
            continue;
        };
        return toml::from_str(&text).map_err(|e| {
            let msg = crate::error::one_line(e.message());
            Failure::new(
                Kind::Usage,
                format!("invalid pull profile /{}: {msg}", rel.display()),
            )
            .into()
        });
    }
    Err(Failure::new(
        Kind::Usage,
        format!("no pull profile {name:?} in /etc, /run or /usr/lib hostpull/pulls.d"),
    )
    .into())
}

impl Profile {
    /// Fill what the command line left unset.
    pub fn fill(&self, req: &mut Options) {
        if req.image.is_none() {
            req.image = Some(self.image.clone());
        }
        if req.dest.is_none() {
            req.dest = Some(self.dest.clone());
        }
        req.platform = req.platform.take().or_else(|| self.platform.clone());
        req.cert_dir = req.cert_dir.take().or_else(|| self.cert_dir.clone());
        prepend(&mut req.authfiles, &self.authfile);
        prepend(&mut req.pull_secrets, &self.pull_secret);
        prepend(&mut req.tokens, &self.registry_token);
        prepend(&mut req.cas, &self.ca);
        req.policy = req.policy.take().or_else(|| self.policy.clone());
        req.registries_d = req
            .registries_d
            .take()
            .or_else(|| self.registries_d.clone());
        req.require_signature |= self.require_signature;
        req.max_rate = req.max_rate.take().or_else(|| self.max_rate.clone());
    }
}
