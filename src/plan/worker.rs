//! What the worker of one pull may use and how it is isolated: a description
//! the plan makes and `sandbox/` carries out, plus the checks the plan runs on
//! its limits and addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use crate::options::SandboxMode;
use crate::plan::dns::Dns;
use crate::plan::host::{Host, env_dirs, on_path};
use crate::plan::proxy::Proxy;
use crate::plan::trust::Trust;

/// Everything the worker may use for one pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSpec {
    /// How it is isolated: `--sandbox auto` is decided by the plan.
    pub isolation: Isolation,
    /// The skopeo binary: `--skopeo`, `HOSTPULL_SKOPEO`, `[worker] skopeo`, or
    /// `skopeo`; a bare name as root's `PATH` finds it, so that the binary
    /// whose version root asks is the one the worker runs.
    pub skopeo: PathBuf,
    /// Where root keeps the worker's version for as long as its binary is
    /// unchanged: `skopeo-version` in the service's state directory
    /// (`$STATE_DIRECTORY`), if it has one.
    pub version_cache: Option<PathBuf>,
    /// The system bus's address, if the environment gives one
    /// (`DBUS_SYSTEM_BUS_ADDRESS`): the one thing of root's environment that
    /// `systemd-run` gets.
    pub system_bus: Option<std::ffi::OsString>,
    /// False under `--tls-verify=false`: skopeo skips TLS verification.
    pub tls_verify: bool,
    /// The cgroup limits of its unit.
    pub limits: Limits,
    /// `SELinuxContext=` of the worker unit; set where SELinux is enabled.
    pub selinux_context: Option<String>,
    /// The CAs and client certificates it may use.
    pub trust: Trust,
    /// The worker's own resolver settings and /etc/hosts entries.
    pub dns: Dns,
    /// The worker's registries.conf: this image's table only.
    pub registries_conf: String,
    /// The HTTP(S) proxy it goes through, and which hosts go direct.
    pub proxy: Proxy,
    /// The hosts the image may come from, in the order skopeo tries them (the
    /// mirrors, then the primary): how root tells which answered what.
    pub sources: Vec<String>,
}

/// The file in hostpull's state directory that remembers the worker's version.
pub const VERSION_CACHE: &str = "skopeo-version";

/// The worker's skopeo: the one asked for, else `skopeo`; a bare name as
/// root's `PATH` finds it, or as given where it finds none (starting it then
/// fails, as it would have).
pub(super) fn skopeo(asked: Option<&Path>, host: &dyn Host) -> PathBuf {
    let program = asked.unwrap_or(Path::new("skopeo"));
    let bare = program.components().count() == 1;
    (bare.then(|| program.to_str().and_then(|name| on_path(host, name))))
        .flatten()
        .unwrap_or_else(|| program.to_owned())
}

/// Where the worker's version is kept ([`WorkerSpec::version_cache`]).
pub(super) fn version_cache(host: &dyn Host) -> Option<PathBuf> {
    let state = env_dirs(host, "STATE_DIRECTORY").into_iter().next();
    state.map(|d| d.join(VERSION_CACHE))
}

#[cfg(test)]
impl WorkerSpec {
    /// A worker with nothing but defaults: no credentials, trust or DNS.
    pub(crate) fn for_tests(isolation: Isolation) -> Self {
        Self {
            isolation,
            skopeo: "/usr/bin/skopeo".into(),
            version_cache: None,
            system_bus: None,
            tls_verify: true,
            limits: Limits::default(),
            selinux_context: None,
            trust: Trust::default(),
            dns: Dns::default(),
            registries_conf: String::new(),
            proxy: Proxy::default(),
            sources: vec!["r.io".into()],
        }
    }
}

/// How a worker is isolated, once `auto` is decided: a pull knows which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// A transient systemd service with its own user and a read-only system.
    Systemd,
    /// A plain child process with a clean environment (`--sandbox none`).
    None,
}

impl Isolation {
    /// The `--sandbox` mode that asks for it.
    pub fn mode(self) -> SandboxMode {
        match self {
            Self::Systemd => SandboxMode::Systemd,
            Self::None => SandboxMode::None,
        }
    }
}

