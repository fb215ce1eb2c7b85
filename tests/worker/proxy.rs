//! Pulls behind an HTTP(S) proxy, as a node behind OpenShift's cluster-wide
//! proxy makes them: Debian's squid with basic auth, in front of the rig's
//! registry under a name that only squid resolves (`RIG_PROXIED_NAME`, its
//! `hosts_file`), so a pull that does not go through the proxy cannot succeed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{KillOnDrop, hostpull, oci, pull_cmd, run, sandbox, scratch, var};

/// The user squid knows.
pub const PROXY_USER: &str = "proxyuser";

/// Debian's squid in the foreground on 127.0.0.1: basic auth ([`PROXY_USER`]
/// and its password), CONNECT only to the rig's registry port, and a hosts
/// file in which `RIG_PROXIED_NAME` is 127.0.0.1. Killed when dropped.
pub struct Squid {
    _child: KillOnDrop,
    /// Its configuration and logs; the test's scratch.
    pub dir: PathBuf,
    pub port: u16,
    /// Its user's password, unique to this squid.
    pub password: String,
}

impl Squid {
    /// Start squid in `dir` and wait until it listens.
    pub fn start(dir: &Path) -> Self {
        let port = free_port();
        // A password no file of the rig holds, with what a URL must encode.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let password = format!("pw@{:x}:{port}", now.unwrap().as_nanos());
        let dir = dir.join("squid");
        std::fs::create_dir_all(&dir).unwrap();
        let htpasswd = Command::new("htpasswd")
            .args(["-cbm"])
            .arg(dir.join("passwd"))
            .args([PROXY_USER, &password])
            .output()
            .unwrap();
        assert!(htpasswd.status.success(), "{htpasswd:?}");
        std::fs::write(
            dir.join("hosts"),
            format!("127.0.0.1 {}\n", var("RIG_PROXIED_NAME")),
        )
        .unwrap();
        let d = dir.display();
        let conf = format!(
            "http_port 127.0.0.1:{port}\npid_filename {d}/squid.pid\ncache_log {d}/cache.log\n\
             access_log stdio:{d}/access.log\ncache deny all\ncache_dir null /tmp\n\
             hosts_file {d}/hosts\n\
             auth_param basic program /usr/lib/squid/basic_ncsa_auth {d}/passwd\n\
             acl authed proxy_auth REQUIRED\nacl regport port {}\nacl CONNECT method CONNECT\n\
             http_access deny CONNECT !regport\nhttp_access allow authed\nhttp_access deny all\n",
            var("RIG_PORT")
        );
        std::fs::write(dir.join("squid.conf"), conf).unwrap();
        // squid drops to its user `proxy`, which writes the logs here.
        let chown = Command::new("chown")
            .args(["-R", "proxy:proxy"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(chown.success());
        let mut parent = dir.parent();
        while let Some(p) = parent.filter(|p| p.starts_with(var("RIG_DIR"))) {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(p).unwrap().permissions().mode();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode | 0o011)).unwrap();
            parent = p.parent();
        }
        let child = Command::new("squid")
            .args(["-N", "-f"])
            .arg(dir.join("squid.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting squid (tests/rig.sh install installs it)");
        let child = KillOnDrop(child);
        let until = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "squid did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            _child: child,
            dir,
            port,
            password,
        }
    }

    /// `http://USER:PASSWORD@127.0.0.1:PORT`, the password percent-encoded
    /// as in /etc/mco/proxy.env.
    pub fn url(&self, password: &str) -> String {
        let enc: String = password
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        format!("http://{PROXY_USER}:{enc}@127.0.0.1:{}", self.port)
    }

