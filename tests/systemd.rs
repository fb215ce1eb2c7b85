//! The systemd sandbox, in a real systemd (tests/sysd.sh) with real transient
//! units. These run only inside the rig's systemd, where tests/run.sh runs them.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

fn systemctl(args: &[&str]) -> String {
    let out = Command::new("systemctl").args(args).output().unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// The worker units an orchestrator with this pid has loaded now.
fn units_of(pid: u32) -> Vec<String> {
    systemctl(&[
        "list-units",
        "--all",
        "--plain",
        "--no-legend",
        &format!("hostpull-worker-{pid}-*"),
    ])
    .lines()
    .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
    .collect()
}

/// Whether the image proxy's skopeo runs in `unit` (started by the worker
/// agent, the unit's program, when root first asks for a blob).
fn proxy_runs_in(unit: &str) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        let cgroup = std::fs::read_to_string(p.path().join("cgroup")).unwrap_or_default();
        let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        let mut args = cmdline.split(|&b| b == 0);
        cgroup.contains(&format!("/{unit}"))
            && args.next().is_some_and(|a| !a.ends_with(b"hostpull"))
            && args.any(|a| a == b"experimental-image-proxy")
    })
}

/// One worker unit serves a whole pull: an index, its platform's manifest
/// and the blobs, then again for an image the layout has (the timer's common
/// case). Units are numbered from 0 as they start, and the report names the
/// last one.
#[test]
fn one_worker_unit_serves_a_pull() {
    let s = scratch();
    let dest = oci(&s.path().join("l"));
    for fetched in [1, 0] {
        let r = run(&mut systemd_pull(var("RIG_IMG_MULTI"), &dest)).json();
        assert_eq!(r["layers_fetched"], fetched);
        let unit = r["worker"]["unit"].as_str().unwrap();
        assert!(unit.ends_with("-0.service"), "{unit}: more than one unit");
    }
}

fn systemd_pull(image: &str, dest: &str) -> Command {
    let mut c = with_rig_creds(pull_cmd(image, dest));
    c.args(["--sandbox", "systemd"]);
    c
}

#[test]
fn worker_runs_as_a_dynamic_user() {
    let s = scratch();
    let dest = oci(&s.path().join("l"));
    let r = run(&mut systemd_pull(var("RIG_IMG_SMALL"), &dest)).json();
    let w = &r["worker"];
    assert_eq!(w["sandbox"], "systemd");
    let uid = w["uid"].as_u64().expect("the worker's uid was seen");
    assert!((61184..=65519).contains(&uid), "dynamic uid range: {uid}");
    assert!(w["unit"].as_str().unwrap().starts_with("hostpull-worker-"));
    assert!(w["memory_peak_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn auto_means_systemd_here() {
    let s = scratch();
    let dest = oci(&s.path().join("l"));
    let mut c = with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), &dest));
    c.args(["--sandbox", "auto"]);
    assert_eq!(run(&mut c).json()["worker"]["sandbox"], "systemd");
}

#[test]
fn unit_has_the_configured_properties() {
    let s = scratch();
    let dest = oci(&s.path().join("l"));
    // Memory and CPU from the configuration; the command line's tasks-max wins over it.
    let root = s.path().join("root");
    std::fs::create_dir_all(root.join("etc/hostpull/config.d")).unwrap();
    std::fs::write(
        root.join("etc/hostpull/config.toml"),
        "[worker]\nmemory-max = \"1G\"\ntasks-max = 999\n",
    )
    .unwrap();
    std::fs::write(
        root.join("etc/hostpull/config.d/50-test.toml"),
        "[worker]\nmemory-max = \"400M\"\ncpu-quota = \"150%\"\n",
    )
    .unwrap();
    let mut c = systemd_pull(var("RIG_IMG_BIG"), &dest);
    c.args(["--tasks-max", "128", "--config-root"])
        .arg(config_root(&root));
    let child = spawn_piped(&mut c);
    let pid = child.id();
    // One unit serves the pull: the manifest's `inspect`, then the proxy.
    let unit = format!("hostpull-worker-{pid}-");
    let mut shown = String::new();
    let mut security = String::new();
    wait_for("the proxy unit", Duration::from_secs(30), || {
        let Some(u) = units_of(pid)
            .into_iter()
            .find(|u| u.starts_with(&unit) && proxy_runs_in(u))
        else {
            return false;
        };
        shown = systemctl(&[
            "show",
            "-p",
            "DynamicUser,MemoryMax,MemoryLimit,TasksMax,CapabilityBoundingSet,CPUQuotaPerSecUSec,IOWeight,NoNewPrivileges,ProtectSystem,Slice,IPAddressDeny,IPAddressAllow",
            &u,
        ]);
        if !shown.contains("DynamicUser=yes") {
            return false;
        }
        let out = Command::new("systemd-analyze")
            .args(["security", "--no-pager", &u])
            .output()
            .unwrap();
        security = String::from_utf8_lossy(&out.stdout).into_owned();
        true
    });
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `systemd-analyze security` of the running unit, with this worker: the
    // system calls are narrowed, and the root is its own. What is left (1.0
    // with each worker) is the network itself, with no allow list
    // (IPAddressDeny= only: registries redirect blobs to addresses nobody
    // knows in advance), and the clock's device that ProtectClock= leaves
    // readable.
    let exposure: f64 = security
        .lines()
        .find_map(|l| {
            l.split_once("Overall exposure level for ")?
                .1
                .split_once(": ")
        })
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in\n{security}"));
    eprintln!("worker {}: exposure {exposure}", worker_protocol());
    assert!(exposure <= 1.0, "exposure {exposure}:\n{security}");
    for gone in [
        "RootDirectory=/RootImage=",
        "SystemCallFilter=~@privileged",
        "SystemCallFilter=~@resources",
    ] {
        assert!(
            !security
                .lines()
                .any(|l| l.contains('✗') && l.contains(gone)),
            "{gone} still counts against the unit:\n{security}"
        );
    }
    for want in [
        "DynamicUser=yes",
        "MemoryMax=419430400",
        "TasksMax=128",
        "CapabilityBoundingSet=\n",
        "CPUQuotaPerSecUSec=1.500000s",
        "IOWeight=50",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "Slice=hostpull.slice",
        // No allow list: registries redirect blobs to addresses nobody knows
        // in advance.
        "IPAddressAllow=\n",
    ] {
        assert!(shown.contains(want), "{want:?} not in\n{shown}");
    }
    // Link-local and cloud metadata denied; systemd lists them in no fixed order.
    let mut denied: Vec<&str> = shown
        .lines()
        .find_map(|l| l.strip_prefix("IPAddressDeny="))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    denied.sort_unstable();
    assert_eq!(
        denied,
        ["169.254.0.0/16", "fd00:ec2::254/128", "fe80::/10"],
        "{shown}"
    );
}

