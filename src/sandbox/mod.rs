//! Turns a plan into a running worker: `skopeo`, as an image proxy or for one
//! `inspect --raw`, started with exactly what the plan allows and nothing ambient.
//!
//! [`WorkerSpec`] is a value; [`Worker::command`] turns it into a `Command` that
//! tests can assert without spawning.

pub mod monitor;
pub mod staging;
pub mod unit;

use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::Context;
use containers_image_proxy::ImageProxyConfig;
use serde::Serialize;
use tokio::io::AsyncReadExt;

use crate::error::{Failure, Kind, classify_worker_text, fail};
use crate::options::SandboxMode;
use crate::plan::auth::{self, Chosen};
use crate::plan::dns::Dns;
use crate::plan::imgref::ImageRef;
use crate::plan::trust::HostTrust;
use monitor::{Observed, Systemd};
use staging::Staging;
pub use unit::Limits;

/// The test hook that replaces the worker binary (`skopeo`) with another program.
pub const SKOPEO_ENV: &str = "HOSTPULL_SKOPEO";
/// The authfile's name among the worker's credentials.
const AUTHFILE: &str = "auth.json";
/// The registries.conf's name among the worker's credentials.
const REGISTRIES_CONF: &str = "registries.conf";
/// A host's CAs plus the system's, in one file for curl (skopeo ignores it).
const CA_BUNDLE: &str = "bundle.pem";
/// How long a unit may take to stop before hostpull gives up on it.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything the worker may use for one pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSpec {
    /// `Systemd` or `None`; `Auto` is resolved by the plan.
    pub mode: SandboxMode,
    /// The skopeo binary: `--skopeo`, `HOSTPULL_SKOPEO`, `[worker] skopeo`, or
    /// `skopeo` on PATH.
    pub skopeo: PathBuf,
    /// The credentials this pull may use, one per host; none means `--no-creds`.
    /// The worker gets an authfile with exactly these entries.
    pub credentials: Vec<Chosen>,
    /// One CA directory for every host (skopeo's `--cert-dir`).
    pub cert_dir: Option<PathBuf>,
    pub tls_verify: bool,
    pub limits: Limits,
    /// `SELinuxContext=` of the worker unit; set where SELinux is enabled.
    pub selinux_context: Option<String>,
    /// Per-host CAs and client certificates (without `--cert-dir`).
    pub trust: Vec<HostTrust>,
    /// The worker's own resolver settings and /etc/hosts entries.
    pub dns: Dns,
    /// The worker's registries.conf: this image's table only.
    pub registries_conf: String,
}

#[cfg(test)]
impl WorkerSpec {
    /// A worker with nothing but defaults: no credentials, trust or DNS.
    pub(crate) fn for_tests(mode: SandboxMode) -> Self {
        Self {
            mode,
            skopeo: "/usr/bin/skopeo".into(),
            credentials: Vec::new(),
            cert_dir: None,
            tls_verify: true,
            limits: Limits::default(),
            selinux_context: None,
            trust: Vec::new(),
            dns: Dns::default(),
            registries_conf: String::new(),
        }
    }
}

/// What the final report says about the worker.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerReport {
    pub sandbox: SandboxMode,
    pub unit: Option<String>,
    pub uid: Option<u32>,
    pub memory_peak_bytes: Option<u64>,
    /// From starting the proxy's worker to its `Initialize` reply.
    pub startup_ms: Option<u64>,
    /// The worker's `skopeo --version`, e.g. `1.22.0`.
    pub skopeo: Option<String>,
    /// The proxy protocol of its `Initialize` reply, e.g. `0.2.8`.
    pub protocol: Option<String>,
    /// How blobs came: `GetRawBlob` (0.2.8 on) or `GetBlob`.
    pub blobs_via: Option<&'static str>,
}

/// What the proxy session said about itself.
#[derive(Debug, Clone, Default)]
struct Session {
    startup: Option<Duration>,
    protocol: Option<String>,
    raw_blobs: bool,
}

/// One command that starts the worker, and the unit it runs as, if any.
#[derive(Debug)]
struct Launch {
    cmd: Command,
    unit: Option<String>,
    /// What runs inside: skopeo, or curl.
    program: PathBuf,
}