    /// What the access log says so far, a line a request.
    pub fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("access.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The tunnels it opened to the proxied registry for its user.
    pub fn tunnels(&self) -> usize {
        let to = format!(
            "CONNECT {}:{} {PROXY_USER}",
            var("RIG_PROXIED_NAME"),
            var("RIG_PORT")
        );
        self.log()
            .iter()
            .filter(|l| l.contains("TCP_TUNNEL/200") && l.contains(&to))
            .count()
    }
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The rig's `small:v1` under the name only the proxy resolves.
pub fn proxied_image() -> String {
    format!(
        "docker://{}:{}/hostpull/small:v1",
        var("RIG_PROXIED_NAME"),
        var("RIG_PORT")
    )
}

/// An authfile in `dir` with the rig's user and `password` for the proxied name.
pub fn proxied_authfile(dir: &Path, password: &str) -> PathBuf {
    use base64::Engine as _;
    let auth =
        base64::engine::general_purpose::STANDARD.encode(format!("{}:{password}", var("RIG_USER")));
    let file = dir.join("proxied-auth.json");
    let host = format!("{}:{}", var("RIG_PROXIED_NAME"), var("RIG_PORT"));
    std::fs::write(
        &file,
        serde_json::json!({"auths": {host: {"auth": auth}}}).to_string(),
    )
    .unwrap();
    file
}

/// `hostpull pull` of [`proxied_image`] into `dir/out` with the rig's CA, the
/// credential for the proxied name, no proxy from the test's environment.
pub fn proxied_pull(dir: &Path) -> Command {
    let dest = oci(&dir.join("out"));
    let mut c = pull_cmd(&proxied_image(), &dest);
    c.arg("--authfile")
        .arg(proxied_authfile(dir, &crate::util::password()))
        .args(["--cert-dir", var("RIG_CERT_DIR"), "--no-default-creds"]);
    for v in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    ] {
        c.env_remove(v);
    }
    c
}

/// Every process whose command line or environment holds `secret`, but
/// hostpull's own environment (`orchestrator`: the test gave it): (pid,
/// `cmdline` or `environ`, its command line).
fn holders(secret: &str, orchestrator: u32) -> Vec<(u32, &'static str, String)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let read = |f: &str| std::fs::read(format!("/proc/{pid}/{f}")).unwrap_or_default();
        let has = |bytes: &[u8]| bytes.windows(secret.len()).any(|w| w == secret.as_bytes());
        // The environment first: a process caught in execve(2) (the agent's
        // child becoming skopeo) then shows the command line of the program whose
        // environment was read, or a later one.
        let environ = has(&read("environ")) && pid != orchestrator;
        let cmdline = read("cmdline");
        let line = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if has(&cmdline) {
            found.push((pid, "cmdline", line.clone()));
        }
        if environ {
            found.push((pid, "environ", line));
        }
    }
    found
}