#[test]
fn worker_cannot_read_root_secrets() {
    // The probe reads the secret beside itself.
    let (dir, probe) = script_under_run("probe-worker.sh");
    write_private(&dir.path().join("secret"), b"root-only");
    let s = scratch();
    let mut c = systemd_pull(var("RIG_IMG_SMALL"), &oci(&s.path().join("l")));
    c.env("HOSTPULL_SKOPEO", &probe);
    let r = run(&mut c);
    let report = r
        .stderr
        .lines()
        .find(|l| l.starts_with("probe: "))
        .unwrap_or_else(|| panic!("{}", r.stderr));
    let field = |k: &str| {
        report
            .split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("{k} missing in {report}"))
            .to_owned()
    };
    let uid: u32 = field("uid").parse().unwrap();
    assert!((61184..=65519).contains(&uid), "{report}");
    assert_eq!(field("secret"), "denied", "{report}");
    assert_eq!(field("creds"), "readable", "its own credential: {report}");
    assert_eq!(field("capeff"), "0000000000000000", "{report}");
    assert_eq!(field("nnp"), "1", "{report}");
    assert_eq!(field("home"), "/tmp", "{report}");
    // Its root is its own: of the host's tree, only programs, libraries,
    // configuration and add-on packages (src/sandbox/prepare.rs worker_root);
    // /var holds only its private /var/tmp. (/root, and /home where the host
    // has one, are ProtectHome='s inaccessible mounts.)
    let top = field("top");
    // The unit's program, the worker agent (this build of hostpull), has its
    // own directory bound where it is outside /usr.
    let agent_top = Path::new(env!("CARGO_BIN_EXE_hostpull"))
        .components()
        .nth(1)
        .and_then(|c| c.as_os_str().to_str())
        .unwrap();
    let allowed = [
        "usr", "etc", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "tmp", "var", "run",
        "dev", "proc", "sys", "root", "home", agent_top,
    ];
    assert!(top.split(',').any(|e| e == "usr"), "{report}");
    assert!(
        top.split(',').all(|e| e.is_empty() || allowed.contains(&e)),
        "{report}"
    );
    assert_eq!(field("var"), "tmp,", "{report}");
    // And the same probe without the sandbox runs as root: the check can fail.
    let mut c = with_rig_creds(pull_cmd(var("RIG_IMG_SMALL"), &oci(&s.path().join("m"))));
    c.args(["--sandbox", "none"]).env("HOSTPULL_SKOPEO", &probe);
    let r = run(&mut c);
    assert!(r.stderr.contains("uid=0 secret=readable"), "{}", r.stderr);
    assert!(!r.stderr.contains(" var=tmp,"), "{}", r.stderr);
}

/// The proxy streams blobs, so its memory stays flat: 512 MiB go through a
/// 24M worker (it peaks near 18-19.5 MB, with the manifest's `inspect`
/// beside the proxy; 13 MB when they came one after the other). Below what
/// skopeo needs at all, the OOM killer strikes, and that is what hostpull
/// reports.
#[test]
fn out_of_memory_is_reported_and_nothing_published() {
    let s = scratch();
    let fits = s.path().join("fits");
    let mut c = systemd_pull(var("RIG_IMG_BIG"), &oci(&fits));
    c.args(["--memory-max", "24M"]);
    let r = run(&mut c).json();
    assert!(r["worker"]["memory_peak_bytes"].as_u64().unwrap() <= 24 << 20);

    let dest = s.path().join("l");
    let mut c = systemd_pull(var("RIG_IMG_BIG"), &oci(&dest));
    c.args(["--memory-max", "8M"]);
    let r = run(&mut c);
    r.assert_failure(8);
    assert!(
        r.stderr
            .starts_with("error: worker killed: out of memory (MemoryMax=8M)"),
        "{}",
        r.stderr
    );
    assert!(!dest.exists());
}