/// A prepared worker environment for one pull. [`Worker::shutdown`] stops its
/// units and removes its staging directory.
#[derive(Debug)]
pub struct Worker {
    spec: WorkerSpec,
    /// `<orchestrator pid>-<random>`: names the staging dir and the units.
    id: String,
    staging: Option<Staging>,
    /// The worker's HOME without systemd: empty and private.
    home: Option<PathBuf>,
    /// Without systemd: the image host's staged CA directory, as `--cert-dir`.
    host_cert_dir: Option<PathBuf>,
    /// Without systemd: the staged least-privilege authfile.
    staged_authfile: Option<PathBuf>,
    /// Without systemd: the staged registries.conf.
    staged_registries: Option<PathBuf>,
    mounts: unit::Mounts,
    systemd: Option<Systemd>,
    seq: AtomicU32,
    units: Mutex<Vec<String>>,
    observed: Mutex<Option<Observed>>,
    session: Mutex<Session>,
    /// `skopeo --version`, asked while the pull runs.
    version: Mutex<Option<tokio::task::JoinHandle<Option<String>>>>,
}

impl Worker {
    pub async fn prepare(spec: &WorkerSpec) -> anyhow::Result<Self> {
        let id = format!("{}-{:08x}", std::process::id(), rand_u32());
        let mut w = Self {
            spec: spec.clone(),
            id,
            staging: None,
            home: None,
            host_cert_dir: None,
            staged_authfile: None,
            staged_registries: None,
            mounts: Default::default(),
            systemd: None,
            seq: AtomicU32::new(0),
            units: Mutex::default(),
            observed: Mutex::default(),
            session: Mutex::default(),
            version: Mutex::new(Some(tokio::spawn(skopeo_version(spec.skopeo.clone())))),
        };
        match spec.mode {
            SandboxMode::Systemd => {
                let systemd = Systemd::connect().await.map_err(|e| {
                    Failure::new(Kind::Worker, "cannot reach systemd on the system bus")
                        .with_detail(format!("{e:#}"))
                })?;
                systemd.stop_leftovers().await?;
                let staging = Staging::create(Path::new(staging::RUN_DIR), &w.id)?;
                if !spec.credentials.is_empty() {
                    let staged =
                        staging.write(AUTHFILE, &auth::minimal_authfile(&spec.credentials))?;
                    w.mounts.credentials.push((AUTHFILE.into(), staged));
                }
                let staged = staging.write(REGISTRIES_CONF, spec.registries_conf.as_bytes())?;
                w.mounts.credentials.push((REGISTRIES_CONF.into(), staged));
                // --registries-conf does not stop skopeo from reading the host's
                // drop-ins: hide them behind an empty directory.
                let host_dropins = Path::new("/etc/containers/registries.conf.d");
                if host_dropins.is_dir() {
                    let empty = staging.path().join("registries.conf.d");
                    std::fs::DirBuilder::new().mode(0o755).create(&empty)?;
                    w.mounts.binds.push((empty, host_dropins.into()));
                }
                if let Some(dir) = &spec.cert_dir {
                    for name in cert_files(dir)? {
                        let staged = staging.copy(&name, &dir.join(&name))?;
                        w.mounts.credentials.push((name, staged));
                    }
                }
                for (i, t) in spec.trust.iter().enumerate() {
                    if let Some((_, key)) = &t.client {
                        // The key stays root-only; the unit gets it as a credential.
                        let name = client_key_name(i);
                        let staged = staging.copy(&name, key)?;
                        w.mounts.credentials.push((name, staged));
                    }
                }
                let host_file = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
                let host_resolv = host_file("/etc/resolv.conf");
                w.mounts.resolvers = spec.dns.name_servers(&host_resolv);
                w.mounts.resolvers.retain(|ip| unit::ip_denied(*ip));
                if let Some(conf) = spec.dns.resolv_conf(&host_resolv) {
                    let staged = staging.write_public("resolv.conf", conf.as_bytes())?;
                    w.mounts.binds.push((staged, "/etc/resolv.conf".into()));
                }
                if let Some(hosts) = spec.dns.hosts_file(&host_file("/etc/hosts")) {
                    let staged = staging.write_public("hosts", hosts.as_bytes())?;
                    w.mounts.binds.push((staged, "/etc/hosts".into()));
                }
                w.staging = Some(staging);
                w.systemd = Some(systemd);
            }
            _ => {
                let staging =
                    Staging::create(&std::env::temp_dir(), &format!("hostpull-{}", w.id))?;
                let home = staging.path().join("home");
                std::fs::create_dir(&home).context("Creating the worker's HOME")?;
                if !spec.credentials.is_empty() {
                    let authfile = auth::minimal_authfile(&spec.credentials);
                    w.staged_authfile = Some(staging.write(AUTHFILE, &authfile)?);
                }
                let conf = spec.registries_conf.as_bytes();
                w.staged_registries = Some(staging.write(REGISTRIES_CONF, conf)?);
                // Without mounts, trust can only be given as one --cert-dir; the
                // plan allows that only for the image's own host.
                if let Some(t) = spec.trust.iter().find(|t| !t.lookaside_only) {
                    let dir = format!("certs.d/{}", t.host);
                    for (j, ca) in t.cas.iter().enumerate() {
                        staging.write_public(
                            &format!("{dir}/ca-{j}.crt"),
                            &crate::host::read_trust_file(ca)?,
                        )?;
                    }
                    if let Some((cert, key)) = &t.client {
                        staging.write_public(
                            &format!("{dir}/client.cert"),
                            &crate::host::read_trust_file(cert)?,
                        )?;
                        staging.copy(&format!("{dir}/client.key"), key)?;
                    }
                    w.host_cert_dir = Some(staging.path().join(dir));
                }
                for t in &spec.trust {
                    stage_ca_bundle(&staging, &format!("certs.d/{}", t.host), t)?;
                }
                w.home = Some(home);
                w.staging = Some(staging);
            }
        }
        Ok(w)
    }

