//! The harness: the rig's coordinates, a fresh directory per test, and a
//! command builder for the hostpull binary.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

/// What `tests/rig.sh up` wrote to `$RIG_DIR/env`.
pub fn rig() -> &'static HashMap<String, String> {
    static RIG: OnceLock<HashMap<String, String>> = OnceLock::new();
    RIG.get_or_init(|| {
        let dir = std::env::var("RIG_DIR").unwrap_or_else(|_| "/tmp/hostpull-rig".into());
        let env = Path::new(&dir).join("env");
        let text = std::fs::read_to_string(&env).unwrap_or_else(|e| {
            panic!(
                "the test rig is not up ({}: {e}); run tests/run.sh, or tests/rig.sh up",
                env.display()
            )
        });
        text.lines().map(env_line).collect()
    })
}

/// One line of the rig's env: `KEY='VALUE'`, each `'` of VALUE written `'\''`,
/// as tests/rig.sh's `env_line` writes it and bash's `.` reads it. Anything
/// else is a broken rig, not a value to guess at.
pub fn env_line(line: &str) -> (String, String) {
    let broken = || -> ! { panic!("not a KEY='VALUE' line in the rig's env: {line:?}") };
    let Some((key, quoted)) = line.split_once('=') else {
        broken()
    };
    let Some(inner) = (quoted.strip_prefix('\'')).and_then(|q| q.strip_suffix('\'')) else {
        broken()
    };
    let parts: Vec<&str> = inner.split("'\\''").collect();
    if key.is_empty() || parts.iter().any(|p| p.contains('\'')) {
        broken();
    }
    (key.to_owned(), parts.join("'"))
}

pub fn var(key: &str) -> &'static str {
    rig()
        .get(key)
        .unwrap_or_else(|| panic!("{key} missing from the rig's env"))
}

pub fn password() -> String {
    std::fs::read_to_string(var("RIG_PASSWORD_FILE"))
        .unwrap()
        .trim()
        .to_owned()
}

/// The sandbox the suite runs in: `HOSTPULL_TEST_SANDBOX`, default `none`.
pub fn sandbox() -> String {
    std::env::var("HOSTPULL_TEST_SANDBOX").unwrap_or_else(|_| "none".into())
}

/// The worker the suite runs against: `HOSTPULL_SKOPEO` (tests/run.sh runs
/// the systemd pass once per skopeo the rig installed), or the host's skopeo.
pub fn worker_skopeo() -> String {
    std::env::var("HOSTPULL_SKOPEO").unwrap_or_else(|_| "/usr/bin/skopeo".into())
}

/// The worker's proxy protocol (`Initialize`'s answer), e.g. `0.2.8`.
pub fn worker_protocol() -> &'static str {
    static PROTOCOL: OnceLock<String> = OnceLock::new();
    PROTOCOL.get_or_init(|| protocol_of(&worker_skopeo()))
}

/// The proxy protocol `skopeo` answers to `Initialize`.
pub fn protocol_of(skopeo: &str) -> String {
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/proxy-protocol.py"
    ))
    .arg(skopeo)
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `skopeo --version` of `skopeo`, e.g. `1.22.0`.
pub fn skopeo_version(skopeo: &str) -> String {
    let out = Command::new(skopeo).arg("--version").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.split_whitespace()
        .skip_while(|w| *w != "version")
        .nth(1)
        .unwrap_or_else(|| panic!("{skopeo} --version: {text}"))
        .to_owned()
}

/// Whether the worker is Debian 12's skopeo 1.9.3 (protocol 0.2.3), whose HTTP
/// stack neither resumes a blob nor forwards credentials to another port.
pub fn worker_is_1_9() -> bool {
    worker_protocol() == "0.2.3"
}

/// A scratch directory removed at the end of the test. It lives under the rig's
/// directory, which the systemd rig shares with its units.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("t-")
        .tempdir_in(var("RIG_DIR"))
        .unwrap()
}

/// `hostpull ARGS`: every test runs hostpull through this.
pub fn hostpull(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hostpull"));
    c.args(args);
    c
}