/// cgroup limits of one worker unit, as systemd.resource-control(5) spells them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// `MemoryMax=`, bytes ([`size_text`] spells them as given).
    pub memory_max: u64,
    /// `TasksMax=`: threads and processes.
    pub tasks_max: u32,
    /// `CPUQuota=`, percent of one CPU; unset means no quota.
    pub cpu_quota: Option<u32>,
    /// `IOWeight=`, 1–10000; low so that host workloads win.
    pub io_weight: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_max: 512 << 20,
            tasks_max: 256,
            cpu_quota: None,
            io_weight: 50,
        }
    }
}

/// A systemd size: digits with an optional K, M, G or T suffix (base 1024).
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, shift) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 10),
        b'M' | b'm' => (&s[..s.len() - 1], 20),
        b'G' | b'g' => (&s[..s.len() - 1], 30),
        b'T' | b't' => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    num.parse::<u64>()
        .ok()?
        .checked_mul(1 << shift)
        .filter(|&b| b > 0)
}

/// Bytes as [`parse_size`] reads them, with the largest suffix that divides
/// them: 536870912 is `512M`.
pub fn size_text(bytes: u64) -> String {
    for (suffix, shift) in [('T', 40), ('G', 30), ('M', 20), ('K', 10)] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// `N%` with N from 1 to 100 times the number of CPUs, as systemd takes it: N.
pub fn parse_cpu_quota(s: &str) -> Option<u32> {
    s.strip_suffix('%')
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|&n| n > 0)
}

/// What no worker unit may reach (`IPAddressDeny=`), as (network, prefix
/// length): IPv4 and IPv6 link-local, where clouds serve instance metadata
/// and credentials (169.254.169.254), and AWS's IPv6 metadata endpoint. (A
/// cloud that serves it elsewhere, as Alibaba's 100.100.100.200, is not covered.)
pub const IP_DENY: [(IpAddr, u8); 3] = [
    (IpAddr::V4(Ipv4Addr::new(169, 254, 0, 0)), 16),
    (IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0)), 10),
    (
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
        128,
    ),
];

/// Whether [`IP_DENY`] covers `ip` (an IPv4-mapped IPv6 address as IPv4).
pub fn ip_denied(ip: IpAddr) -> bool {
    IP_DENY
        .iter()
        .any(|&(net, len)| match (ip.to_canonical(), net) {
            (IpAddr::V4(a), IpAddr::V4(n)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                u32::from(a) & mask == u32::from(n)
            }
            (IpAddr::V6(a), IpAddr::V6(n)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                u128::from(a) & mask == u128::from(n)
            }
            _ => false,
        })
}