    /// The authfile as skopeo sees it: ours without systemd, the unit's
    /// credential with it.
    fn authfile_for(&self, unit: Option<&str>) -> Option<PathBuf> {
        if self.spec.credentials.is_empty() {
            return None;
        }
        match unit {
            Some(u) => Some(unit::credentials_dir(u).join(AUTHFILE)),
            None => self.staged_authfile.clone(),
        }
    }

    /// The CA directory as skopeo sees it; in a unit, its credentials directory.
    fn cert_dir_for(&self, unit: Option<&str>) -> Option<PathBuf> {
        let Some(d) = self.spec.cert_dir.as_ref() else {
            return self.host_cert_dir.clone();
        };
        Some(unit.map_or_else(|| d.clone(), unit::credentials_dir))
    }

    /// A unit's certs.d tree, bound over /etc/containers/certs.d: each host's
    /// CAs and client certificate, and its client key as a link into the unit's
    /// credentials, so that the key itself never leaves root-only storage.
    fn stage_certs_d(&self, n: u32, unit: &str) -> anyhow::Result<Option<PathBuf>> {
        let Some(staging) = &self.staging else {
            return Ok(None);
        };
        if self.spec.trust.is_empty() {
            return Ok(None);
        }
        let tree = format!("certs.d-{n}");
        for (i, t) in self.spec.trust.iter().enumerate() {
            let dir = format!("{tree}/{}", t.host);
            for (j, ca) in t.cas.iter().enumerate() {
                staging.write_public(
                    &format!("{dir}/ca-{j}.crt"),
                    &crate::host::read_trust_file(ca)?,
                )?;
            }
            stage_ca_bundle(staging, &dir, t)?;
            if let Some((cert, _)) = &t.client {
                staging.write_public(
                    &format!("{dir}/client.cert"),
                    &crate::host::read_trust_file(cert)?,
                )?;
                let key = unit::credentials_dir(unit).join(client_key_name(i));
                staging.symlink(&format!("{dir}/client.key"), &key)?;
            }
        }
        Ok(Some(staging.path().join(tree)))
    }

    /// curl's `--cacert` for an https `url`: the host's bundle, if it has CAs.
    fn ca_bundle_for(&self, url: &str, unit: Option<&str>) -> Option<PathBuf> {
        let host = url.strip_prefix("https://")?.split('/').next()?;
        let t = self.spec.trust.iter().find(|t| t.host == host)?;
        if t.cas.is_empty() {
            return None;
        }
        let dir = match unit {
            Some(_) => PathBuf::from("/etc/containers/certs.d"),
            None => self.staging.as_ref()?.path().join("certs.d"),
        };
        Some(dir.join(&t.host).join(CA_BUNDLE))
    }

    /// The options skopeo's image commands share, after the subcommand. Never
    /// without a credentials option: without an authfile, `--no-creds` keeps
    /// skopeo from falling back to ambient files.
    fn client_args(&self, unit: Option<&str>) -> Vec<OsString> {
        // Root alone enforces the signature policy, never the host's policy.json.
        let mut a: Vec<OsString> = vec!["--insecure-policy".into()];
        match self.authfile_for(unit) {
            Some(f) => a.extend(["--authfile".into(), f.into()]),
            None => a.push("--no-creds".into()),
        }
        if let Some(d) = self.cert_dir_for(unit) {
            a.extend(["--cert-dir".into(), d.into()]);
        }
        if !self.spec.tls_verify {
            a.push("--tls-verify=false".into());
        }
        a
    }

