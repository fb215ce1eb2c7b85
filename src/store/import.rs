//! The ostree import in a process of its own: `hostpull-ostree-import`, a
//! second program, installed as `PREFIX/libexec/hostpull-ostree-import`.
//!
//! libostree labels every object it writes with the image's SELinux label, and
//! an OS image carries labels that only a few domains may give, the binary
//! policy's above all (`policy_config_t`). rpm-ostree and bootc write as an
//! unconfined `install_t`. hostpull keeps those rights out of its own domain:
//! the import runs in this program, which has a file label of its own
//! (`hostpull_ostree_exec_t`), so that executing it moves the process into
//! `hostpull_ostree_t` (selinux/hostpull.te). It gets the verified staging
//! layout and what to import on its command line, imports with ostree-ext
//! ([`crate::store::ostree::import_here`]), and prints what it did as JSON.
//! The image proxy that ostree-ext starts ([`crate::store::proxy`]) is
//! hostpull itself (`hostpull __layout-proxy LAYOUT ...`, its path the
//! request's first argument), which starts without libostree (about 12 ms
//! less than this program). Neither fetches nor checks anything that root
//! has not checked already.
//!
//! As the pull starts, it reads what the repository holds ([`holdings`]),
//! so that hostpull itself never loads libostree and what it brings (about
//! 60 libraries, 20 ms of every start).
//!
//! Started by [`start`] as soon as the signature policy has accepted the
//! image and its verified manifest is staged, it runs beside the fetch: its
//! stdin is the pull's control pipe ([`crate::store::proxy::Control`]), and
//! the proxy serves each blob once the fetch has verified and staged it. It
//! references nothing until the pull says `done`; if the pipe ends without
//! that, it fails and removes the layer refs it made. A failure is its one
//! `error:` line, which becomes the pull's.
#![cfg_attr(not(feature = "ostree"), allow(dead_code))]

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;

use crate::digest::Sha256Digest;
use crate::plan::imgref::{ImageRef, OstreeDest};
use crate::store::ostree::{Holdings, Imported, Request};

/// The program's name, in `PREFIX/libexec` or, in a build tree, beside hostpull.
pub const PROGRAM: &str = "hostpull-ostree-import";
/// Its first argument for what a repository holds of an image ([`holdings`]).
pub const HOLDINGS: &str = "__holdings";

impl Request {
    fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            self.proxy.clone().into(),
            self.dest.repo.clone().into(),
            self.layout.clone().into(),
            self.tag.clone().into(),
            self.image.to_string().into(),
            self.digest.as_str().into(),
        ];
        a.extend(self.dest.ostree_ref.clone().map(OsString::from));
        a
    }

    fn parse(args: Vec<OsString>) -> anyhow::Result<Self> {
        let [proxy, repo, layout, tag, image, digest, rest @ ..] = args.as_slice() else {
            anyhow::bail!("usage: {PROGRAM} PROXY REPO LAYOUT TAG IMAGE DIGEST [REF]");
        };
        let text = |a: &OsString| {
            a.to_str()
                .map(str::to_owned)
                .with_context(|| format!("not UTF-8: {}", a.to_string_lossy()))
        };
        let ostree_ref = match rest {
            [] => None,
            [r] => Some(text(r)?),
            _ => anyhow::bail!("usage: {PROGRAM} PROXY REPO LAYOUT TAG IMAGE DIGEST [REF]"),
        };
        Ok(Self {
            proxy: proxy.into(),
            dest: OstreeDest {
                repo: repo.into(),
                ostree_ref,
            },
            layout: layout.into(),
            tag: text(tag)?,
            image: ImageRef::parse(&text(image)?)?,
            digest: Sha256Digest::parse(&text(digest)?).context("not a sha256 digest")?,
        })
    }
}

/// The program's `main`: the import; with `__holdings` first, what a
/// repository holds. Returns the exit code: 2 for a wrong command line, 1
/// for a failure.
pub fn main(args: Vec<OsString>) -> i32 {
    if args.first().is_some_and(|a| a == HOLDINGS) {
        let [_, repo, image] = args.as_slice() else {
            return usage(format_args!("usage: {PROGRAM} {HOLDINGS} REPO IMAGE"));
        };
        let image = match image.to_str().map(ImageRef::parse) {
            Some(Ok(i)) => i,
            _ => return usage(format_args!("not an image: {}", image.to_string_lossy())),
        };
        return answer(crate::store::ostree::holdings_here(Path::new(repo), &image));
    }
    let req = match Request::parse(args) {
        Ok(r) => r,
        Err(e) => return usage(format_args!("{e:#}")),
    };
    // The pull's control pipe, without close-on-exec: the proxy inherits it.
    let control = rustix::io::dup(std::io::stdin()).context("taking the pull's control pipe");
    answer(control.and_then(|c| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the runtime")?;
        rt.block_on(async {
            let _signals = follow_the_pull_not_signals()?;
            crate::store::ostree::import_here(&req, c).await
        })
    }))
}

