//! `WorkerSpec` → `systemd-run` command: the worker as a transient service with
//! a dynamic user, no capabilities, a read-only system and cgroup limits. Every
//! property is set here, in one place, with the reason for it.

use crate::plan::worker::{IP_DENY, WorkerSpec, size_text};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The slice all workers run in (see systemd/hostpull.slice).
pub const SLICE: &str = "hostpull.slice";
/// Transient worker units are named `hostpull-worker-<orchestrator pid>-<n>.service`.
pub const UNIT_PREFIX: &str = "hostpull-worker-";

/// Hardening of the worker unit. Each line is kept because skopeo works with it;
/// together with `IPAddressDeny=` ([`IP_DENY`]) and a root directory of its own
/// ([`root_directory`]) they measure an exposure of 1.0 ("OK") with
/// `systemd-analyze security` on the running unit, with each worker; what is
/// left is the network itself. tests/systemd.rs checks it.
const HARDENING: &[&str] = &[
    // A fresh uid/gid for each run, released afterwards: the worker owns no file
    // on the host and can read nothing that is not world-readable.
    "DynamicUser=yes",
    // No capabilities at all, and no way to gain any.
    "CapabilityBoundingSet=",
    "AmbientCapabilities=",
    "NoNewPrivileges=yes",
    // The whole file system read-only; /home, /root and /run/user invisible.
    "ProtectSystem=strict",
    "ProtectHome=yes",
    // A private /tmp (also the worker's HOME), private /dev without devices,
    // a private user namespace and SysV IPC namespace.
    "PrivateTmp=yes",
    "PrivateDevices=yes",
    "PrivateUsers=yes",
    "PrivateIPC=yes",
    "DevicePolicy=closed",
    // The kernel's knobs, modules, log, cgroups, clock and hostname stay out of reach.
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectClock=yes",
    "ProtectHostname=yes",
    // Other processes are invisible in /proc, and so is everything but processes.
    "ProtectProc=invisible",
    "ProcSubset=pid",
    // No new namespaces, realtime scheduling, setuid files or personality changes.
    "RestrictNamespaces=yes",
    "RestrictRealtime=yes",
    "RestrictSUIDSGID=yes",
    "LockPersonality=yes",
    // No writable and executable memory: skopeo is a Go binary and needs none.
    "MemoryDenyWriteExecute=yes",
    // Its keys and IPC objects go when it goes.
    "KeyringMode=private",
    "RemoveIPC=yes",
    // Only native system calls of the ordinary service set, without the
    // privileged ones (set*uid, chown, chroot, …) and without changing its own
    // resources (setpriority, sched_setaffinity, mbind, …). Go 1.19 (skopeo
    // 1.9.3) raises its file limit with setrlimit(2) as it starts and carries
    // on if refused: that one call fails with EPERM instead of a kill. Measured
    // with skopeo 1.9.3, 1.18 and 1.22; later Go uses prlimit64, which is left.
    "SystemCallArchitectures=native",
    "SystemCallFilter=@system-service",
    "SystemCallFilter=~@privileged @resources",
    "SystemCallFilter=~setrlimit:EPERM",
    // Whatever it writes is private to it; HOME is its private /tmp.
    "UMask=0077",
    "Environment=HOME=/tmp",
    "WorkingDirectory=/tmp",
];

/// The files and mounts a worker unit gets from the orchestrator's staging dir.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Mounts {
    /// `LoadCredential=NAME:PATH`: root-only files, readable by the worker as
    /// `$CREDENTIALS_DIRECTORY/NAME` on a ramfs that goes with the unit.
    pub credentials: Vec<(String, PathBuf)>,
    /// `BindReadOnlyPaths=SRC:DST`: generated config, read-only.
    pub binds: Vec<(PathBuf, PathBuf)>,
    /// The name servers of the worker's resolv.conf that [`IP_DENY`] covers:
    /// `IPAddressAllow=` lets them through, and nothing else of those ranges.
    pub resolvers: Vec<IpAddr>,
    /// `RootDirectory=`: the worker's own root (src/sandbox/prepare.rs
    /// `worker_root`), which holds only what `binds` bind there.
    pub root: Option<PathBuf>,
}

/// [`IP_DENY`] as systemd spells it.
fn ip_deny() -> Vec<String> {
    IP_DENY
        .iter()
        .map(|(ip, len)| format!("{ip}/{len}"))
        .collect()
}

/// Where a unit's credentials appear inside it.
pub fn credentials_dir(unit: &str) -> PathBuf {
    Path::new("/run/credentials").join(unit)
}

/// A worker unit's name, `hostpull-worker-<id>-<what>.service`, where `id` is
/// [`run_id`]'s: [`super::monitor::unit_owner`] reads the pid back out of it.
pub fn unit_name(id: &str, what: impl std::fmt::Display) -> String {
    format!("{UNIT_PREFIX}{id}-{what}.service")
}