    /// The command up to and including the skopeo binary.
    fn launch(&self) -> anyhow::Result<Launch> {
        self.launch_program(&self.spec.skopeo, true)
    }

    /// The command up to and including `program`, isolated as skopeo is; with
    /// `skopeo`, it gets this pull's registries.conf.
    fn launch_program(&self, program: &Path, skopeo: bool) -> anyhow::Result<Launch> {
        match &self.systemd {
            Some(_) => {
                let n = self.seq.fetch_add(1, Ordering::Relaxed);
                let unit = format!("{}{}-{n}.service", unit::UNIT_PREFIX, self.id);
                let mut mounts = self.mounts.clone();
                if let Some(tree) = self.stage_certs_d(n, &unit)? {
                    mounts.binds.push((tree, "/etc/containers/certs.d".into()));
                }
                self.units.lock().unwrap().push(unit.clone());
                let mut cmd = unit::systemd_run(&unit, &self.spec, &mounts, program);
                if skopeo {
                    let conf = unit::credentials_dir(&unit).join(REGISTRIES_CONF);
                    cmd.arg("--registries-conf").arg(conf);
                }
                Ok(Launch {
                    cmd,
                    unit: Some(unit),
                    program: program.into(),
                })
            }
            None => {
                // A direct child with a clean environment and a parent-death signal.
                let home = self
                    .home
                    .as_deref()
                    .expect("a worker without systemd has a HOME");
                let mut c = Command::new(program);
                c.env_clear()
                    .env(
                        "PATH",
                        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    )
                    .env("HOME", home)
                    .current_dir(home);
                pdeathsig(&mut c);
                if let Some(conf) = self.staged_registries.as_ref().filter(|_| skopeo) {
                    c.arg("--registries-conf").arg(conf);
                }
                Ok(Launch {
                    cmd: c,
                    unit: None,
                    program: program.into(),
                })
            }
        }
    }

    /// The configuration for one `containers-image-proxy` session, and its unit.
    pub fn proxy_config(&self) -> anyhow::Result<(ImageProxyConfig, Option<String>)> {
        let Launch { cmd, unit, .. } = self.launch()?;
        // The crate spells these options itself; they mean what client_args says.
        let mut cfg = ImageProxyConfig::default();
        cfg.authfile = self.authfile_for(unit.as_deref());
        cfg.auth_anonymous = cfg.authfile.is_none();
        cfg.certificate_directory = self.cert_dir_for(unit.as_deref());
        cfg.insecure_skip_tls_verification = Some(!self.spec.tls_verify);
        // Root alone enforces the signature policy: from protocol 0.2.6 on, the
        // proxy would apply the host's policy.json inside OpenImage.
        cfg.insecure_policy = Some(true);
        cfg.skopeo_cmd = Some(cmd);
        Ok((cfg, unit))
    }

    /// Run `fut`, which drives the worker running as `unit`, and watch the unit
    /// meanwhile. A worker that died for memory becomes a clear error.
    pub async fn observe<T>(
        &self,
        unit: Option<&str>,
        fut: impl std::future::Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        let (Some(systemd), Some(unit)) = (&self.systemd, unit) else {
            return fut.await;
        };
        let (r, seen) = systemd.watch(unit, fut).await;
        *self.observed.lock().unwrap() = Some(seen.clone());
        let Err(e) = r else { return r };
        // Did the worker die under us? Then that, not its last words, is the error.
        let exit = match systemd.exit_state(unit, Duration::from_secs(1)).await {
            Ok(Some(exit)) => exit,
            _ => return Err(e),
        };
        let limits = &self.spec.limits;
        if seen.out_of_memory(&exit, limits.memory_max_bytes()) {
            return fail(
                Kind::Worker,
                format!(
                    "worker killed: out of memory (MemoryMax={})",
                    limits.memory_max
                ),
            );
        }
        let died = match (exit.signal(), exit.result.as_str()) {
            (Some(sig), _) => format!("worker killed by signal {sig}"),
            // systemd's own exit statuses: the unit failed before skopeo ran.
            (None, "exit-code") if (200..=245).contains(&exit.status) => format!(
                "systemd could not start the worker: exit status {} (systemd.exec(5), \"Process Exit Codes\"){}",
                exit.status,
                if self.spec.selinux_context.is_some() {
                    "; is the hostpull SELinux module installed (semodule -i hostpull.pp)?"
                } else {
                    ""
                }
            ),
            _ => return Err(e),
        };
        Err(Failure::new(Kind::Worker, died)
            .with_detail(format!("{e:#}"))
            .into())
    }

