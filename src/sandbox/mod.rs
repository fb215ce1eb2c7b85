//! Turns a plan into a running worker: `skopeo`, as an image proxy or for one
//! `inspect --raw`, started with exactly what the plan allows and nothing ambient.
//!
//! [`WorkerSpec`] is a value; [`Worker::command`] turns it into a `Command` that
//! tests can assert without spawning.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::Context;
use containers_image_proxy::ImageProxyConfig;
use tokio::io::AsyncReadExt;

use crate::error::{Failure, Kind, classify_worker_text, fail};
use crate::plan::imgref::ImageRef;

/// How the worker is isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// `systemd` when systemd runs the host; otherwise `none`, with a warning.
    Auto,
    /// A transient systemd unit with a dynamic user.
    Systemd,
    /// A direct child process of hostpull, for hosts without systemd.
    None,
}

/// The test hook that replaces the worker binary (`skopeo`) with another program.
pub const SKOPEO_ENV: &str = "HOSTPULL_SKOPEO";

/// Everything the worker may use for one pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSpec {
    pub mode: SandboxMode,
    /// The skopeo binary: `skopeo` on PATH unless `HOSTPULL_SKOPEO` names another.
    pub skopeo: PathBuf,
    /// The authfile the worker gets; `None` means `--no-creds`.
    pub authfile: Option<PathBuf>,
    /// One CA directory for every host (skopeo's `--cert-dir`).
    pub cert_dir: Option<PathBuf>,
    pub tls_verify: bool,
}

impl WorkerSpec {
    pub fn skopeo_from_env() -> PathBuf {
        std::env::var_os(SKOPEO_ENV).map_or_else(|| "skopeo".into(), PathBuf::from)
    }

    /// The options skopeo's image commands share, after the subcommand. Never
    /// empty on credentials: without an authfile, `--no-creds` keeps skopeo from
    /// falling back to ambient files.
    fn client_args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        match &self.authfile {
            Some(f) => {
                a.push("--authfile".into());
                a.push(f.into());
            }
            None => a.push("--no-creds".into()),
        }
        if let Some(d) = &self.cert_dir {
            a.push("--cert-dir".into());
            a.push(d.into());
        }
        if !self.tls_verify {
            a.push("--tls-verify=false".into());
        }
        a
    }
}

/// A prepared worker environment; dropping it removes what it staged.
#[derive(Debug)]
pub struct Worker {
    spec: WorkerSpec,
    /// An empty private HOME, so skopeo reads no per-user configuration.
    home: tempfile::TempDir,
}

impl Worker {
    pub fn prepare(spec: &WorkerSpec) -> anyhow::Result<Self> {
        if spec.mode == SandboxMode::Systemd {
            return fail(
                Kind::Worker,
                "the systemd sandbox is not available yet; use --sandbox none",
            );
        }
        let home = tempfile::Builder::new()
            .prefix("hostpull-home-")
            .tempdir()
            .context("Creating the worker's HOME")?;
        Ok(Self {
            spec: spec.clone(),
            home,
        })
    }