/// `hostpull pull IMAGE --dest oci:DEST` with the rig's CA and credentials, the
/// suite's sandbox, and `--json`. Extra arguments come last and may override.
pub fn pull_cmd(image: &str, dest: &str) -> Command {
    let mut c = hostpull(&["pull", image, "--dest", dest, "--json"]);
    c.args(["--sandbox", &sandbox()]).env("RUST_LOG", "warn");
    c
}

/// A [`config_root`] in `dir` whose profile `os` (pulls.d/os.toml) pulls
/// `image` into `dest` with the rig's credential and CA.
pub fn profile_root(dir: impl AsRef<Path>, image: &str, dest: &str) -> PathBuf {
    let root = config_root(dir);
    std::fs::create_dir_all(root.join("etc/hostpull/pulls.d")).unwrap();
    let profile = format!(
        "image = \"{image}\"\ndest = \"{dest}\"\nauthfile = [\"{}\"]\ncert-dir = \"{}\"\n",
        var("RIG_AUTHFILE"),
        var("RIG_CERT_DIR")
    );
    std::fs::write(root.join("etc/hostpull/pulls.d/os.toml"), profile).unwrap();
    root
}

/// A root for `--config-root` with the signature policy every host with skopeo
/// has (containers-common's accept-anything `policy.json`).
pub fn config_root(root: impl AsRef<Path>) -> PathBuf {
    let root = root.as_ref();
    let dir = root.join("etc/containers");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/accept-anything.json"
        ),
        dir.join("policy.json"),
    )
    .unwrap();
    root.to_owned()
}

/// The port a test server prints as the first word of its first stdout line.
pub fn read_port(child: &mut std::process::Child, what: &str) -> u16 {
    use std::io::BufRead as _;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .unwrap();
    line.split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{what} did not start: {line:?}"))
}

/// A child process (a test server) killed and reaped when dropped.
#[derive(Debug)]
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `c` with stdout and stderr captured, for `wait_with_output` later.
pub fn spawn_piped(c: &mut Command) -> std::process::Child {
    use std::process::Stdio;
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the command")
}

pub fn with_rig_creds(mut c: Command) -> Command {
    c.args([
        "--authfile",
        var("RIG_AUTHFILE"),
        "--cert-dir",
        var("RIG_CERT_DIR"),
    ]);
    c
}

#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        assert_eq!(self.code, 0, "pull failed: {}", self.stderr);
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", self.stdout))
    }

    /// The failure contract: the expected code, a first line `error: …`, at most
    /// one more line, and no secret; on stdout nothing, or with `--json`
    /// [`Run::failure`]'s object.
    pub fn assert_failure(&self, code: i32) {
        assert_eq!(self.code, code, "stderr: {}", self.stderr);
        if !self.stdout.is_empty() {
            self.failure();
        }
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| !l.contains(" WARN "))
            .collect();
        assert!(
            lines.first().is_some_and(|l| l.starts_with("error: ")),
            "{}",
            self.stderr
        );
        assert!(
            lines.len() <= 2,
            "one error line, one detail line: {}",
            self.stderr
        );
        assert!(!self.stderr.contains(&password()), "secret in stderr");
    }
}

impl Run {
    /// What `--json` printed for a failure: one line, one object of
    /// docs/failure-v0.schema.json's shape, with this run's code, and the
    /// `error:` line's text as its message. Its `error` member.
    pub fn failure(&self) -> Value {
        assert_eq!(self.stdout.lines().count(), 1, "{}", self.stdout);
        let v: Value = serde_json::from_str(&self.stdout).unwrap();
        let e = &v["error"];
        let line = self.stderr.lines().find_map(|l| l.strip_prefix("error: "));
        assert_eq!(e["exit_code"], self.code, "{v}");
        assert_eq!(e["message"].as_str(), line, "{v}");
        assert!(e["kind"].is_string() && (e["host"].is_string() || e["host"].is_null()));
        assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
        assert_eq!(e.as_object().unwrap().len(), 4, "{v}");
        assert!(!self.stdout.contains(&password()), "secret on stdout");
        e.clone()
    }
}