    /// `skopeo inspect --raw`: the registry's manifest bytes exactly as served, so
    /// that root can hash them. The proxy of skopeo 1.9.3 converts Docker manifests
    /// to OCI and resolves indexes itself, which would hide both from root.
    pub async fn inspect_raw(&self, image: &ImageRef, limit: u64) -> anyhow::Result<Vec<u8>> {
        let mut launch = self.launch()?;
        launch
            .cmd
            .arg("inspect")
            .arg("--raw")
            .args(self.client_args(launch.unit.as_deref()))
            .arg(image.to_transport());
        self.run(launch, limit, |ok, out, err| {
            if out.len() as u64 > limit {
                return fail(
                    Kind::Verify,
                    format!("manifest of {image} is larger than {} MiB", limit >> 20),
                );
            }
            if !ok {
                let err = String::from_utf8_lossy(&err);
                return Err(worker_failure(&format!("inspecting {image}"), &err).into());
            }
            Ok(out)
        })
        .await
    }

    /// GET `url` with curl, isolated as skopeo is (same unit settings, DNS and
    /// per-host CAs): the body, or `None` for a 404. Signature lookasides are
    /// network access, so root does not fetch them itself.
    pub async fn fetch_url(&self, url: &str, limit: u64) -> anyhow::Result<Option<Vec<u8>>> {
        let mut launch = self.launch_program(Path::new("curl"), false)?;
        launch
            .cmd
            .args([
                "--silent",
                "--show-error",
                "--location",
                "--max-redirs",
                "3",
            ])
            .args(["--proto", "=http,https", "--proto-redir", "=http,https"])
            .args(["--connect-timeout", "30", "--max-time", "120"])
            .arg("--max-filesize")
            .arg(limit.to_string())
            .args(["--write-out", "%{stderr}\nHTTP %{http_code}\n"]);
        if let Some(bundle) = self.ca_bundle_for(url, launch.unit.as_deref()) {
            launch.cmd.arg("--cacert").arg(bundle);
        }
        launch.cmd.arg("--").arg(url);
        self.run(launch, limit, |ok, out, err| {
            curl_result(url, limit, ok, out, &String::from_utf8_lossy(&err))
        })
        .await
    }

    /// Run a worker command to its end, watched: `check` turns whether it
    /// succeeded, its stdout (at most `limit` + 1 bytes) and stderr into the
    /// result, inside the watch, so that a unit that failed to start is
    /// reported as such.
    async fn run<T>(
        &self,
        launch: Launch,
        limit: u64,
        check: impl FnOnce(bool, Vec<u8>, Vec<u8>) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let Launch {
            mut cmd,
            unit,
            program,
        } = launch;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let run = async move {
            let mut c = tokio::process::Command::from(cmd);
            c.kill_on_drop(true);
            let mut child = c.spawn().map_err(|e| {
                Failure::new(
                    Kind::Worker,
                    format!("starting worker {}: {e}", program.display()),
                )
            })?;
            let mut stdout = child.stdout.take().expect("piped").take(limit + 1);
            let mut stderr = child.stderr.take().expect("piped");
            let mut out = Vec::new();
            let mut err = Vec::new();
            let (r1, r2) = tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
            r1.and(r2).context("Reading worker output")?;
            if out.len() as u64 > limit {
                return check(false, out, err);
            }
            let status = child.wait().await?;
            check(status.success(), out, err)
        };
        self.observe(unit.as_deref(), run).await
    }

    /// A root-only directory for this pull's scratch files (gpgv's), removed
    /// with the staging directory.
    pub fn scratch(&self) -> &Path {
        self.staging
            .as_ref()
            .expect("a prepared worker has a staging directory")
            .path()
    }

    /// Record how long the proxy took to answer `Initialize`, and what it answered.
    pub fn record_session(&self, took: Duration, proxy: &containers_image_proxy::ImageProxy) {
        *self.session.lock().unwrap() = Session {
            startup: Some(took),
            protocol: Some(proxy.protocol_version().to_string()),
            raw_blobs: proxy.supports_get_raw_blob(),
        };
    }

    pub async fn report(&self) -> WorkerReport {
        let seen = self.observed.lock().unwrap().clone();
        let session = self.session.lock().unwrap().clone();
        let version = self.version.lock().unwrap().take();
        let skopeo = match version {
            Some(v) => v.await.ok().flatten(),
            None => None,
        };
        let (unit, uid, memory_peak_bytes) = match seen {
            Some(o) => (Some(o.unit), o.uid, o.memory_peak_bytes),
            None => (
                None,
                (self.systemd.is_none()).then(|| rustix::process::getuid().as_raw()),
                None,
            ),
        };
        WorkerReport {
            sandbox: self.spec.mode,
            unit,
            uid,
            memory_peak_bytes,
            startup_ms: session.startup.map(|d| d.as_millis() as u64),
            blobs_via: session.protocol.is_some().then_some(if session.raw_blobs {
                "GetRawBlob"
            } else {
                "GetBlob"
            }),
            protocol: session.protocol,
            skopeo,
        }
    }

