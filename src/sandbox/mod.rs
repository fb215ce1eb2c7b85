//! Turns a plan into a running worker: `skopeo`, as an image proxy or for one
//! `inspect --raw`, started with exactly what the plan allows and nothing ambient.
//!
//! The plan's [`WorkerSpec`] says what the worker may use; [`Worker::prepare`]
//! stages it for its isolation, [`unit`](mod@unit) turns it into a `systemd-run` command
//! that tests can assert without spawning, and a [`ProxySession`] runs one
//! image proxy session, watched as the unit it is.

mod args;
mod children;
pub(crate) mod classify;
mod curl;
pub mod monitor;
mod prepare;
mod session;
mod skopeo;
pub mod staging;
pub mod unit;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use tokio::io::AsyncReadExt;

use crate::error::{Failure, Kind, fail};
use crate::imgref::ImageRef;
use crate::options::SandboxMode;
use crate::plan::auth::Chosen;
use crate::plan::worker::{Isolation, WorkerSpec};
use children::Children;
use monitor::{Observed, Systemd};
pub use session::{BlobData, BlobPipe, open_blob, proxy_failure};
pub use skopeo::{naming_proxy, worker_failure};
use skopeo::{skopeo_version, transient_if_network};
use staging::Staging;

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

/// What the final report says about the worker.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerReport {
    /// The isolation the worker ran under.
    pub sandbox: SandboxMode,
    /// The last transient unit, under systemd.
    pub unit: Option<String>,
    /// The uid the worker ran as.
    pub uid: Option<u32>,
    /// The unit's peak memory, where the cgroup tells it.
    pub memory_peak_bytes: Option<u64>,
    /// The worker's own start: from starting its unit to the agent's hello,
    /// plus from asking it for the proxy to the proxy's `Initialize` reply;
    /// none when the pull fetched no blob (the proxy never started).
    pub startup_ms: Option<u64>,
    /// The worker's `skopeo --version`, e.g. `1.22.0`.
    pub skopeo: Option<String>,
    /// The proxy protocol of its `Initialize` reply, e.g. `0.2.8`.
    pub protocol: Option<String>,
    /// How blobs came: `GetRawBlob` (0.2.8 on) or `GetBlob`.
    pub blobs_via: Option<&'static str>,
    /// The blobs came through the image the proxy opened beside the
    /// manifest's request ([`Worker::open_beside`]), not one opened after it.
    pub opened_beside: bool,
    /// The manifests asked for with `skopeo inspect --raw`; not those the
    /// opened image gave ([`Worker::opened_manifest`]).
    pub manifests_inspected: u32,
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