/// Refuse a proxy at an address that a worker unit may not reach
/// ([`IP_DENY`]): it would fail only once the unit ran, and obscurely.
pub fn check_proxy(proxy: &Proxy, isolation: Isolation) -> anyhow::Result<()> {
    for url in proxy.http.iter().chain(&proxy.https) {
        let host = crate::plan::proxy::split_host_port(&url.authority).0;
        let ip = host.trim_start_matches('[').trim_end_matches(']').parse();
        if isolation == Isolation::Systemd && ip.is_ok_and(ip_denied) {
            return crate::error::fail(
                crate::error::Kind::Usage,
                format!(
                    "the proxy {url} is at a link-local or cloud metadata address, which the worker unit may not reach (IPAddressDeny=)"
                ),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::testing::MemHost;

    /// (PATH, what was asked, the skopeo the worker runs): a bare name as
    /// PATH finds it, relative entries skipped; a path as given.
    #[test]
    fn the_worker_runs_the_skopeo_whose_version_root_asks() {
        let host = |path: &str| {
            MemHost::new("/")
                .file("/usr/bin/skopeo", "")
                .file("/opt/s/skopeo", "")
                .file("bin/skopeo", "")
                .var("PATH", path)
        };
        for (path, asked, want) in [
            ("/usr/local/bin:/usr/bin", None, "/usr/bin/skopeo"),
            ("/opt/s:/usr/bin", None, "/opt/s/skopeo"),
            ("bin:/usr/bin", None, "/usr/bin/skopeo"),
            ("/usr/bin", Some("other"), "other"),
            ("/nowhere", None, "skopeo"),
            ("", None, "skopeo"),
            ("/opt/s", Some("/usr/bin/skopeo"), "/usr/bin/skopeo"),
            ("/opt/s", Some("./skopeo"), "./skopeo"),
        ] {
            let got = skopeo(asked.map(Path::new), &host(path));
            assert_eq!(got, Path::new(want), "{path} {asked:?}");
        }
    }

    /// The version is kept in the service's first state directory, only an
    /// absolute one.
    #[test]
    fn the_version_is_kept_in_the_state_directory() {
        for (state, want) in [
            (None, None),
            (
                Some("/var/lib/hostpull"),
                Some("/var/lib/hostpull/skopeo-version"),
            ),
            (
                Some("/var/lib/a:/var/lib/b"),
                Some("/var/lib/a/skopeo-version"),
            ),
            (Some("relative"), None),
        ] {
            let mut host = MemHost::new("/");
            if let Some(s) = state {
                host = host.var("STATE_DIRECTORY", s);
            }
            assert_eq!(version_cache(&host), want.map(PathBuf::from), "{state:?}");
        }
    }

    #[test]
    fn denied_addresses() {
        for (ip, want) in [
            ("169.254.169.254", true),
            ("169.254.0.1", true),
            ("169.253.255.255", false),
            ("169.255.0.0", false),
            ("::ffff:169.254.169.254", true),
            ("fe80::1", true),
            ("febf::1", true),
            ("fec0::1", false),
            ("fd00:ec2::254", true),
            ("fd00:ec2::253", false),
            ("127.0.0.1", false),
            ("127.0.0.2", false),
            ("10.0.0.2", false),
            ("::1", false),
        ] {
            assert_eq!(ip_denied(ip.parse().unwrap()), want, "{ip}");
        }
    }

    /// A unit may not reach a proxy at a denied address; a plain child may.
    #[test]
    fn proxies_at_denied_addresses() {
        use crate::plan::proxy::{ProxySettings, ProxySource};
        let proxy = |url: &str| {
            let given = ProxySettings {
                https: Some(url.into()),
                ..ProxySettings::default()
            };
            Proxy::parse(&given, ProxySource::Environment).unwrap()
        };
        for (url, refused) in [
            ("http://169.254.169.254:3128", true),
            ("http://u:p@[fe80::1]:3128", true),
            ("http://10.0.0.1:3128", false),
            ("http://proxy:3128", false),
        ] {
            let e = check_proxy(&proxy(url), Isolation::Systemd);
            assert_eq!(e.is_err(), refused, "{url}");
            if let Err(e) = e {
                assert!(!e.to_string().contains(":p@"), "{e}");
            }
            assert!(check_proxy(&proxy(url), Isolation::None).is_ok());
        }
    }

    #[test]
    fn sizes() {
        for (s, want) in [
            ("512M", Some(512 << 20)),
            ("16M", Some(16 << 20)),
            ("1G", Some(1 << 30)),
            ("4096", Some(4096)),
            ("2k", Some(2048)),
            ("0", None),
            ("M", None),
            ("-1M", None),
            ("1.5G", None),
            ("99999999999999999999", None),
        ] {
            assert_eq!(parse_size(s), want, "{s}");
            if let Some(b) = want {
                assert_eq!(parse_size(&size_text(b)), want, "{s}");
            }
        }
        for (b, text) in [
            (512 << 20, "512M"),
            (1 << 30, "1G"),
            (4096, "4K"),
            (1000, "1000"),
        ] {
            assert_eq!(size_text(b), text);
        }
        assert_eq!(parse_cpu_quota("50%"), Some(50));
        assert_eq!(parse_cpu_quota("200%"), Some(200));
        for bad in ["50", "0%", "x%", "-5%"] {
            assert_eq!(parse_cpu_quota(bad), None, "{bad}");
        }
    }
}