/// `json` (one document) is valid against `docs/SCHEMA`, by python3-jsonschema.
pub fn assert_valid(schema: &str, json: &str) {
    let schema = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs")
        .join(schema);
    let check = Command::new("/usr/bin/python3")
        .args(["-c", "import json, sys, jsonschema\njsonschema.validate(json.loads(sys.argv[2]), json.load(open(sys.argv[1])))"])
        .arg(&schema)
        .arg(json)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{json}: {err}");
}

pub fn run(c: &mut Command) -> Run {
    let Output {
        status,
        stdout,
        stderr,
    } = c.output().expect("running hostpull");
    Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8(stdout).unwrap(),
        stderr: String::from_utf8(stderr).unwrap(),
    }
}

/// `c`'s program and arguments as a shell command line, each word quoted.
pub fn shell_line(c: &Command) -> String {
    std::iter::once(c.get_program())
        .chain(c.get_args())
        .map(|a| format!("'{}'", a.to_string_lossy().replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Run `c` with its stderr on a terminal of `cols` x `rows` (a pty from
/// util-linux script(1)) and its stdout in `dir`/stdout: `stderr` is what the
/// terminal received, byte for byte.
pub fn run_on_terminal(c: &Command, dir: &Path, (cols, rows): (u16, u16)) -> Run {
    let stdout = dir.join("stdout");
    let line = format!(
        "stty cols {cols} rows {rows} && exec {} >'{}'",
        shell_line(c),
        stdout.display()
    );
    let mut script = Command::new("script");
    script
        .args(["-q", "-f", "-e", "-c", &line, "/dev/null"])
        .env("SHELL", "/bin/sh")
        .stdin(std::process::Stdio::null());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => script.env(k, v),
            None => script.env_remove(k),
        };
    }
    let out = script.output().expect("running script(1), from util-linux");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: std::fs::read_to_string(&stdout).unwrap_or_default(),
        stderr: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

pub fn skopeo(args: &[&str]) -> String {
    let out = Command::new("skopeo").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "skopeo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Copy the rig's image `src` to `dst` in the same registry, with skopeo's
/// `options` (`--all`, `--format v2s2`): a repository of a test's own, whose
/// lines in the registry's log are that test's.
pub fn rig_copy(src: &str, dst: &str, options: &[&str]) {
    let (creds, certs) = (var("RIG_AUTHFILE"), var("RIG_CERT_DIR"));
    let (src, dst) = (format!("docker://{src}"), format!("docker://{dst}"));
    let mut args = vec!["copy", "-q", "--authfile", creds];
    args.extend(["--src-cert-dir", certs, "--dest-cert-dir", certs]);
    args.extend(options);
    skopeo(&[&args[..], &[src.as_str(), dst.as_str()]].concat());
}

/// `skopeo inspect --raw` of a registry image, as root sees the registry.
pub fn registry_raw(image: &str) -> Value {
    let raw = skopeo(&[
        "inspect",
        "--raw",
        "--authfile",
        var("RIG_AUTHFILE"),
        "--cert-dir",
        var("RIG_CERT_DIR"),
        &format!("docker://{image}"),
    ]);
    serde_json::from_str(&raw).unwrap()
}

pub fn registry_digest(image: &str) -> String {
    let v: Value = serde_json::from_str(&skopeo(&[
        "inspect",
        "--authfile",
        var("RIG_AUTHFILE"),
        "--cert-dir",
        var("RIG_CERT_DIR"),
        &format!("docker://{image}"),
    ]))
    .unwrap();
    v["Digest"].as_str().unwrap().to_owned()
}

/// Every file below `dir` with the sha256 of its contents, to compare states.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let digest = hostpull::digest::sha256(&std::fs::read(&p).unwrap());
                out.push((
                    p.strip_prefix(dir).unwrap().to_owned(),
                    digest.hex().to_owned(),
                ));
            }
        }
    }
    out.sort();
    out
}