/// `<orchestrator pid>-<random>`: one pull's staging directory and units.
pub fn run_id() -> String {
    format!("{}-{:08x}", std::process::id(), super::rand_u32())
}

/// The `systemd-run` command that starts `programs[0]` (the worker agent, or
/// curl) as worker unit `unit`, with `mounts`, every program of `programs`
/// (what it runs in turn: skopeo) and a network that reaches registries.
///
/// The caller's stdin, stdout and stderr pass through (`--pipe`), so the image
/// proxy's socketpair arrives unchanged as its stdin. [`HARDENING`], the
/// limits, and the unit's domain (selinux/hostpull.te) where SELinux is
/// enabled: without it, init_t would run the program unconfined. Not
/// `--collect`: a unit that failed stays loaded until hostpull has read why (a
/// SIGKILL from the OOM killer on cgroup v1, `oom-kill` on v2) and reset it.
/// `policy`: its `CPUSchedulingPolicy=`, the pull's own ([`super::sched_policy`]),
/// as a child of hostpull would inherit it.
pub fn systemd_run(
    unit: &str,
    spec: &WorkerSpec,
    mounts: &Mounts,
    programs: &[&Path],
    policy: Option<&str>,
) -> Command {
    let mut props = Vec::new();
    for (name, path) in &mounts.credentials {
        props.push(format!("LoadCredential={name}:{}", path.display()));
    }
    for (src, dst) in &mounts.binds {
        props.push(format!(
            "BindReadOnlyPaths={}:{}",
            src.display(),
            dst.display()
        ));
    }
    if let Some(root) = &mounts.root {
        props.extend(root_directory(root, programs));
    }
    // Where a redirect must never lead the worker: the link-local ranges,
    // where AWS, GCP, Azure and OpenStack serve instance metadata and
    // credentials (169.254.169.254; AWS's IPv6 fd00:ec2::254 too), enforced by
    // systemd's cgroup BPF firewall. No allow
    // list: registries redirect blob GETs to S3 or a CDN at addresses nobody
    // knows in advance. The plan refuses a registry at a denied address; the
    // worker's own name servers stay reachable (on GCE, 169.254.169.254 is
    // also the resolver).
    props.push(format!("IPAddressDeny={}", ip_deny().join(" ")));
    if !mounts.resolvers.is_empty() {
        let allow: Vec<String> = mounts.resolvers.iter().map(|ip| ip.to_string()).collect();
        props.push(format!("IPAddressAllow={}", allow.join(" ")));
    }
    let mut c = Command::new("systemd-run");
    c.args(["--pipe", "--wait", "--quiet"])
        .arg(format!("--unit={unit}"))
        .arg(format!("--slice={SLICE}"));
    let l = &spec.limits;
    // Only IPv4 and IPv6 sockets. Measured with strace over pulls by address,
    // by /etc/hosts name and by DNS name: skopeo creates no other kind. The
    // proxy's socketpair is inherited, not created. Where nsswitch asks
    // systemd-resolved over AF_UNIX, glibc falls through to plain DNS.
    let all = HARDENING
        .iter()
        .map(|s| s.to_string())
        .chain([
            "RestrictAddressFamilies=AF_INET AF_INET6".into(),
            format!("MemoryMax={}", size_text(l.memory_max)),
            format!("TasksMax={}", l.tasks_max),
            format!("IOWeight={}", l.io_weight),
        ])
        .chain(l.cpu_quota.iter().map(|q| format!("CPUQuota={q}%")))
        .chain(policy.map(|p| format!("CPUSchedulingPolicy={p}")))
        .chain(props)
        .chain(
            spec.selinux_context
                .iter()
                .map(|c| format!("SELinuxContext={c}")),
        );
    for p in all {
        c.arg("--property").arg(p);
    }
    c.arg("--").arg(programs[0]);
    // systemd-run needs nothing of ours but the way to the system bus; the
    // unit itself starts from systemd's clean environment.
    c.env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    if let Some(bus) = &spec.system_bus {
        c.env("DBUS_SYSTEM_BUS_ADDRESS", bus);
    }
    c
}