/// The units of this pull's workers, as any local user may list them, and
/// each one's properties as `nobody` reads them.
fn unit_properties_as_nobody() -> Vec<String> {
    let list = Command::new("systemctl")
        .args([
            "list-units",
            "--plain",
            "--no-legend",
            "--all",
            "hostpull-worker-*",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .map(|unit| {
            let out = Command::new("setpriv")
                .args([
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "systemctl",
                    "show",
                ])
                .arg(&unit)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
        .collect()
}

/// A pull through the proxy succeeds, by the proxy's own log, with each
/// worker; the proxy's password reaches the worker's skopeo and nothing
/// else: no argv, no other environment, no unit property (as any local user
/// reads them), no journal entry, no file left, no output.
#[test]
fn a_pull_goes_through_the_proxy_and_its_password_nowhere_else() {
    let dir = scratch();
    let squid = Squid::start(dir.path());
    let secret = &squid.password;
    let encoded = squid.url(secret);
    let encoded = encoded.split([':', '@']).nth(2).unwrap().to_owned();
    // Slow enough (a blob's 256 KiB of the cap each) to look at it running.
    let mut c = proxied_pull(dir.path());
    c.env("HTTPS_PROXY", squid.url(secret))
        .args(["--max-rate", "512K"]);
    let mut child = crate::util::spawn_piped(&mut c);
    let (mut skopeo_had_it, mut units_seen) = (false, 0);
    while child.try_wait().unwrap().is_none() {
        for (pid, what, line) in holders(&encoded, child.id()) {
            // skopeo, or the dynamic loader of the rig's newer skopeos
            // (tests/skopeo-versions.sh), never the agent that starts it.
            let skopeo = line.contains("skopeo") && !line.contains("__worker-agent");
            assert!(
                what == "environ" && skopeo,
                "the proxy's password in the {what} of {pid}: {line}"
            );
            skopeo_had_it = true;
        }
        if sandbox() == "systemd" {
            for props in unit_properties_as_nobody() {
                assert!(
                    !props.contains(&encoded),
                    "in a unit's properties:\n{props}"
                );
                units_seen += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        skopeo_had_it,
        "no worker's skopeo was seen with the proxy in its environment"
    );
    assert!(
        sandbox() != "systemd" || units_seen > 0,
        "no worker unit was seen"
    );
    assert!(squid.tunnels() >= 1, "{:?}", squid.log());
    for text in [&stdout, &stderr] {
        assert!(
            !text.contains(&encoded) && !text.contains(secret.as_str()),
            "{text}"
        );
    }
    if sandbox() == "systemd" {
        let journal = Command::new("journalctl")
            .args(["--no-pager", "-o", "verbose"])
            .output()
            .unwrap();
        let journal = String::from_utf8_lossy(&journal.stdout);
        assert!(
            !journal.is_empty() && !journal.contains(&encoded),
            "in the journal"
        );
    }
    for root in [
        dir.path(),
        Path::new("/run/hostpull"),
        Path::new("/run/credentials"),
    ] {
        let left = files_holding(root, &encoded);
        assert!(
            left.is_empty(),
            "files left that hold the proxy's password: {left:?}"
        );
    }
}

/// The files under `root` (not following links) whose bytes hold `secret`.
fn files_holding(root: &Path, secret: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return found;
    };
    for e in entries.flatten() {
        let (path, Ok(t)) = (e.path(), e.file_type()) else {
            continue;
        };
        if t.is_dir() {
            found.extend(files_holding(&path, secret));
        } else if t.is_file()
            && std::fs::read(&path)
                .unwrap_or_default()
                .windows(secret.len())
                .any(|w| w == secret.as_bytes())
        {
            found.push(path);
        }
    }
    found
}

/// The proxy set in hostpull.d's `[cluster]` instead of the environment; and
/// `hostpull plan` shows, per host, which proxy (never its password) or why
/// it goes direct.
#[test]
fn the_proxy_from_the_config_and_in_the_plan() {
    let dir = scratch();
    let squid = Squid::start(dir.path());
    let root = crate::util::config_root(dir.path().join("root"));
    std::fs::create_dir_all(root.join("etc/hostpull")).unwrap();
    std::fs::write(
        root.join("etc/hostpull/config.toml"),
        format!(
            "[cluster]\nhttps-proxy = \"{}\"\n",
            squid.url(&squid.password)
        ),
    )
    .unwrap();
    let mut c = proxied_pull(dir.path());
    c.arg("--config-root").arg(&root);
    let r = run(&mut c);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(squid.tunnels() >= 1, "{:?}", squid.log());
    let shown = format!("http://{PROXY_USER}:***@127.0.0.1:{}", squid.port);
    let plan = |env: &[(&str, &str)], config: bool| {
        let mut c = hostpull(&["plan", &proxied_image(), "--sandbox", "none", "--json"]);
        if config {
            c.arg("--config-root").arg(&root);
        }
        for v in ["HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"] {
            c.env_remove(v);
        }
        c.envs(env.iter().copied());
        let r = run(&mut c);
        assert!(!r.stdout.contains(&squid.password), "{}", r.stdout);
        r.json()["hosts"][0].clone()
    };
    let h = plan(&[], true);
    assert_eq!(
        (h["proxy"].as_str(), &h["direct_because"]),
        (Some(&*shown), &serde_json::Value::Null)
    );
    // The environment as OpenShift's proxy.env gives it, lower case too.
    let url = squid.url(&squid.password);
    assert_eq!(
        plan(&[("https_proxy", &url)], false)["proxy"].as_str(),
        Some(&*shown)
    );
    let h = plan(&[("HTTPS_PROXY", &url), ("NO_PROXY", "corp.test")], false);
    assert_eq!(
        (&h["proxy"], h["direct_because"].as_str()),
        (&serde_json::Value::Null, Some("NO_PROXY"))
    );
    // The files' keys win over the environment, whole.
    assert_eq!(
        plan(&[("NO_PROXY", "corp.test")], true)["proxy"].as_str(),
        Some(&*shown)
    );
    // A proxy that is not a URL is refused before the network, unquoted.
    let mut c = hostpull(&["plan", &proxied_image(), "--sandbox", "none"]);
    c.env("HTTPS_PROXY", "ftp://u:hush@proxy");
    let r = run(&mut c);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.starts_with("error: invalid proxy HTTPS_PROXY: "),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("hush"), "{}", r.stderr);
}

/// A proxy that refuses its credentials (407) is exit 3 naming the proxy
/// (`user:***`), not the registry, after one try: no other registry
/// credential is tried for it. A dead proxy is a network error (exit 6)
/// naming the proxy.
#[test]
fn a_proxy_that_refuses_or_is_dead_is_named() {
    let dir = scratch();
    let squid = Squid::start(dir.path());
    // Two registry credentials for the host: a 407 is the proxy's answer
    // whichever is sent, so the second is not tried.
    let second = dir.path().join("second");
    std::fs::create_dir(&second).unwrap();
    let mut c = proxied_pull(dir.path());
    c.env("HTTPS_PROXY", squid.url("not-the-password"))
        .arg("--authfile")
        .arg(proxied_authfile(&second, "another"));
    let r = run(&mut c);
    r.assert_failure(3);
    assert!(!r.stderr.contains("trying the next"), "{}", r.stderr);
    let first = r.stderr.lines().find(|l| l.starts_with("error: ")).unwrap();
    let shown = format!(
        "proxy http://{PROXY_USER}:***@127.0.0.1:{}, from HTTPS_PROXY",
        squid.port
    );
    assert!(
        first.contains("the proxy refused its credentials (HTTP 407)"),
        "{first}"
    );
    assert!(first.contains(&shown), "{first}");
    assert!(!r.stderr.contains("not-the-password"), "{}", r.stderr);
    // (Its readiness probe is a line without a request.)
    let log: Vec<String> = squid
        .log()
        .into_iter()
        .filter(|l| l.contains(" CONNECT "))
        .collect();
    assert!(
        !log.is_empty() && log.iter().all(|l| l.contains("TCP_DENIED/407")),
        "{log:?}"
    );
    let dead = free_port();
    let mut c = proxied_pull(dir.path());
    c.env("HTTPS_PROXY", format!("http://127.0.0.1:{dead}"))
        .args(["--timeout", "4"]);
    let r = run(&mut c);
    r.assert_failure(6);
    assert!(
        r.stderr
            .contains("the proxy could not be reached while inspecting")
            && r.stderr
                .contains(&format!("127.0.0.1:{dead}: connect: connection refused")),
        "{}",
        r.stderr
    );
}