/// A TCP forwarder in front of the rig's registry, for fault tests that must
/// not disturb the registry other tests share. It can cut every connection
/// (the registry dies), refuse new ones for a while (it is down), or freeze
/// (it stalls: connections stay open, no byte moves).
#[derive(Debug)]
pub struct Forwarder {
    pub addr: String,
    state: std::sync::Arc<ForwarderState>,
}

#[derive(Debug, Default)]
struct ForwarderState {
    frozen: std::sync::atomic::AtomicBool,
    down_until: std::sync::Mutex<Option<std::time::Instant>>,
    conns: std::sync::Mutex<Vec<std::net::TcpStream>>,
    /// The connections towards the clients, for [`Forwarder::bytes_delivered`].
    clients: std::sync::Mutex<Vec<std::net::TcpStream>>,
    /// Bytes sent towards the client so far.
    down_bytes: std::sync::atomic::AtomicU64,
    /// At most this many bytes a second, per connection (0: no limit).
    rate: std::sync::atomic::AtomicU64,
}

impl Forwarder {
    pub fn start(target: &str, rate: u64) -> Self {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let state = std::sync::Arc::new(ForwarderState::default());
        state.rate.store(rate, Ordering::Relaxed);
        let st = std::sync::Arc::clone(&state);
        let target = target.to_owned();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if st
                    .down_until
                    .lock()
                    .unwrap()
                    .is_some_and(|t| std::time::Instant::now() < t)
                {
                    drop(client);
                    continue;
                }
                let Ok(upstream) = std::net::TcpStream::connect(&target) else {
                    continue;
                };
                {
                    let mut conns = st.conns.lock().unwrap();
                    conns.push(client.try_clone().unwrap());
                    conns.push(upstream.try_clone().unwrap());
                    st.clients.lock().unwrap().push(client.try_clone().unwrap());
                }
                let (c2, u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                let (s1, s2) = (std::sync::Arc::clone(&st), std::sync::Arc::clone(&st));
                std::thread::spawn(move || pump(client, upstream, &s1, false));
                std::thread::spawn(move || pump(u2, c2, &s2, true));
            }
        });
        Self { addr, state }
    }

    /// Reset every open connection and refuse new ones for `down`.
    pub fn cut(&self, down: std::time::Duration) {
        *self.state.down_until.lock().unwrap() = Some(std::time::Instant::now() + down);
        for c in self.state.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }

    pub fn freeze(&self) {
        self.state
            .frozen
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn bytes_down(&self) -> u64 {
        self.state
            .down_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The bytes towards the clients that their side has acknowledged: those
    /// written less what still waits in this forwarder's send buffers
    /// (SIOCOUTQ), within one write (64 KiB). That is what crossed the
    /// "link"; the forwarder's own send buffer, which Linux grows to 4 MiB
    /// on loopback, has not.
    pub fn bytes_delivered(&self) -> u64 {
        let queued: u64 = self.state.clients.lock().unwrap().iter().map(unacked).sum();
        self.bytes_down().saturating_sub(queued)
    }

    /// An authfile with the rig's credentials for this forwarder's address.
    pub fn authfile(&self, dir: &Path) -> PathBuf {
        authfile_for(&self.addr, dir)
    }
}

/// Bytes written to `s` that its peer has not acknowledged (SIOCOUTQ).
#[allow(unsafe_code)]
fn unacked(s: &std::net::TcpStream) -> u64 {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) stores one int through the pointer, which
    // points at `n`; the fd stays open while `s` is borrowed.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    if r == 0 {
        u64::try_from(n).unwrap_or(0)
    } else {
        0
    }
}