    /// Stop every worker this pull started that still runs: its units (killing
    /// `systemd-run` does not stop them), or without systemd, its child skopeo
    /// processes. A skopeo blocked on a stalled registry ends no other way.
    pub async fn stop_units(&self) {
        match &self.systemd {
            Some(systemd) => {
                let units = std::mem::take(&mut *self.units.lock().unwrap());
                for unit in units {
                    if let Err(e) = systemd.stop(&unit, STOP_TIMEOUT).await {
                        tracing::warn!("stopping {unit}: {e:#}");
                    }
                }
            }
            None => kill_children(),
        }
    }

    /// Stop the workers and remove the staging directory.
    pub async fn shutdown(mut self) {
        self.stop_units().await;
        if let Some(s) = self.staging.take() {
            s.remove();
        }
    }
}

/// SIGKILL every child of this process: without systemd, they are workers.
fn kill_children() {
    let me = std::process::id().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for p in procs.flatten() {
        let Ok(stat) = std::fs::read_to_string(p.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid …: comm may hold spaces, so split after the ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1));
        let pid = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok());
        if let (Some(ppid), Some(pid)) = (ppid, pid.and_then(rustix::process::Pid::from_raw))
            && ppid == me
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for Worker {
    /// A worker dropped without `shutdown` (a panic) still removes its secrets.
    fn drop(&mut self) {
        if let Some(s) = self.staging.take() {
            s.remove();
        }
    }
}

/// The files of a `--cert-dir` that skopeo reads: CA certificates and client
/// certificate/key pairs.
fn cert_files(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    let entries = std::fs::read_dir(dir)
        .or_else(|e| fail(Kind::Usage, format!("--cert-dir {}: {e}", dir.display())))?;
    for e in entries {
        let name = e?.file_name().into_string().unwrap_or_default();
        if [".crt", ".cert", ".key"].iter().any(|s| name.ends_with(s)) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// A client key's name among a unit's credentials.
fn client_key_name(host_index: usize) -> String {
    format!("client-{host_index}.key")
}

/// What curl's run means: the body for 200, `None` for 404, else an error.
/// `--write-out` put `HTTP <code>` last on stderr.
fn curl_result(
    url: &str,
    limit: u64,
    ok: bool,
    out: Vec<u8>,
    err: &str,
) -> anyhow::Result<Option<Vec<u8>>> {
    let code = err
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("HTTP "))
        .unwrap_or("000");
    match code {
        "200" if ok && out.len() as u64 <= limit => Ok(Some(out)),
        "404" => Ok(None),
        "200" => fail(
            Kind::Signature,
            format!("{url}: larger than {} MiB", limit >> 20),
        ),
        _ => {
            let text = err.lines().find(|l| !l.is_empty()).unwrap_or_default();
            let text = if text.starts_with("HTTP ") {
                format!("HTTP status {code}")
            } else {
                text.to_owned()
            };
            let kind = curl_kind(&text);
            Err(Failure::new(kind, format!("fetching signature {url}"))
                .with_detail(text)
                .into())
        }
    }
}

/// What a failed curl means, by its exit code (curl(1), "EXIT CODES"): the
/// TLS ones are trust errors, everything else (an HTTP status, a refused or
/// timed-out connection, a name that does not resolve) a network error.
fn curl_kind(text: &str) -> Kind {
    let code = text
        .strip_prefix("curl: (")
        .and_then(|r| r.split(')').next())
        .and_then(|c| c.parse::<u32>().ok());
    match code {
        Some(35 | 51 | 53 | 54 | 58 | 59 | 60 | 64 | 66 | 77 | 80 | 82 | 83 | 90 | 91) => Kind::Tls,
        _ => Kind::Network,
    }
}

/// `DIR/bundle.pem` in the staging dir: the system's CAs, then the host's.
fn stage_ca_bundle(staging: &Staging, dir: &str, t: &HostTrust) -> anyhow::Result<()> {
    if t.cas.is_empty() {
        return Ok(());
    }
    let mut bundle = std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    for ca in &t.cas {
        bundle.push(b'\n');
        bundle.extend(crate::host::read_trust_file(ca)?);
    }
    staging.write_public(&format!("{dir}/{CA_BUNDLE}"), &bundle)?;
    Ok(())
}

/// `skopeo --version` of the worker's binary, e.g. `1.22.0`: the host's own
/// program, asked nothing from the network, with a clean environment.
async fn skopeo_version(skopeo: PathBuf) -> Option<String> {
    let mut c = tokio::process::Command::new(skopeo);
    c.arg("--version")
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(10), c.output())
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .split_whitespace()
        .skip_while(|w| *w != "version")
        .nth(1)?;
    version
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || ".-+~".contains(c))
        .then(|| version.to_owned())
}