/// The properties of a unit whose root is `root`: the API file systems, an
/// empty /run (where systemd puts the unit's credentials), and each of
/// `programs`' directories, read-only at the path the unit runs it by, if it
/// is not in /usr (bound already) or a top-level symlink to it.
fn root_directory(root: &Path, programs: &[&Path]) -> Vec<String> {
    let mut props = vec![
        format!("RootDirectory={}", root.display()),
        "MountAPIVFS=yes".into(),
        "TemporaryFileSystem=/run".into(),
    ];
    for program in programs {
        if let Some(dir) = program.parent()
            && let Ok(real) = std::fs::canonicalize(dir)
            && !real.starts_with("/usr")
        {
            let bind = format!("BindReadOnlyPaths={}:{}", real.display(), dir.display());
            if !props.contains(&bind) {
                props.push(bind);
            }
        }
    }
    props
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(c: &Command) -> Vec<String> {
        c.get_args()
            .map(|a| a.to_str().unwrap().to_owned())
            .collect()
    }

    /// A program outside /usr is bound where the unit runs it by; one in
    /// /usr, or behind a top-level symlink into it, is there already.
    #[test]
    fn root_directory_binds_the_program_outside_usr() {
        let td = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(td.path()).unwrap();
        let binds = |p: &Path| -> Vec<String> {
            root_directory(Path::new("/r"), &[p])
                .into_iter()
                .filter(|p| p.starts_with("BindReadOnlyPaths="))
                .collect()
        };
        assert_eq!(
            binds(&td.path().join("skopeo")),
            [format!(
                "BindReadOnlyPaths={}:{}",
                real.display(),
                td.path().display()
            )]
        );
        assert!(binds(Path::new("/usr/bin/skopeo")).is_empty());
        if std::fs::canonicalize("/bin").is_ok_and(|b| b.starts_with("/usr")) {
            assert!(binds(Path::new("/bin/skopeo")).is_empty());
        }
    }

    #[test]
    fn command_carries_every_setting() {
        let mounts = Mounts {
            credentials: vec![("auth.json".into(), "/run/hostpull/1/auth.json".into())],
            binds: vec![(
                "/run/hostpull/1/resolv.conf".into(),
                "/etc/resolv.conf".into(),
            )],
            resolvers: vec!["169.254.169.254".parse().unwrap()],
            root: Some("/run/hostpull/1/root".into()),
        };
        let spec = WorkerSpec {
            limits: crate::plan::worker::Limits {
                cpu_quota: Some(50),
                ..Default::default()
            },
            selinux_context: Some("system_u:system_r:hostpull_worker_t:s0".into()),
            ..WorkerSpec::for_tests(crate::plan::worker::Isolation::Systemd)
        };
        let c = systemd_run(
            "hostpull-worker-1-0.service",
            &spec,
            &mounts,
            &[Path::new("/usr/bin/skopeo")],
            Some("batch"),
        );
        assert_eq!(c.get_program(), "systemd-run");
        let a = args(&c);
        assert_eq!(
            &a[..5],
            [
                "--pipe",
                "--wait",
                "--quiet",
                "--unit=hostpull-worker-1-0.service",
                "--slice=hostpull.slice"
            ]
        );
        let props: Vec<&str> = a
            .windows(2)
            .filter(|w| w[0] == "--property")
            .map(|w| w[1].as_str())
            .collect();
        for want in [
            "DynamicUser=yes",
            "CapabilityBoundingSet=",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "PrivateTmp=yes",
            "SystemCallFilter=@system-service",
            "SystemCallFilter=~@privileged @resources",
            "SystemCallFilter=~setrlimit:EPERM",
            "RestrictAddressFamilies=AF_INET AF_INET6",
            "UMask=0077",
            "MemoryMax=512M",
            "TasksMax=256",
            "IOWeight=50",
            "CPUQuota=50%",
            "CPUSchedulingPolicy=batch",
            "LoadCredential=auth.json:/run/hostpull/1/auth.json",
            "BindReadOnlyPaths=/run/hostpull/1/resolv.conf:/etc/resolv.conf",
            "SELinuxContext=system_u:system_r:hostpull_worker_t:s0",
            "IPAddressDeny=169.254.0.0/16 fe80::/10 fd00:ec2::254/128",
            "IPAddressAllow=169.254.169.254",
            "RootDirectory=/run/hostpull/1/root",
            "MountAPIVFS=yes",
            "TemporaryFileSystem=/run",
        ] {
            assert!(props.contains(&want), "{want} missing from {props:?}");
        }
        assert_eq!(&a[a.len() - 2..], ["--", "/usr/bin/skopeo"]);
        let env: Vec<_> = c
            .get_envs()
            .map(|(k, _)| k.to_str().unwrap().to_owned())
            .collect();
        assert!(
            env.iter()
                .all(|k| k == "PATH" || k == "DBUS_SYSTEM_BUS_ADDRESS"),
            "{env:?}"
        );
    }

    #[test]
    fn cpu_settings_unset_by_default() {
        let spec = WorkerSpec::for_tests(crate::plan::worker::Isolation::Systemd);
        let c = systemd_run("u", &spec, &Mounts::default(), &[Path::new("skopeo")], None);
        assert!(!args(&c).iter().any(|a| a.starts_with("CPU")
            || a.starts_with("SELinuxContext")
            || a.starts_with("IPAddressAllow")));
        assert!(args(&c).iter().any(|a| a.starts_with("IPAddressDeny=")));
    }
}