#[test]
fn sigterm_stops_the_unit_and_leaves_the_layout() {
    let s = scratch();
    let dest = s.path().join("l");
    run(&mut systemd_pull(var("RIG_IMG_SMALL"), &oci(&dest))).json();
    let before = snapshot(&dest);
    let mut child = systemd_pull(var("RIG_IMG_BIG"), &oci_tag(&dest, "big"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_for("the proxy", Duration::from_secs(30), || {
        units_of(pid).iter().any(|u| proxy_runs_in(u))
    });
    wait_for_reads(pid, 4 << 20);
    let t0 = Instant::now();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    wait_for("the units to go", Duration::from_secs(2), || {
        units_of(pid).is_empty()
    });
    eprintln!("units gone {:?} after SIGTERM", t0.elapsed());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    assert_eq!(
        snapshot(&dest),
        before,
        "the layout is exactly as before, no temp files"
    );
    assert!(staging_of(pid).is_empty());
}

/// `/run/hostpull/<pid>-*` of one orchestrator.
fn staging_of(pid: u32) -> Vec<String> {
    std::fs::read_dir("/run/hostpull")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().into_string().unwrap())
                .filter(|n| n.starts_with(&format!("{pid}-")))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn staging_is_removed_after_success_and_failure() {
    let s = scratch();
    for (authfile, ok) in [
        (var("RIG_AUTHFILE"), true),
        (var("RIG_BAD_AUTHFILE"), false),
    ] {
        let dest = format!(
            "oci:{}",
            s.path().join(if ok { "ok" } else { "bad" }).display()
        );
        let mut c = pull_cmd(var("RIG_IMG_SMALL"), &dest);
        c.args([
            "--sandbox",
            "systemd",
            "--authfile",
            authfile,
            "--cert-dir",
            var("RIG_CERT_DIR"),
        ]);
        let child = spawn_piped(&mut c);
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.success(),
            ok,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            staging_of(pid).is_empty(),
            "staging left: {:?}",
            staging_of(pid)
        );
        assert!(units_of(pid).is_empty());
    }
}

#[test]
fn leftover_units_of_a_dead_orchestrator_are_stopped() {
    // A unit as a crashed hostpull (pid 999999 does not exist) would leave it.
    let unit = "hostpull-worker-999999-deadbeef-0.service";
    let st = Command::new("systemd-run")
        .args([
            "--quiet",
            "--collect",
            &format!("--unit={unit}"),
            "--slice=hostpull.slice",
            "sleep",
            "300",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    // (Another test's pull may already stop it: any hostpull start does.)
    let s = scratch();
    run(&mut systemd_pull(
        var("RIG_IMG_SMALL"),
        &oci(&s.path().join("l")),
    ))
    .json();
    assert!(
        !systemctl(&["is-active", unit]).starts_with("active"),
        "the leftover was stopped"
    );
}

/// A worker binary the unit cannot see fails to start, and hostpull says that,
/// with exit code 8. The unit's root holds the program's own directory, but
/// not the other one its symlink points into: the worker agent, the unit's
/// program, starts, and cannot start it.
#[test]
fn worker_that_cannot_start_is_a_sandbox_failure() {
    let s = scratch();
    let hidden = s.path().join("skopeo");
    std::fs::copy("/usr/bin/skopeo", &hidden).unwrap();
    let shown = scratch();
    let link = shown.path().join("skopeo");
    std::os::unix::fs::symlink(&hidden, &link).unwrap();
    let mut c = systemd_pull(var("RIG_IMG_SMALL"), &oci(&s.path().join("l")));
    c.env("HOSTPULL_SKOPEO", &link);
    let r = run(&mut c);
    r.assert_failure(8);
    assert!(
        r.stderr.contains(&format!(
            "starting {}: No such file or directory",
            link.display()
        )),
        "{}",
        r.stderr
    );
}

/// The rig's registry again, listening on `[::1]` (its storage, users and
/// certificate, which names `RIG_CLUSTER_NAME`); killed when dropped.
fn registry_on_ipv6_loopback(dir: &Path) -> (u16, KillOnDrop) {
    let port = std::net::TcpListener::bind("[::1]:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let rig = Path::new(var("RIG_DIR")).join("registry/config.yml");
    let config: String = std::fs::read_to_string(rig)
        .unwrap()
        .lines()
        .map(|l| match l.trim_start().starts_with("addr:") {
            true => format!("  addr: \"[::1]:{port}\"\n"),
            false => format!("{l}\n"),
        })
        .collect();
    let path = dir.join("registry-v6.yml");
    std::fs::write(&path, config).unwrap();
    // Its log holds the access log (stdout) and its warnings (stderr).
    let log = std::fs::File::create(dir.join("registry-v6.log")).unwrap();
    // A clean environment: distribution reads every REGISTRY_* variable.
    let child = Command::new("/usr/bin/docker-registry")
        .arg("serve")
        .arg(&path)
        .env_clear()
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let registry = KillOnDrop(child);
    wait_for("the registry on [::1]", Duration::from_secs(20), || {
        std::net::TcpStream::connect(("::1", port)).is_ok()
    });
    (port, registry)
}

/// A registry at an IPv6 address (a docker-registry on `[::1]`): `plan`
/// and `pull` refuse the literal, which no skopeo parses (skopeo#631), and
/// say how to reach it; named with `--add-host NAME:::1`, it serves the pull
/// through the worker's unit (`RestrictAddressFamilies=` has AF_INET6, and
/// `IPAddressDeny=` spares `::1`).
#[test]
fn ipv6_registry_by_name() {
    let s = scratch();
    let (port, _registry) = registry_on_ipv6_loopback(s.path());
    let literal = format!("docker://[::1]:{port}/hostpull/small:v1");
    let plan = run(hostpull(&["plan", &literal, "--config-root"]).arg(config_root(s.path())));
    plan.assert_failure(2);
    assert!(
        plan.stderr.contains("IPv6") && plan.stderr.contains("--add-host NAME:IP"),
        "{}",
        plan.stderr
    );
    let mut c = systemd_pull(&literal, &oci(&s.path().join("literal")));
    c.arg("--config-root").arg(config_root(s.path()));
    run(&mut c).assert_failure(2);
    assert!(!s.path().join("literal").exists());

    let name = var("RIG_CLUSTER_NAME");
    let host = format!("{name}:{port}");
    let mut c = pull_cmd(
        &format!("{host}/hostpull/small:v1"),
        &oci(&s.path().join("named")),
    );
    c.args(["--sandbox", "systemd", "--add-host", &format!("{name}:::1")])
        .args(["--ca", &format!("{host}={}", var("RIG_CA")), "--authfile"])
        .arg(authfile_for(&host, s.path()))
        .arg("--config-root")
        .arg(config_root(s.path()));
    let r = run(&mut c).json();
    assert_eq!(r["layers_fetched"], r["layers_total"], "{r}");
    assert_eq!(r["credentials"][0]["host"], host.as_str(), "{r}");
    assert_eq!(r["worker"]["sandbox"], "systemd", "{r}");
    // It was this registry, on [::1], that served it.
    let log = std::fs::read_to_string(s.path().join("registry-v6.log")).unwrap();
    assert!(log.contains("GET /v2/hostpull/small/manifests/v1"), "{log}");
}

/// An in-cluster registry: a name only cluster DNS knows, a certificate from
/// the cluster's CA. `--add-host` (or `--dns`) and `--ca` reach it from the
/// worker alone; the host's /etc/hosts and /etc/resolv.conf never change.
#[test]
fn in_cluster_registry_by_name() {
    let s = scratch();
    let name = var("RIG_CLUSTER_NAME");
    let host = format!("{name}:{}", var("RIG_PORT"));
    let image = format!("{host}/hostpull/small:v1");
    let auth = authfile_for(&host, s.path());
    let host_files = || {
        (
            std::fs::read("/etc/hosts").unwrap(),
            std::fs::read("/etc/resolv.conf").unwrap(),
        )
    };
    let before = host_files();
    let pull = |dest: &str, extra: &[&str]| {
        let mut c = pull_cmd(&image, &oci(&s.path().join(dest)));
        c.args(["--sandbox", "systemd", "--timeout", "8", "--config-root"])
            .arg(config_root(s.path()))
            .arg("--authfile")
            .arg(&auth)
            .args(extra);
        run(&mut c)
    };
    let add_host = format!("{name}:127.0.0.1");
    let ca = format!("{host}={}", var("RIG_CA"));
    pull("ok", &["--add-host", &add_host, "--ca", &ca]).json();
    // No CA for it: TLS refuses (the rig's CA is in no system store).
    pull("no-ca", &["--add-host", &add_host]).assert_failure(5);
    // The CA given for another host does not count for this one.
    let other = format!("127.0.0.1:{}={}", var("RIG_PORT"), var("RIG_CA"));
    pull("other-ca", &["--add-host", &add_host, "--ca", &other]).assert_failure(5);
    // Without the name, a resolution error, and after the deadline it is still named.
    let r = pull("no-name", &["--ca", &ca]);
    r.assert_failure(6);
    assert!(r.stderr.contains("no such host"), "{}", r.stderr);
    // The CA from certs.d below the root, as MCO writes /etc/docker/certs.d, and
    // the name from the configuration's [cluster] section.
    let root = cluster_root(s.path(), &host, &add_host);
    let mut c = pull_cmd(&image, &oci(&s.path().join("certs-d")));
    c.args(["--sandbox", "systemd", "--config-root"])
        .arg(config_root(&root))
        .arg("--authfile")
        .arg(&auth);
    run(&mut c).json();
    assert_eq!(
        host_files(),
        before,
        "the host's resolver files are untouched"
    );

    // A kubelet wildcard key (`*` globs one label) from a pull secret.
    let secret = s.path().join("wildcard-secret.json");
    let rig_auth = std::fs::read_to_string(var("RIG_AUTHFILE")).unwrap();
    let wildcard = format!("*.openshift-image-registry.svc:{}", var("RIG_PORT"));
    write_private(
        &secret,
        rig_auth.replace(var("RIG_REGISTRY"), &wildcard).as_bytes(),
    );
    let mut c = pull_cmd(&image, &oci(&s.path().join("wildcard-ok")));
    c.args([
        "--sandbox",
        "systemd",
        "--add-host",
        &add_host,
        "--ca",
        &ca,
        "--pull-secret",
    ])
    .arg(&secret)
    .arg("--config-root")
    .arg(config_root(s.path()));
    assert_eq!(run(&mut c).json()["credentials"][0]["key"], wildcard);

    // Through a real DNS server on a loopback address.
    let dnsmasq = Command::new("dnsmasq")
        .args([
            "--no-daemon",
            "--port=53",
            "--listen-address=127.0.0.77",
            "--bind-interfaces",
        ])
        .args([
            "--no-resolv",
            "--no-hosts",
            &format!("--address=/{name}/127.0.0.1"),
        ])
        .stderr(Stdio::null())
        .spawn()
        .expect("dnsmasq (tests/rig.sh install brings dnsmasq-base)");
    let _dnsmasq = KillOnDrop(dnsmasq);
    // Listening: 127.0.0.77:53 in /proc/net/udp (little-endian hex).
    wait_for("dnsmasq", Duration::from_secs(10), || {
        std::fs::read_to_string("/proc/net/udp").is_ok_and(|t| t.contains("4D00007F:0035"))
    });
    pull("dns", &["--dns", "127.0.0.77", "--ca", &ca]).json();
    assert_eq!(host_files(), before);
}

/// The installed layout of [`make_install`]: a scratch PREFIX whose units are
/// linked into the running systemd. Dropping it stops and unlinks them, and
/// removes the profile from /run.
struct Installed {
    prefix: std::path::PathBuf,
}

/// The units of `make install`, and the profile the test gives the service.
const INSTALLED_UNITS: [&str; 3] = [
    "hostpull.slice",
    "hostpull-pull@.service",
    "hostpull-pull@.timer",
];
const DEMO_PROFILE: &str = "/run/hostpull/pulls.d/demo.toml";

/// `make install` into `dir/usr` (PREFIX, and the /etc and vendor directories
/// there too), as an admin building from source would, and its units linked
/// into systemd's runtime unit directory (`systemctl link --runtime`:
/// /run/systemd/system). Nothing reaches /usr or /etc, whether PID 1 is
/// tests/sysd.sh's systemd in its overlay or the machine's own (tests/run.sh
/// runs the suite directly there).
fn make_install(dir: &Path) -> Installed {
    let prefix = dir.join("usr");
    let st = Command::new("make")
        .args(["-s", "-C", env!("CARGO_MANIFEST_DIR"), "install"])
        .arg(format!("PREFIX={}", prefix.display()))
        .arg(format!("SYSCONFDIR={}", dir.join("etc").display()))
        .arg(format!(
            "VENDORDIR={}",
            prefix.join("lib/hostpull").display()
        ))
        .arg(concat!("BIN=", env!("CARGO_BIN_EXE_hostpull")))
        .arg(format!("OUT={}", dir.join("out").display()))
        .status()
        .expect("make (tests/rig.sh install brings it)");
    assert!(st.success(), "make install failed");
    let installed = Installed { prefix };
    let units = INSTALLED_UNITS.map(|u| installed.unitdir().join(u));
    let linked = Command::new("systemctl")
        .args(["link", "--runtime"])
        .args(&units)
        .status()
        .unwrap();
    assert!(linked.success(), "systemctl link --runtime {units:?}");
    installed
}

impl Installed {
    fn unitdir(&self) -> std::path::PathBuf {
        self.prefix.join("lib/systemd/system")
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("systemctl")
            .args(["disable", "--runtime", "--now", "hostpull-pull@demo.timer"])
            .status();
        let _ = Command::new("systemctl")
            .args(["stop", "hostpull-pull@demo.service"])
            .status();
        for u in INSTALLED_UNITS {
            let _ = std::fs::remove_file(Path::new("/run/systemd/system").join(u));
        }
        let _ = Command::new("systemctl").arg("daemon-reload").status();
        let _ = std::fs::remove_file(DEMO_PROFILE);
    }
}

fn show(unit: &str, property: &str) -> String {
    systemctl(&["show", "--value", "-p", property, unit])
        .trim()
        .to_owned()
}

/// The installed units: `systemd-analyze verify` accepts them (their man:
/// page included), and `systemctl start hostpull-pull@demo.service` pulls
/// what /run/hostpull/pulls.d/demo.toml names through a sandboxed worker
/// unit; the timer loads and has a next elapse; `man hostpull` renders.
/// The unit, as installed, runs the host's skopeo whatever HOSTPULL_SKOPEO says.
#[test]
fn the_installed_pull_service_pulls_its_profile() {
    let s = scratch();
    let installed = make_install(s.path());
    let unitdir = installed.unitdir();
    let manpath = installed.prefix.join("share/man");
    let verify = Command::new("systemd-analyze")
        .env("MANPATH", &manpath)
        .args([
            "verify",
            "hostpull.slice",
            "hostpull-pull@demo.service",
            "hostpull-pull@demo.timer",
        ])
        .output()
        .unwrap();
    let complaints = String::from_utf8_lossy(&verify.stderr);
    assert!(
        verify.status.success() && !complaints.contains("hostpull"),
        "{complaints}"
    );
    // The profile in /run (hostpull reads /usr/lib, /etc and /run), with
    // allow-metered: a_timer_pull_defers_on_a_metered_link may be running a
    // metered NetworkManager stand-in meanwhile. Its
    // secrets root-only in the scratch directory, and a fresh destination
    // there: a layout that has the image already needs no proxy unit.
    let auth = s.path().join("demo-auth.json");
    std::fs::copy(var("RIG_AUTHFILE"), &auth).unwrap();
    let certs = s.path().join("demo-certs");
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::copy(var("RIG_CA"), certs.join("ca.crt")).unwrap();
    let layout = oci_tag(&s.path().join("images/demo"), "v1");
    std::fs::create_dir_all(Path::new(DEMO_PROFILE).parent().unwrap()).unwrap();
    std::fs::write(
        DEMO_PROFILE,
        format!(
            "image = \"docker://{}\"\ndest = \"{layout}\"\nauthfile = [\"{}\"]\ncert-dir = \"{}\"\nallow-metered = true\n",
            var("RIG_IMG_SMALL"),
            auth.display(),
            certs.display()
        ),
    )
    .unwrap();
    assert!(
        Command::new("systemctl")
            .arg("daemon-reload")
            .status()
            .unwrap()
            .success()
    );
    let since = format!(
        "@{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    );
    let st = Command::new("systemctl")
        .args(["start", "hostpull-pull@demo.service"])
        .status()
        .unwrap();
    let log = Command::new("journalctl")
        .args(["-u", "hostpull-pull@demo.service", "--since", &since])
        .args(["-o", "cat", "--no-pager"])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(st.success(), "{log}");
    assert!(
        log.contains("Pulled ") && log.contains(&format!("into {layout}")),
        "{log}"
    );
    let inspected: serde_json::Value =
        serde_json::from_str(&skopeo(&["inspect", &layout])).unwrap();
    assert_eq!(inspected["Digest"], registry_digest(var("RIG_IMG_SMALL")));
    // The result is also a journal entry with fields, from this run (the
    // journal may hold earlier ones).
    let entries = Command::new("journalctl")
        .args(["-u", "hostpull-pull@demo.service", "--since", &since])
        .args(["-o", "json", "--no-pager"])
        .output()
        .unwrap();
    let entry = String::from_utf8_lossy(&entries.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e.get("MANIFEST_DIGEST").is_some())
        .expect("an entry with MANIFEST_DIGEST");
    assert_eq!(entry["MANIFEST_DIGEST"], inspected["Digest"]);
    assert_eq!(entry["TAG"], "v1");
    // The host's policy (containers-common's) accepts anything.
    assert_eq!(entry["SIGNATURE_REQUIREMENT"], "insecureAcceptAnything");
    // The worker, as `--json` names it: the host's skopeo, which the unit runs.
    assert_eq!(entry["WORKER_SKOPEO"], skopeo_version("/usr/bin/skopeo"));
    assert_eq!(entry["WORKER_PROTOCOL"], protocol_of("/usr/bin/skopeo"));
    // A pre-fetch waits out metered links (issue 24), and a deferred one
    // (exit 12) is not a failed unit.
    let exec = show("hostpull-pull@demo.service", "ExecStart");
    assert!(
        exec.contains("pull --profile demo --defer-if-metered"),
        "{exec}"
    );
    assert_eq!(
        show("hostpull-pull@demo.service", "SuccessExitStatus"),
        "12"
    );
    // The node's proxy settings, as OpenShift writes them, then hostpull's
    // own; neither needs to exist (this host has neither, and it pulled).
    let files = show("hostpull-pull@demo.service", "EnvironmentFiles");
    assert_eq!(
        files.lines().collect::<Vec<_>>(),
        [
            "/etc/mco/proxy.env (ignore_errors=yes)",
            "/etc/hostpull/proxy.env (ignore_errors=yes)"
        ],
        "{files}"
    );
    // It was the installed unit, linked from the scratch PREFIX.
    for (unit, file) in [
        ("hostpull-pull@demo.service", "hostpull-pull@.service"),
        ("hostpull.slice", "hostpull.slice"),
    ] {
        let loaded = std::fs::canonicalize(show(unit, "FragmentPath")).unwrap();
        assert_eq!(loaded, std::fs::canonicalize(unitdir.join(file)).unwrap());
    }
    // The orchestrator (whose PID logged the result) ran skopeo's proxy as a
    // transient unit, hostpull-worker-PID-*.service.
    let worker = format!("hostpull-worker-{}-*", entry["_PID"].as_str().unwrap());
    let workers = Command::new("journalctl")
        .args(["-u", &worker, "--since", &since])
        .args(["-o", "cat", "--no-pager"])
        .output()
        .unwrap();
    let workers = String::from_utf8_lossy(&workers.stdout);
    assert!(
        workers.contains("Started hostpull-worker-")
            && workers.contains("experimental-image-proxy"),
        "{worker}: {workers}"
    );
    // The same service into containers-storage (issue 47): root's skopeo
    // copies the verified image into an overlay store under its sandbox.
    let store = format!(
        "[overlay@{}+{}]",
        s.path().join("graph").display(),
        s.path().join("run").display()
    );
    let stored = format!("containers-storage:{store}localhost/demo:stable");
    std::fs::write(
        DEMO_PROFILE,
        format!(
            "image = \"docker://{}\"\ndest = \"{stored}\"\nauthfile = [\"{}\"]\ncert-dir = \"{}\"\nallow-metered = true\n",
            var("RIG_IMG_SMALL"),
            auth.display(),
            certs.display()
        ),
    )
    .unwrap();
    let st = Command::new("systemctl")
        .args(["start", "hostpull-pull@demo.service"])
        .status()
        .unwrap();
    let log = Command::new("journalctl")
        .args(["-u", "hostpull-pull@demo.service", "-n", "20"])
        .args(["-o", "cat", "--no-pager"])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(st.success(), "{log}");
    let inspected: serde_json::Value = serde_json::from_str(&skopeo(&[
        "inspect",
        &format!("containers-storage:{store}localhost/demo:stable"),
    ]))
    .unwrap();
    assert_eq!(inspected["Digest"], registry_digest(var("RIG_IMG_SMALL")));
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    for m in mounts.lines().filter_map(|l| l.split(' ').nth(1)) {
        if m.starts_with(&*s.path().to_string_lossy()) {
            let _ = Command::new("umount").arg(m).status();
        }
    }
    // The timer an admin enables: it loads, and systemd shows its next elapse.
    assert!(
        Command::new("systemctl")
            .args(["enable", "--runtime", "--now", "hostpull-pull@demo.timer"])
            .status()
            .unwrap()
            .success()
    );
    let timers = systemctl(&[
        "list-timers",
        "--all",
        "--no-legend",
        "hostpull-pull@demo.timer",
    ]);
    let _ = Command::new("systemctl")
        .args(["disable", "--runtime", "--now", "hostpull-pull@demo.timer"])
        .status();
    assert_eq!(show("hostpull-pull@demo.timer", "LoadState"), "loaded");
    assert!(
        timers.contains("hostpull-pull@demo.timer") && timers.contains(" left "),
        "no next elapse in: {timers}"
    );
    // The man page (man with the PREFIX's share/man as MANPATH) and the bash
    // completion under PREFIX.
    let man = Command::new("man")
        .args(["-P", "cat", "hostpull"])
        .env("MANWIDTH", "80")
        .env("MANPATH", &manpath)
        .output()
        .expect("man (tests/rig.sh install brings man-db)");
    let page = String::from_utf8_lossy(&man.stdout);
    assert!(
        man.status.success() && page.contains("hostpull - Pull container images"),
        "{page}{}",
        String::from_utf8_lossy(&man.stderr)
    );
    let complete = Command::new("bash")
        .args([
            "-c",
            &format!(
                ". {}/share/bash-completion/completions/hostpull && complete -p hostpull",
                installed.prefix.display()
            ),
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&complete.stdout).starts_with("complete "),
        "{complete:?}"
    );
}

/// The machine-config daemon's call (docs/mcd.md): the in-cluster registry by
/// name, its CA from /etc/docker/certs.d, a service-account token, the node's
/// pull secret, a pinned digest, and the hand-off to rpm-ostree (a stand-in).
#[test]
fn mcd_call_sequence() {
    let s = scratch();
    std::fs::set_permissions(
        s.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let name = var("RIG_CLUSTER_NAME");
    let host = format!("{name}:{}", var("RIG_PORT"));
    let digest = registry_digest(var("RIG_IMG_SMALL"));
    let root = cluster_root(s.path(), &host, &format!("{name}:127.0.0.1"));
    // The node's pull secret has nothing for the in-cluster registry; the token does.
    let pull_secret = s.path().join("config.json");
    write_private(&pull_secret, br#"{"auths":{"quay.io":{"auth":"dTpw"}}}"#);
    let token = s.path().join("token");
    write_private(&token, password().as_bytes());
    let log = s.path().join("rpm-ostree.log");
    let layout = s.path().join("images/os");
    let stand_ins = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stand-ins");
    let mut c = hostpull(&[]);
    c.args([
        "rebase",
        &format!("{host}/hostpull/small@{digest}"),
        "--consumer",
        "rpm-ostree",
    ])
    .arg("--dest")
    .arg(oci_tag(&layout, "mc-1"))
    .arg("--pull-secret")
    .arg(&pull_secret)
    .args([
        "--registry-token",
        &format!("{host}={}", token.display()),
        "--registry-token-user",
        var("RIG_USER"),
    ])
    .args(["--sandbox", "systemd", "--json", "--config-root"])
    .arg(config_root(&root))
    .env(
        "PATH",
        format!("{}:{}", stand_ins.display(), std::env::var("PATH").unwrap()),
    )
    .env("STANDIN_LOG", &log);
    let r = run(&mut c).json();
    assert_eq!(r["manifest_digest"], digest);
    assert_eq!(r["credentials"][0]["source"], token.display().to_string());
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        format!(
            "rpm-ostree rebase ostree-unverified-image:oci:{}:mc-1\n",
            layout.display()
        )
    );
}

/// A root as MCO leaves a node: the in-cluster registry's CA in
/// /etc/docker/certs.d/HOST, and its name in hostpull's `[cluster]` section.
fn cluster_root(dir: &Path, host: &str, add_host: &str) -> std::path::PathBuf {
    let root = dir.join("root");
    let certs_d = root.join("etc/docker/certs.d").join(host);
    std::fs::create_dir_all(&certs_d).unwrap();
    std::fs::copy(var("RIG_CA"), certs_d.join("ca.crt")).unwrap();
    std::fs::create_dir_all(root.join("etc/hostpull")).unwrap();
    let config = format!("[cluster]\nadd-host = [\"{add_host}\"]\n");
    std::fs::write(root.join("etc/hostpull/config.toml"), config).unwrap();
    root
}

/// A D-Bus policy that lets root own org.freedesktop.NetworkManager on the
/// system bus (as NetworkManager's own package does), for the stand-in; it
/// goes when dropped. Under tests/sysd.sh, /etc is the overlay's.
struct NmPolicy(std::path::PathBuf);

impl NmPolicy {
    fn install() -> Self {
        let p = Path::new("/etc/dbus-1/system.d/hostpull-test-networkmanager.conf");
        std::fs::write(
            p,
            r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <policy user="root">
    <allow own="org.freedesktop.NetworkManager"/>
    <allow send_destination="org.freedesktop.NetworkManager"/>
  </policy>
</busconfig>
"#,
        )
        .unwrap();
        reload_dbus();
        Self(p.to_owned())
    }
}

impl Drop for NmPolicy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        reload_dbus();
    }
}

fn reload_dbus() {
    let st = Command::new("busctl")
        .args(["call", "org.freedesktop.DBus", "/org/freedesktop/DBus"])
        .args(["org.freedesktop.DBus", "ReloadConfig"])
        .status()
        .unwrap();
    assert!(st.success(), "busctl call ... ReloadConfig");
}

/// tests/stand-ins/networkmanager.py saying `Metered` is `metered`, once it
/// owns its name.
fn network_manager(metered: u32) -> KillOnDrop {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/stand-ins/networkmanager.py"
    );
    let mut child = Command::new("/usr/bin/python3")
        .arg(script)
        .arg(metered.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(
        line.starts_with("ready"),
        "the NetworkManager stand-in did not start: {line:?}"
    );
    KillOnDrop(child)
}

/// Requests for `repo` in the registry's log since `mark`. Tests run in
/// parallel: only a repository of this test's own counts its requests alone.
fn requests_since(repo: &str, mark: u64) -> usize {
    let log = std::fs::read(var("RIG_REGISTRY_LOG")).unwrap();
    let path = format!("/v2/{repo}/");
    String::from_utf8_lossy(&log[mark as usize..])
        .lines()
        .filter(|l| l.contains(&path))
        .count()
}

/// Issue 24 (rpm-ostree#4844, bootc#1375): a pull with --defer-if-metered,
/// as the installed timer's unit runs it, exits 12 (deferred) without a
/// request to the registry while NetworkManager says the connection is
/// metered (1 yes, 3 guess-yes), and pulls for 0, 2 and 4 and when
/// NetworkManager is not on the bus. `--allow-metered` and a profile's
/// `allow-metered` pull anyway; so does a pull without --defer-if-metered
/// (an operator's or MCD's), which does not ask.
#[test]
fn a_timer_pull_defers_on_a_metered_link() {
    let s = scratch();
    let _policy = NmPolicy::install();
    let (image, repo) = crate::once::space::own_copy("metered");
    let pull = |name: &str, extra: &[&str]| {
        let dest = oci(&s.path().join(name));
        let mut c = systemd_pull(&image, &dest);
        c.args(extra);
        let mark = std::fs::metadata(var("RIG_REGISTRY_LOG")).unwrap().len();
        let r = run(&mut c);
        (r, requests_since(&repo, mark))
    };
    let (r, _) = pull("absent", &["--defer-if-metered"]);
    assert_eq!(r.code, 0, "NetworkManager not on the bus: {}", r.stderr);
    for (metered, deferred) in [(0, false), (1, true), (2, false), (3, true), (4, false)] {
        let _nm = network_manager(metered);
        let (r, requests) = pull(&format!("m{metered}"), &["--defer-if-metered"]);
        if !deferred {
            assert_eq!(r.code, 0, "Metered={metered}: {}", r.stderr);
            continue;
        }
        r.assert_failure(12);
        let name = if metered == 1 { "yes" } else { "guess-yes" };
        assert!(
            r.stderr.contains(&format!(
                "error: deferred: NetworkManager says the connection is metered (Metered={metered}, {name})"
            )),
            "{}",
            r.stderr
        );
        assert_eq!(requests, 0, "a deferred pull asked the registry");
        assert!(!s.path().join(format!("m{metered}")).exists());
        if metered == 1 {
            let (r, _) = pull("allowed", &["--defer-if-metered", "--allow-metered"]);
            assert_eq!(r.code, 0, "--allow-metered: {}", r.stderr);
            let (r, _) = pull("manual", &[]);
            assert_eq!(r.code, 0, "no --defer-if-metered: {}", r.stderr);
            let root = config_root(s.path().join("root"));
            let pulls_d = root.join("etc/hostpull/pulls.d");
            std::fs::create_dir_all(&pulls_d).unwrap();
            let profile = format!(
                "image = \"{}\"\ndest = \"{}\"\nallow-metered = true\n",
                var("RIG_IMG_SMALL"),
                oci(&s.path().join("profile"))
            );
            std::fs::write(pulls_d.join("m.toml"), profile).unwrap();
            let mut c = hostpull(&[]);
            c.args(["pull", "--profile", "m", "--defer-if-metered", "--json"])
                .args(["--sandbox", "systemd", "--config-root"])
                .arg(&root);
            let r = run(&mut with_rig_creds(c));
            assert_eq!(r.code, 0, "a profile's allow-metered: {}", r.stderr);
        }
    }
}

/// `NO_PROXY` sends a host direct, as each worker's Go reads it, and
/// `--add-host` still resolves it there: the proxied name, which only the
/// proxy knows, reached without it. Without `NO_PROXY` the same pull goes
/// through the proxy.
#[test]
fn no_proxy_sends_a_host_direct_where_add_host_resolves_it() {
    use crate::worker::proxy::{Squid, proxied_pull};
    let dir = scratch();
    let squid = Squid::start(dir.path());
    let pull = |no_proxy: Option<&str>| {
        let mut c = proxied_pull(dir.path());
        c.env("HTTPS_PROXY", squid.url(&squid.password))
            .args(["--sandbox", "systemd", "--add-host"])
            .arg(format!("{}:127.0.0.1", var("RIG_PROXIED_NAME")));
        if let Some(n) = no_proxy {
            c.env("NO_PROXY", n);
        }
        let r = run(&mut c);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let _ = std::fs::remove_dir_all(dir.path().join("out"));
    };
    pull(Some("example.com, .corp.test:443, corp.test"));
    assert_eq!(squid.tunnels(), 0, "{:?}", squid.log());
    pull(Some("example.com, .corp.test:443"));
    assert!(squid.tunnels() >= 1, "{:?}", squid.log());
}