pub(crate) fn rand_u32() -> u32 {
    let mut b = [0u8; 4];
    // getrandom(2) cannot fail for 4 bytes once the pool is initialized.
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    u32::from_ne_bytes(b)
}

/// A failure reported by skopeo, classified by its text, with the raw text kept
/// as the second line.
pub fn worker_failure(doing: &str, text: &str) -> Failure {
    let message = skopeo_message(text);
    let kind = classify_worker_text(&message);
    let what = match kind {
        Kind::Auth => "authentication refused",
        Kind::NotFound => "image not found",
        Kind::Tls => "TLS or certificate trust failed",
        Kind::Network => "network error",
        Kind::Verify => "verification failed",
        _ => "worker failed",
    };
    Failure::new(kind, format!("{what} while {doing}")).with_detail(message)
}

/// skopeo logs a fatal error as `time="…" level=fatal msg="…"`, the message
/// quoted with Go's `%q` (logrus); keep the message as skopeo wrote it, so that
/// a body skopeo quoted in it reads as quoted, and the lines of a multi-error
/// list as lines.
fn skopeo_message(text: &str) -> String {
    let Some((_, rest)) = text.rsplit_once("level=fatal msg=\"") else {
        return text.trim().to_owned();
    };
    let msg = rest.trim_end().strip_suffix('"').unwrap_or(rest);
    let mut out = String::with_capacity(msg.len());
    let mut chars = msg.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(e @ ('\\' | '"')) => out.push(e),
            Some(e) => out.extend(['\\', e]),
            None => out.push('\\'),
        }
    }
    out
}