/// A wrong command line: its `error:` line, and exit 2.
fn usage(e: std::fmt::Arguments) -> i32 {
    // A closed stderr (hostpull gone) is no reason to panic.
    let _ = writeln!(std::io::stderr(), "error: {PROGRAM}: {e}");
    2
}

/// `done` as JSON on stdout and exit 0, or its error as one `error:` line
/// and exit 1.
fn answer<T: serde::Serialize>(done: anyhow::Result<T>) -> i32 {
    let printed = done.and_then(|d| {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer(&mut out, &d)?;
        Ok(out.flush()?)
    });
    match printed {
        Ok(()) => 0,
        Err(e) => {
            let e = crate::error::one_line(&format!("{e:#}"));
            let _ = writeln!(std::io::stderr(), "error: {e}");
            1
        }
    }
}

/// Ask `program` what the repository of `dest` holds for a pull of `image`
/// ([`Holdings`]): started as the pull starts, so that it runs beside the
/// worker, and awaited once the manifest is verified. It reads nothing from
/// its stdin: a pipe, as the import's (the SELinux policy lets its domain
/// inherit hostpull's pipes, and nothing else).
pub fn holdings(
    program: &Path,
    dest: &OstreeDest,
    image: &ImageRef,
) -> tokio::task::JoinHandle<anyhow::Result<Holdings>> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.arg(HOLDINGS)
        .arg(&dest.repo)
        .arg(image.to_string())
        .stdin(Stdio::piped())
        .kill_on_drop(true);
    let program = program.to_owned();
    tokio::spawn(async move {
        let out = (cmd.output().await).with_context(|| format!("running {}", program.display()))?;
        failure(&out)?;
        warn_of(&out);
        serde_json::from_slice(&out.stdout)
            .with_context(|| format!("reading what {PROGRAM} found in the repository"))
    })
}

/// SIGINT and SIGTERM, caught and left unread: the import stops when the pull
/// says so, on the control pipe, not when a signal meant for the pull reaches
/// it too (Ctrl-C reaches the terminal's whole process group, `systemctl
/// stop` the unit's whole cgroup). The pull then ends the pipe, and the
/// import removes what it made before it exits; killed, it could not. A
/// caught signal is the default again in what this process executes.
fn follow_the_pull_not_signals() -> anyhow::Result<[tokio::signal::unix::Signal; 2]> {
    use tokio::signal::unix::{SignalKind, signal};
    Ok([
        signal(SignalKind::interrupt())?,
        signal(SignalKind::terminate())?,
    ])
}

/// The installed program: `../libexec/` from hostpull's own directory (both
/// under one PREFIX), else beside it (a build tree, `cargo install`).
pub fn program() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("finding hostpull's own program")?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let places = [dir.join("../libexec").join(PROGRAM), dir.join(PROGRAM)];
    match places.iter().find(|p| p.is_file()) {
        Some(p) => Ok(p.clone()),
        None => anyhow::bail!(
            "{PROGRAM}, which imports into ostree, is not installed (looked for {} and {})",
            places[0].display(),
            places[1].display()
        ),
    }
}

/// An import running beside its pull ([`start`]). Dropped, it kills the
/// import.
#[derive(Debug)]
pub struct Running {
    digest: Sha256Digest,
    control: Option<tokio::process::ChildStdin>,
    /// Set when the pull gives the import up: its failure then says nothing new.
    abandoned: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The task that owns the process and collects its output.
    ended: tokio::task::JoinHandle<std::io::Result<std::process::Output>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        // The task owns the child, which is killed when the task is dropped.
        self.ended.abort();
    }
}