    /// The command up to and including the skopeo binary: a direct child with a
    /// clean environment and a parent-death signal.
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.spec.skopeo);
        c.env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", self.home.path())
            .current_dir(self.home.path());
        pdeathsig(&mut c);
        c
    }

    /// The configuration for a `containers-image-proxy` session on this worker.
    pub fn proxy_config(&self) -> ImageProxyConfig {
        let mut cfg = ImageProxyConfig::default();
        cfg.authfile = self.spec.authfile.clone();
        cfg.auth_anonymous = self.spec.authfile.is_none();
        cfg.certificate_directory = self.spec.cert_dir.clone();
        cfg.insecure_skip_tls_verification = Some(!self.spec.tls_verify);
        cfg.skopeo_cmd = Some(self.command());
        cfg
    }

    /// `skopeo inspect --raw`: the registry's manifest bytes exactly as served, so
    /// that root can hash them. The proxy of skopeo 1.9.3 converts Docker manifests
    /// to OCI and resolves indexes itself, which would hide both from root.
    pub async fn inspect_raw(&self, image: &ImageRef, limit: u64) -> anyhow::Result<Vec<u8>> {
        let mut c = self.command();
        c.arg("inspect")
            .arg("--raw")
            .args(self.spec.client_args())
            .arg(image.to_transport());
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut c = tokio::process::Command::from(c);
        c.kill_on_drop(true);
        let mut child = c.spawn().map_err(|e| {
            Failure::new(
                Kind::Worker,
                format!("starting worker {}: {e}", self.spec.skopeo.display()),
            )
        })?;
        let mut stdout = child.stdout.take().expect("piped").take(limit + 1);
        let mut stderr = child.stderr.take().expect("piped");
        let mut out = Vec::new();
        let mut err = Vec::new();
        let (r1, r2) = tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
        r1.and(r2).context("Reading worker output")?;
        if out.len() as u64 > limit {
            return fail(
                Kind::Verify,
                format!("manifest of {image} is larger than {} MiB", limit >> 20),
            );
        }
        let status = child.wait().await?;
        if !status.success() {
            return Err(worker_failure(
                &format!("inspecting {image}"),
                &String::from_utf8_lossy(&err),
            )
            .into());
        }
        Ok(out)
    }
}

/// A failure reported by skopeo, classified by its text, with the raw text kept
/// as the second line.
pub fn worker_failure(doing: &str, text: &str) -> Failure {
    let kind = classify_worker_text(text);
    let what = match kind {
        Kind::Auth => "authentication refused",
        Kind::NotFound => "image not found",
        Kind::Tls => "TLS or certificate trust failed",
        Kind::Network => "network error",
        Kind::Verify => "verification failed",
        _ => "worker failed",
    };
    Failure::new(kind, format!("{what} while {doing}")).with_detail(skopeo_message(text))
}

/// skopeo logs a fatal error as `time="…" level=fatal msg="…"`; keep the message.
fn skopeo_message(text: &str) -> String {
    let Some((_, rest)) = text.rsplit_once("level=fatal msg=\"") else {
        return text.trim().to_owned();
    };
    let msg = rest.trim_end().strip_suffix('"').unwrap_or(rest);
    msg.replace("\\\"", "\"")
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

    fn spec() -> WorkerSpec {
        WorkerSpec {
            mode: SandboxMode::None,
            skopeo: "/usr/bin/skopeo".into(),
            authfile: None,
            cert_dir: None,
            tls_verify: true,
        }
    }

    #[test]
    fn client_args_never_ambient() {
        assert_eq!(spec().client_args(), ["--no-creds"]);
        let s = WorkerSpec {
            authfile: Some("/a.json".into()),
            cert_dir: Some("/certs".into()),
            tls_verify: false,
            ..spec()
        };
        assert_eq!(
            s.client_args(),
            [
                "--authfile",
                "/a.json",
                "--cert-dir",
                "/certs",
                "--tls-verify=false"
            ]
        );
    }

    #[test]
    fn none_mode_command_is_clean() {
        let w = Worker::prepare(&spec()).unwrap();
        let c = w.command();
        assert_eq!(c.get_program(), "/usr/bin/skopeo");
        let env: Vec<_> = c
            .get_envs()
            .map(|(k, _)| k.to_str().unwrap().to_owned())
            .collect();
        assert_eq!(env, ["HOME", "PATH"], "only these reach the worker");
        let home = c.get_envs().find(|(k, _)| *k == "HOME").unwrap().1.unwrap();
        assert_eq!(std::fs::read_dir(home).unwrap().count(), 0, "HOME is empty");
        let cmd = Command::try_from(w.proxy_config()).unwrap();
        let args: Vec<_> = cmd.get_args().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(args, ["experimental-image-proxy", "--no-creds"]);
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
    }
}