/// Bind a direct child's life to ours: if hostpull dies, skopeo gets SIGTERM.
#[allow(unsafe_code)]
fn pdeathsig(c: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and allocates nothing.
    unsafe {
        c.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))
                .map_err(Into::into)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curl_results() {
        let u = "http://l/s";
        let body = || b"sig".to_vec();
        assert_eq!(
            curl_result(u, 9, true, body(), "\nHTTP 200\n").unwrap(),
            Some(body())
        );
        assert_eq!(
            curl_result(u, 9, true, vec![], "\nHTTP 404\n").unwrap(),
            None
        );
        for (ok, out, err, code) in [
            (true, body(), "\nHTTP 500\n", 6),
            (
                false,
                vec![],
                "curl: (7) Failed to connect to l port 80\nHTTP 000\n",
                6,
            ),
            (
                false,
                vec![],
                "curl: (60) SSL certificate problem: unable to get local issuer certificate\nHTTP 000\n",
                5,
            ),
            (true, vec![], "\nHTTP 401\n", 6),
            (true, b"0123456789".to_vec(), "\nHTTP 200\n", 9),
        ] {
            let e = curl_result(u, 9, ok, out, err).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), code, "{err}: {e:#}");
            assert!(e.to_string().contains(u), "{e}");
        }
    }

    fn spec(mode: SandboxMode) -> WorkerSpec {
        WorkerSpec::for_tests(mode)
    }

    #[tokio::test]
    async fn client_args_never_ambient() {
        let w = Worker::prepare(&spec(SandboxMode::None)).await.unwrap();
        assert_eq!(w.client_args(None), ["--insecure-policy", "--no-creds"]);
        let w = Worker::prepare(&WorkerSpec {
            credentials: vec![Chosen {
                host: "reg.io".into(),
                auth: "dTpw".into(),
                source: "/a.json".into(),
                key: "reg.io".into(),
            }],
            cert_dir: Some("/certs".into()),
            tls_verify: false,
            ..spec(SandboxMode::None)
        })
        .await
        .unwrap();
        // The worker's authfile is a staged, root-only one with just that entry.
        let args = w.client_args(None);
        let staged = PathBuf::from(&args[2]);
        assert_eq!(args[..2], ["--insecure-policy", "--authfile"]);
        assert_eq!(args[3..], ["--cert-dir", "/certs", "--tls-verify=false"]);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&staged).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let content: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&staged).unwrap()).unwrap();
        assert_eq!(
            content,
            serde_json::json!({"auths": {"reg.io": {"auth": "dTpw"}}})
        );
        // Inside a unit, both come from its credentials directory.
        assert_eq!(
            w.client_args(Some("u.service")),
            [
                "--insecure-policy",
                "--authfile",
                "/run/credentials/u.service/auth.json",
                "--cert-dir",
                "/run/credentials/u.service",
                "--tls-verify=false"
            ]
        );
        w.shutdown().await;
    }

    #[tokio::test]
    async fn none_mode_command_is_clean() {
        let w = Worker::prepare(&spec(SandboxMode::None)).await.unwrap();
        let (cfg, unit) = w.proxy_config().unwrap();
        assert_eq!(unit, None);
        let cmd = Command::try_from(cfg).unwrap();
        assert_eq!(cmd.get_program(), "/usr/bin/skopeo");
        let env: Vec<_> = cmd
            .get_envs()
            .map(|(k, _)| k.to_str().unwrap().to_owned())
            .collect();
        assert_eq!(env, ["HOME", "PATH"], "only these reach the worker");
        let home = PathBuf::from(
            cmd.get_envs()
                .find(|(k, _)| *k == "HOME")
                .unwrap()
                .1
                .unwrap(),
        );
        assert_eq!(
            std::fs::read_dir(&home).unwrap().count(),
            0,
            "HOME is empty"
        );
        let args: Vec<_> = cmd.get_args().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(args[0], "--registries-conf", "this pull's, not the host's");
        // The host's policy.json never applies in the worker: root enforces it.
        assert_eq!(
            args[2..],
            [
                "experimental-image-proxy",
                "--no-creds",
                "--insecure-policy"
            ]
        );
        let staging = home.parent().unwrap().to_owned();
        w.shutdown().await;
        assert!(!staging.exists(), "staging removed");
    }

    #[test]
    fn failures_are_classified() {
        let f = worker_failure(
            "inspecting x",
            "time=\"…\" level=fatal msg=\"reading \\\"x\\\": manifest unknown\"\n",
        );
        assert_eq!(f.kind, Kind::NotFound);
        assert_eq!(f.message, "image not found while inspecting x");
        assert_eq!(f.detail.as_deref(), Some("reading \"x\": manifest unknown"));
        // skopeo 1.9.3's `inspect` of a 401 with a bearer challenge and a body
        // that is not JSON: logrus quotes the message, and the body in it.
        let f = worker_failure(
            "inspecting x",
            r#"time="…" level=fatal msg="reading manifest v1 in r/x: errors:\nunauthorized: authentication required\nerror parsing HTTP 401 response body: invalid character 'x' looking for beginning of value: \"x: eof: \\\"y\\\"\\n\"\n""#,
        );
        assert_eq!(f.kind, Kind::Auth, "{:?}", f.detail);
    }

    /// A trust file that cannot be read when the worker is prepared (it
    /// changed after the plan) is a usage error naming it, as in the plan.
    #[tokio::test]
    async fn unreadable_trust_files_are_usage_errors_naming_them() {
        let td = tempfile::tempdir().unwrap();
        let (file, dir) = (td.path().join("ok.pem"), td.path().join("d.crt"));
        std::fs::write(&file, "x").unwrap();
        std::fs::create_dir(&dir).unwrap();
        let trust = |cas: Vec<PathBuf>, client| HostTrust {
            host: "r.example:5000".into(),
            cas,
            client,
            lookaside_only: false,
        };
        for t in [
            trust(vec![file.clone(), dir.clone()], None),
            trust(vec![], Some((dir.clone(), file.clone()))),
            trust(vec![], Some((file.clone(), dir.clone()))),
        ] {
            let mut spec = spec(SandboxMode::None);
            spec.trust = vec![t];
            let e = Worker::prepare(&spec).await.err().unwrap();
            assert_eq!(crate::error::exit_code(&e), 2, "{e:#}");
            assert!(format!("{e:#}").contains(dir.to_str().unwrap()), "{e:#}");
        }
        let e = cert_files(&file).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2, "{e:#}");
    }

    #[test]
    fn cert_dir_files() {
        let td = tempfile::tempdir().unwrap();
        for n in ["ca.crt", "client.cert", "client.key", "README", "auth.json"] {
            std::fs::write(td.path().join(n), "x").unwrap();
        }
        assert_eq!(
            cert_files(td.path()).unwrap(),
            ["ca.crt", "client.cert", "client.key"]
        );
    }
}