/// Start importing `req` by running `program`, with the staging layout still
/// filling: the manifest is staged, the blobs come as the fetch verifies them.
/// If the import fails before the pull is done (an image that is not an ostree
/// container, a repository it cannot write), `failed` is notified, so that
/// the fetch can stop at once.
pub fn start(
    program: &Path,
    req: &Request,
    failed: std::sync::Arc<tokio::sync::Notify>,
) -> anyhow::Result<Running> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(req.args())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = crate::host::unbatched(|| cmd.spawn())
        .with_context(|| format!("running {}", program.display()))?;
    let control = child.stdin.take();
    let abandoned = std::sync::Arc::<std::sync::atomic::AtomicBool>::default();
    let given_up = std::sync::Arc::clone(&abandoned);
    let ended = tokio::spawn(async move {
        let out = child.wait_with_output().await;
        let ok = out.as_ref().is_ok_and(|o| o.status.success());
        if !ok && !given_up.load(std::sync::atomic::Ordering::SeqCst) {
            failed.notify_one();
        }
        out
    });
    Ok(Running {
        digest: req.digest.clone(),
        control,
        abandoned,
        ended,
    })
}

impl Running {
    /// The manifest it imports.
    pub fn digest(&self) -> &Sha256Digest {
        &self.digest
    }

    /// Its output, once it has exited.
    async fn output(&mut self) -> anyhow::Result<std::process::Output> {
        let out = (&mut self.ended)
            .await
            .with_context(|| format!("waiting for {PROGRAM}"))?;
        out.with_context(|| format!("waiting for {PROGRAM}"))
    }

    /// The pull is done, every blob staged: tell the import, and wait for it.
    pub async fn finish(mut self) -> anyhow::Result<Imported> {
        use tokio::io::AsyncWriteExt;
        if let Some(mut c) = self.control.take() {
            // An import that failed already has closed its end: its own
            // error, below, says why.
            let _ = c.write_all(crate::store::proxy::DONE).await;
        }
        let out = self.output().await?;
        failure(&out)?;
        warn_of(&out);
        serde_json::from_slice(&out.stdout)
            .with_context(|| format!("reading what {PROGRAM} imported"))
    }

    /// The pull failed: end the control pipe without `done`, so that the
    /// import stops and removes the layer refs it made, and wait for that.
    /// Returns the import's own error if it had failed before (which is then
    /// why the pull stopped).
    pub async fn abandon(mut self) -> Option<anyhow::Error> {
        self.abandoned
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let failed_first = self.ended.is_finished();
        drop(self.control.take());
        match self.output().await {
            Ok(out) if failed_first => failure(&out).err(),
            Ok(out) => {
                tracing::debug!(
                    "{PROGRAM} after the failed pull: {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(e) => {
                tracing::warn!("{e:#}");
                None
            }
        }
    }
}

/// What the program said on stderr besides its answer, as warnings.
fn warn_of(out: &std::process::Output) {
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        tracing::warn!("{PROGRAM}: {line}");
    }
}

/// The import's error, if it failed: its last `error:` line.
fn failure(out: &std::process::Output) -> anyhow::Result<()> {
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    match stderr.lines().rev().find_map(|l| l.strip_prefix("error: ")) {
        Some(e) => anyhow::bail!("{e}"),
        None => anyhow::bail!("{PROGRAM} failed ({}): {}", out.status, stderr.trim()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_crosses_the_command_line() {
        let digest = format!("sha256:{}", "a".repeat(64));
        for r in [None, Some("exampleos/x86_64/stable".to_owned())] {
            let req = Request {
                proxy: "/usr/bin/hostpull".into(),
                dest: OstreeDest {
                    repo: "/ostree/repo".into(),
                    ostree_ref: r,
                },
                layout: "/ostree/repo/tmp/hostpull-staging-1/layout".into(),
                tag: "latest".into(),
                image: ImageRef::parse("quay.io/fedora/fcos:stable").unwrap(),
                digest: Sha256Digest::parse(&digest).unwrap(),
            };
            let back = Request::parse(req.args()).unwrap();
            assert_eq!(format!("{back:?}"), format!("{req:?}"));
        }
        for bad in [
            &["/p", "/r", "/l", "t", "quay.io/a", "sha256:x"][..],
            &["/r", "/l", "t", "quay.io/a:b", &digest],
            &["/r"],
            &[],
        ] {
            let args = bad.iter().map(OsString::from).collect();
            assert!(Request::parse(args).is_err(), "{bad:?}");
        }
        let mut args: Vec<OsString> = ["/p", "/r", "/l", "t", "quay.io/a:b", &digest, "ref"]
            .iter()
            .map(OsString::from)
            .collect();
        args.push("extra".into());
        assert!(Request::parse(args).is_err());
    }
}