fn pump(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    st: &ForwarderState,
    down: bool,
) {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    let mut buf = vec![0u8; 64 << 10];
    let start = std::time::Instant::now();
    let mut moved = 0u64;
    loop {
        if st.frozen.load(Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        }
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        moved += n as u64;
        if down {
            st.down_bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        let rate = st.rate.load(Ordering::Relaxed);
        if rate > 0 {
            let due = std::time::Duration::from_secs_f64(moved as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// `hostpull pull` of the big image through `fw`, with credentials for it.
pub fn pull_via(fw: &Forwarder, dir: &Path, dest: &str) -> Command {
    pull_image_via(fw, var("RIG_IMG_BIG"), dir, dest)
}

/// `hostpull pull` of the rig's `image` through `fw`, with credentials for it.
pub fn pull_image_via(fw: &Forwarder, image: &str, dir: &Path, dest: &str) -> Command {
    let image = image.replace(var("RIG_REGISTRY"), &fw.addr);
    let mut c = pull_cmd(&image, dest);
    c.args(["--cert-dir", var("RIG_CERT_DIR"), "--authfile"])
        .arg(fw.authfile(dir));
    c
}

/// Wait until `f` holds, or fail the test after `timeout`.
pub fn wait_for(what: &str, timeout: std::time::Duration, mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `oci:DIR`: an OCI layout as a destination, its tag the image's.
pub fn oci(dir: &Path) -> String {
    format!("oci:{}", dir.display())
}

/// `oci:DIR:TAG`: an OCI layout as a destination, with the tag to write.
pub fn oci_tag(dir: &Path, tag: &str) -> String {
    format!("oci:{}:{tag}", dir.display())
}

/// Wait until the process `pid` has read `bytes` more than it had when
/// called (`rchar` of /proc/PID/io: every read(2), pipes included), so that
/// blobs are flowing through it rather than about to.
pub fn wait_for_reads(pid: u32, bytes: u64) {
    let rchar = || {
        std::fs::read_to_string(format!("/proc/{pid}/io"))
            .ok()
            .and_then(|io| {
                io.lines()
                    .find_map(|l| l.strip_prefix("rchar: ")?.trim().parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    let start = rchar();
    wait_for(
        &format!("{bytes} bytes read by {pid}"),
        std::time::Duration::from_secs(30),
        || rchar() >= start + bytes,
    );
}

/// The skopeo processes of the hostpull with this pid: with systemd its units'
/// (the unit name holds the pid), without systemd its children, whose
/// authfile lies in the pull's staging directory (`hostpull-<pid>-…`).
pub fn workers_of(pid: u32) -> Vec<String> {
    let markers = [
        format!("hostpull-worker-{pid}-"),
        format!("/hostpull-{pid}-"),
    ];
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|p| std::fs::read(p.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("skopeo") && markers.iter().any(|m| c.contains(m.as_str())))
        .collect()
}

/// An authfile with the rig's credentials keyed for `host_port` instead of the
/// rig's `127.0.0.1:PORT` (entries are keyed by the exact host:port).
pub fn authfile_for(host_port: &str, dir: &Path) -> PathBuf {
    let rig = std::fs::read_to_string(var("RIG_AUTHFILE")).unwrap();
    let path = dir.join(format!("auth-{host_port}.json"));
    std::fs::write(&path, rig.replace(var("RIG_REGISTRY"), host_port)).unwrap();
    path
}

/// A copy of the test script `tests/NAME` in a fresh directory under /run
/// (0755): a worker unit has a private /tmp, and the checkout may be below /tmp.
pub fn script_under_run(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = dir_under_run();
    let script = dir.path().join(name);
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests")
            .join(name),
        &script,
    )
    .unwrap();
    (dir, script)
}

/// A fresh 0755 directory under /run, which worker units see (their /tmp is
/// private, and the checkout may be below /tmp).
pub fn dir_under_run() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("hostpull-test-")
        .tempdir_in("/run")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Write a root-only (0600) file.
pub fn write_private(path: &Path, bytes: &[u8]) {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    std::io::Write::write_all(&mut f, bytes).unwrap();
}

/// `pull` in a mount namespace of its own where /etc/containers/policy.json
/// rejects everything: what a worker that is our child (not a unit, which
/// sees PID 1's /etc) finds as its host's policy.
pub fn with_rejecting_etc_policy_json(pull: &Command, scratch: &Path) -> Command {
    let reject = scratch.join("reject.json");
    std::fs::write(&reject, r#"{"default":[{"type":"reject"}]}"#).unwrap();
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount --bind {} /etc/containers/policy.json && exec \"$@\"",
            reject.display()
        ))
        .arg("sh")
        .arg(pull.get_program())
        .args(pull.get_args());
    for (k, v) in pull.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// Pull `image` into `dest` with the rig's credentials and CA; it must succeed.
pub fn pulled(image: &str, dest: &str) -> serde_json::Value {
    run(&mut with_rig_creds(pull_cmd(image, dest))).json()
}

/// tests/status_registry.py on a port of its own, with the rig's server
/// certificate: its port, and the guard that stops it.
pub fn status_registry() -> (u16, KillOnDrop) {
    let ca = Path::new(var("RIG_CA"));
    let mut server = std::process::Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/status_registry.py"
    ));
    server
        .arg("--cert")
        .arg(ca.with_file_name("server.crt"))
        .arg("--key")
        .arg(ca.with_file_name("server.key"))
        .stdout(std::process::Stdio::piped());
    let mut child = server.spawn().unwrap();
    let port = read_port(&mut child, "tests/status_registry.py");
    (port, KillOnDrop(child))
}

/// The scheduling policy of every thread of `pid` (field 41 of
/// /proc/PID/task/TID/stat: 0 SCHED_OTHER, 3 SCHED_BATCH, 5 SCHED_IDLE).
pub fn policies(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
        .filter_map(|stat| {
            let after_comm = &stat[stat.rfind(')')? + 2..];
            after_comm.split(' ').nth(41 - 3)?.parse().ok()
        })
        .collect()
}

/// Where the registry's access log ends now.
pub fn registry_log_mark() -> u64 {
    std::fs::metadata(var("RIG_REGISTRY_LOG")).unwrap().len()
}

/// The requests a pull of repository `repo` made since `mark` (GETs of its
/// manifests and blobs, whatever their answer). Not HEADs: another test's
/// `skopeo copy` into a repository of its own asks for blobs here
/// (`HEAD`, then a cross-repository mount) where its blob cache saw them.
pub fn pulled_since(mark: u64, repo: &str) -> usize {
    let log = std::fs::read(var("RIG_REGISTRY_LOG")).unwrap();
    let get = format!("\"GET /v2/{repo}/");
    String::from_utf8_lossy(&log[mark as usize..])
        .lines()
        .filter(|l| l.contains(&get))
        .count()
}

/// The rig's tamper image, its layer's bytes overwritten in the registry's
/// storage (its size kept): it fails verification (exit 7). Idempotent, so
/// the suite can run again on the same rig, and tests may do it at once.
pub fn tampered_image() -> &'static str {
    let blob = var("RIG_TAMPER_BLOB");
    let mut bytes = std::fs::read(blob).unwrap();
    let mid = bytes.len() / 2;
    let mark = b"hostpull-tampered";
    if bytes[mid..mid + mark.len()] != mark[..] {
        bytes[mid..mid + mark.len()].copy_from_slice(mark);
        let tmp = format!("{blob}.{}", std::process::id());
        std::fs::write(&tmp, &bytes).unwrap();
        std::fs::rename(tmp, blob).unwrap();
    }
    var("RIG_IMG_TAMPER")
}

/// What of repository `repo` (e.g. `hostpull/x`) was fetched (GET, 200) since
/// `mark`, from `kind` (`blobs` or `manifests`): digests or tags, in order.
pub fn fetched_since(mark: u64, repo: &str, kind: &str) -> Vec<String> {
    let log = std::fs::read(var("RIG_REGISTRY_LOG")).unwrap();
    let text = String::from_utf8_lossy(&log[mark as usize..]);
    let prefix = format!("\"GET /v2/{repo}/{kind}/");
    text.lines()
        .filter_map(|l| {
            let rest = &l[l.find(&prefix)? + prefix.len()..];
            let (name, rest) = rest.split_once(' ')?;
            let status = rest.split_once("\" ")?.1.split(' ').next()?;
            (status == "200").then(|| name.to_owned())
        })
        .collect()
}