/// How a worker command ended.
#[derive(Debug)]
struct Output {
    /// Its exit code (systemd-run's `--wait` passes the service's on); none
    /// when a signal ended it, or when its stdout passed the limit and it was
    /// not waited for.
    code: Option<i32>,
    /// At most the limit plus one byte.
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Output {
    fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// A prepared worker environment for one pull. [`Worker::finish`] stops its
/// units and removes its staging directory.
#[derive(Debug)]
pub struct Worker {
    spec: WorkerSpec,
    /// This try's credentials, one per host (`plan::auth::attempt`); none
    /// means `--no-creds`. The worker gets an authfile with exactly these.
    credentials: Vec<Chosen>,
    /// `<orchestrator pid>-<random>`: names the staging dir and the units.
    id: String,
    staging: Option<Staging>,
    /// What its isolation needs to start each worker.
    mode: Mode,
    /// What its workers have done so far.
    ledger: Mutex<Ledger>,
    /// `skopeo --version`, asked while the pull runs.
    version: tokio::task::JoinHandle<Option<String>>,
    /// The one worker that serves the pull, once started.
    agent: tokio::sync::Mutex<Option<Arc<session::Agent>>>,
}

/// What a pull's workers have done so far, kept beside them rather than
/// returned by each: the pull's tasks share the worker, a stop may come while
/// a session runs, and a session cut short (a stall, a signal) returns
/// nothing, yet its unit must still be stopped and what it used reported.
#[derive(Debug, Default)]
struct Ledger {
    /// The next worker's number: it names the unit and its certs.d tree.
    next: u32,
    /// The units started and not stopped yet.
    running: Vec<String>,
    /// The last unit watched, as its watch ended.
    observed: Option<Observed>,
    /// What the timed proxy session said about itself.
    session: Session,
    /// A session took the image opened beside the manifest.
    opened_beside: bool,
    /// `inspect --raw` requests made.
    inspected: u32,
}

/// A worker's isolation, with what each mode staged for it.
#[derive(Debug)]
enum Mode {
    /// Each worker a transient unit of this systemd.
    Systemd {
        systemd: Systemd,
        /// What every unit gets from the staging directory.
        mounts: unit::Mounts,
    },
    /// `--sandbox none`: each worker a direct child, with files of the
    /// staging directory.
    None {
        /// The worker's HOME: empty and private.
        home: PathBuf,
        /// The image host's staged CA directory, as `--cert-dir`.
        host_cert_dir: Option<PathBuf>,
        /// The staged least-privilege authfile.
        authfile: Option<PathBuf>,
        /// The staged registries.conf.
        registries: PathBuf,
        /// The workers started so far.
        children: Arc<Children>,
    },
}

impl Worker {
    /// Stage what `spec` allows for its isolation and make ready to start
    /// workers; nothing runs yet.
    pub async fn prepare(spec: &WorkerSpec, credentials: Vec<Chosen>) -> anyhow::Result<Self> {
        let isolation = spec.isolation;
        let id = unit::run_id();
        let version = tokio::spawn(skopeo_version(
            spec.skopeo.clone(),
            spec.version_cache.clone(),
        ));
        let (staging, mode) = match isolation {
            Isolation::Systemd => {
                let systemd = Systemd::connect().await.map_err(|e| {
                    Failure::new(Kind::Worker, "cannot reach systemd on the system bus")
                        .with_detail(format!("{e:#}"))
                })?;
                systemd.stop_leftovers().await?;
                Staging::sweep(Path::new(staging::RUN_DIR), "");
                let staging = Staging::create(Path::new(staging::RUN_DIR), &id)?;
                let mounts = prepare::systemd(spec, &credentials, &staging);
                (
                    staging,
                    mounts.map(|mounts| Mode::Systemd { systemd, mounts }),
                )
            }
            Isolation::None => {
                Staging::sweep(&std::env::temp_dir(), "hostpull-");
                let staging = Staging::create(&std::env::temp_dir(), &format!("hostpull-{id}"))?;
                let mode = prepare::plain(spec, &credentials, &staging);
                (staging, mode)
            }
        };
        // A half-staged directory may hold secrets already.
        let mode = match mode {
            Ok(m) => m,
            Err(e) => {
                staging.remove();
                return Err(e);
            }
        };
        Ok(Self {
            spec: spec.clone(),
            credentials,
            id,
            staging: Some(staging),
            mode,
            ledger: Mutex::default(),
            version,
            agent: Default::default(),
        })
    }

    /// The command up to and including `program`, isolated as skopeo is;
    /// `also` is a program it runs in turn, which its unit must see too.
    fn launch_program(&self, program: &Path, also: Option<&Path>) -> anyhow::Result<Launch> {
        match &self.mode {
            Mode::Systemd { mounts, .. } => {
                let n = {
                    let mut ledger = self.ledger();
                    ledger.next += 1;
                    ledger.next - 1
                };
                let unit = unit::unit_name(&self.id, n);
                let mut mounts = mounts.clone();
                if let Some(tree) = self.stage_certs_d(n, &unit)? {
                    mounts.binds.push((tree, "/etc/containers/certs.d".into()));
                }
                self.ledger().running.push(unit.clone());
                let programs: Vec<&Path> = std::iter::once(program).chain(also).collect();
                let cmd = unit::systemd_run(&unit, &self.spec, &mounts, &programs, sched_policy());
                Ok(Launch {
                    cmd,
                    unit: Some(unit),
                    program: program.into(),
                })
            }
            Mode::None { home, children, .. } => {
                // A direct child with a clean environment and a parent-death signal.
                let mut c = Command::new(program);
                c.env_clear()
                    .env(
                        "PATH",
                        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    )
                    .env("HOME", home)
                    .current_dir(home);
                // If hostpull dies, the worker gets SIGTERM.
                crate::host::die_with_parent(&mut c, rustix::process::Signal::TERM);
                children
                    .watch(&mut c)
                    .context("starting the worker's pidfd thread")?;
                Ok(Launch {
                    cmd: c,
                    unit: None,
                    program: program.into(),
                })
            }
        }
    }

    /// Run `fut`, which drives the worker running as `unit`, and watch the unit
    /// meanwhile. A worker that died for memory becomes a clear error.
    async fn observe<T>(
        &self,
        unit: Option<&str>,
        fut: impl std::future::Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        let (Mode::Systemd { systemd, .. }, Some(unit)) = (&self.mode, unit) else {
            return fut.await;
        };
        let (r, mut seen) = systemd.watch(unit, fut).await;
        {
            // What an earlier watch of the same unit saw stands: a short one
            // (a session through the image opened beside the manifest) may
            // end before its first look at the unit's process.
            let mut ledger = self.ledger();
            if let Some(old) = ledger.observed.as_ref().filter(|o| o.unit == seen.unit) {
                seen.uid = seen.uid.or(old.uid);
                seen.memory_peak_bytes = seen.memory_peak_bytes.max(old.memory_peak_bytes);
                seen.oom_kills = seen.oom_kills.max(old.oom_kills);
            }
            ledger.observed = Some(seen.clone());
        }
        let Err(e) = r else { return r };
        let limits = &self.spec.limits;
        let oom = || {
            fail(
                Kind::Worker,
                format!(
                    "worker killed: out of memory (MemoryMax={})",
                    crate::plan::worker::size_text(limits.memory_max)
                ),
            )
        };
        // The kernel counted a kill for memory in the unit: that is the cause,
        // whatever the unit's end (the agent waits for root to look, see
        // agent::LINGER, and its cgroup goes with it).
        if seen.oom_kills > 0 {
            return oom();
        }
        // Did the worker die under us? Then that, not its last words, is the error.
        let exit = match systemd.exit_state(unit, Duration::from_secs(1)).await {
            Ok(Some(exit)) => exit,
            _ => return Err(e),
        };
        if seen.out_of_memory(&exit, limits.memory_max) {
            return oom();
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
        let agent = self.agent().await?;
        self.ledger().inspected += 1;
        let unit = agent.unit.as_deref();
        let mut args = self.registries_args(unit);
        args.extend(skopeo::inspect_raw_args(&self.spec));
        args.extend(
            self.client_args(unit)
                .iter()
                .map(|a| a.to_string_lossy().into_owned()),
        );
        args.push(image.to_transport());
        let out = match self.observe(unit, agent.run(args, limit)).await {
            Ok(out) => out,
            Err(e) => {
                self.give_up(agent).await;
                return Err(e);
            }
        };
        if out.stdout.len() as u64 > limit {
            return fail(
                Kind::Verify,
                format!("manifest of {image} is larger than {} MiB", limit >> 20),
            );
        }
        let doing = format!("inspecting {image}");
        skopeo::inspected(
            &doing,
            out.success(),
            &out.stderr,
            &self.spec,
            &self.credentials,
        )?;
        Ok(out.stdout)
    }

    /// Run a worker command to its end, watched: `check` turns its [`Output`]
    /// into the result, inside the watch, so that a unit that failed to start
    /// is reported as such.
    async fn run<T>(
        &self,
        launch: Launch,
        limit: u64,
        check: impl FnOnce(Output) -> anyhow::Result<T>,
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
            r1.and(r2).context("reading worker output")?;
            let code = if out.len() as u64 > limit {
                None
            } else {
                child.wait().await?.code()
            };
            check(Output {
                code,
                stdout: out,
                stderr: err,
            })
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
    fn record_session(&self, took: Duration, proxy: &containers_image_proxy::ImageProxy) {
        self.ledger().session = Session {
            startup: Some(took),
            protocol: Some(proxy.protocol_version().to_string()),
            raw_blobs: proxy.supports_get_raw_blob(),
        };
    }

    /// The ledger; a task that panicked holding it left nothing half-written
    /// that matters more than a report.
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stop the workers, remove the staging directory, and say what the
    /// final report says about this pull's workers.
    pub async fn finish(mut self) -> WorkerReport {
        self.close_agent().await;
        self.stop_units().await;
        if let Some(s) = self.staging.take() {
            s.remove();
        }
        let Ledger {
            observed,
            session,
            opened_beside,
            inspected,
            ..
        } = std::mem::take(&mut *self.ledger());
        let skopeo = (&mut self.version).await.ok().flatten();
        let (unit, uid, memory_peak_bytes) = match observed {
            Some(o) => (Some(o.unit), o.uid, o.memory_peak_bytes),
            None => (
                None,
                matches!(self.mode, Mode::None { .. }).then(|| rustix::process::getuid().as_raw()),
                None,
            ),
        };
        WorkerReport {
            sandbox: self.spec.isolation.mode(),
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
            opened_beside,
            manifests_inspected: inspected,
        }
    }

    /// Stop every worker this pull started that still runs: its units (killing
    /// `systemd-run` does not stop them), or without systemd, its child skopeo
    /// processes. A skopeo blocked on a stalled registry ends no other way.
    pub async fn stop_units(&self) {
        self.drop_agent().await;
        match &self.mode {
            Mode::Systemd { systemd, .. } => {
                let units = std::mem::take(&mut self.ledger().running);
                for unit in units {
                    if let Err(e) = systemd.stop(&unit, STOP_TIMEOUT).await {
                        tracing::warn!("stopping {unit}: {e:#}");
                    }
                }
            }
            Mode::None { children, .. } => children.kill(),
        }
    }
}

impl Drop for Worker {
    /// A worker dropped without `finish` (a panic) still removes its secrets.
    fn drop(&mut self) {
        if let Some(s) = self.staging.take() {
            s.remove();
        }
    }
}

pub(crate) fn rand_u32() -> u32 {
    let mut b = [0u8; 4];
    // getrandom(2) cannot fail for 4 bytes once the pool is initialized.
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    u32::from_ne_bytes(b)
}

/// This thread's scheduling policy as systemd names it, if a unit must be told
/// it to run as a child of this thread would: a pull runs SCHED_BATCH
/// (`host::batch_scheduling`), or SCHED_IDLE where the caller chose that. A
/// worker unit started by PID 1 would otherwise run SCHED_OTHER and preempt
/// root's readers on every wakeup (bench/sandbox.sh: about 0.1 CPU-s per
/// 512 MiB). Realtime policies are not passed on (`RestrictRealtime=yes`).
#[allow(unsafe_code)]
pub(crate) fn sched_policy() -> Option<&'static str> {
    // SAFETY: sched_getscheduler(0) reads this thread's policy and no memory.
    match unsafe { libc::sched_getscheduler(0) } {
        libc::SCHED_BATCH => Some("batch"),
        libc::SCHED_IDLE => Some("idle"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::auth::Chosen;
    use crate::plan::trust::{HostTrust, Trust};

    fn spec(mode: Isolation) -> WorkerSpec {
        WorkerSpec::for_tests(mode)
    }

    #[tokio::test]
    async fn client_args_never_ambient() {
        let w = Worker::prepare(&spec(Isolation::None), Vec::new())
            .await
            .unwrap();
        assert_eq!(w.client_args(None), ["--insecure-policy", "--no-creds"]);
        let reg = Chosen {
            host: "reg.io".into(),
            auth: "dTpw".into(),
            source: "/a.json".into(),
            key: "reg.io".into(),
        };
        let spec = WorkerSpec {
            trust: Trust::CertDir("/certs".into()),
            tls_verify: false,
            ..spec(Isolation::None)
        };
        let w = Worker::prepare(&spec, vec![reg]).await.unwrap();
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
        w.finish().await;
    }

    #[tokio::test]
    async fn none_mode_command_is_clean() {
        let w = Worker::prepare(&spec(Isolation::None), Vec::new())
            .await
            .unwrap();
        let (config, unit) = w.agent_command(99).unwrap();
        assert_eq!(unit, None);
        let cmd = Command::try_from(config).unwrap();
        // The agent is hostpull itself, which runs the worker's skopeo.
        assert_eq!(cmd.get_program(), std::env::current_exe().unwrap());
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
        assert_eq!(args[..2], [crate::wire::agent::VERB, "/usr/bin/skopeo"]);
        assert_eq!(args[2], "--registries-conf", "this pull's, not the host's");
        // The host's policy.json never applies in the worker: root enforces it.
        assert_eq!(
            args[4..],
            [
                "experimental-image-proxy",
                "--no-creds",
                "--insecure-policy"
            ]
        );
        let staging = home.parent().unwrap().to_owned();
        w.finish().await;
        assert!(!staging.exists(), "staging removed");
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
            let mut spec = spec(Isolation::None);
            spec.trust = Trust::PerHost(vec![t]);
            let e = Worker::prepare(&spec, Vec::new()).await.err().unwrap();
            assert_eq!(crate::error::exit_code(&e), 2, "{e:#}");
            assert!(format!("{e:#}").contains(dir.to_str().unwrap()), "{e:#}");
        }
        let e = prepare::cert_files(&file).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2, "{e:#}");
    }
}
