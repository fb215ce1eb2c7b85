//! Root's side of the ostree import, which runs in a program of its own,
//! `hostpull-ostree-import` ([`crate::confined::import`]; the protocol is
//! [`crate::wire::import`]): finding that program ([`program`]), starting it
//! and following it.
//!
//! It starts with the pull ([`start`], one process a pull) and first prints
//! what the repository holds ([`Holdings`]), a JSON line, beside the worker,
//! so that hostpull itself never loads libostree and the libraries it brings
//! (their cost on every start is measured there too). Then it waits for the rest of its
//! request on stdin ([`Running::begin`]), sent as soon as the signature
//! policy has accepted the image and its verified manifest is staged; if
//! stdin ends first (the pull failed, or stopped), it exits having done
//! nothing. It imports beside the fetch: the rest of its stdin is the pull's
//! control pipe ([`crate::wire::import::Control`]), and the proxy serves each
//! blob once the fetch has verified and staged it. It references nothing
//! until the pull says `done`; if the pipe ends without that, it fails and
//! removes the layer refs it made. A failure is its one `error:` line, which
//! becomes the pull's.
#![cfg_attr(not(feature = "ostree"), allow(dead_code))]

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;

use crate::digest::Sha256Digest;
use crate::wire::import::{DONE, Holdings, Imported, PROGRAM, Start};

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

/// Start `program` as the pull starts, with what is known then (`start`),
/// so that it reads what the repository holds beside the worker
/// ([`Running::holdings`]) and is ready when the image is accepted
/// ([`Running::begin`]). If it fails once begun, before the pull is done (a
/// repository it cannot write, an image that is not an ostree container),
/// `failed` is notified, so that the fetch can stop at once. Before that, its
/// failure is the answer to [`Running::holdings`]: the signature policy's
/// verdict comes first.
pub fn start(
    program: &Path,
    start: &Start,
    failed: std::sync::Arc<tokio::sync::Notify>,
) -> anyhow::Result<Running> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(start.args())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = crate::host::unbatched(|| cmd.spawn())
        .with_context(|| format!("running {}", program.display()))?;
    let control = child.stdin.take();
    let (told, holdings) = tokio::sync::oneshot::channel();
    let state = std::sync::Arc::new(std::sync::Mutex::new(State::default()));
    let shared = (state.clone(), failed.clone());
    let ended = tokio::spawn(async move {
        let out = collect(child, told).await;
        let (state, failed) = shared;
        let mut s = state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.failed = !out.as_ref().is_ok_and(|o| o.status.success());
        s.report(&failed);
        out
    });
    Ok(Running {
        digest: None,
        control,
        holdings: Some(holdings),
        state,
        failed,
        ended,
    })
}

/// The import's output until it exits: its first line, what the repository
/// holds, goes to `told` as soon as it is read (or, if it ends without one,
/// why); the rest is the output, for its final answer.
async fn collect(
    mut child: tokio::process::Child,
    told: tokio::sync::oneshot::Sender<anyhow::Result<Holdings>>,
) -> std::io::Result<std::process::Output> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(std::io::Error::other("the import's output is not a pipe"));
    };
    let errors = tokio::spawn(async move {
        let mut b = Vec::new();
        stderr.read_to_end(&mut b).await.map(|_| b)
    });
    let mut stdout = tokio::io::BufReader::new(stdout);
    let mut first = Vec::new();
    stdout.read_until(b'\n', &mut first).await?;
    let mut told = Some(told);
    if first.ends_with(b"\n")
        && let Some(t) = told.take()
    {
        let held = serde_json::from_slice(&first)
            .with_context(|| format!("reading what {PROGRAM} found in the repository"));
        let _ = t.send(held);
    }
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).await?;
    let status = child.wait().await?;
    let stderr = errors.await.map_err(std::io::Error::other)??;
    let out = std::process::Output {
        status,
        stdout: rest,
        stderr,
    };
    if let Some(t) = told {
        let why = failure(&out).and_then(|()| {
            anyhow::bail!("{PROGRAM} ended without saying what the repository holds")
        });
        let _ = t.send(why);
    }
    Ok(out)
}

/// An import, from the pull's start ([`start`]) to its end. Dropped, it
/// kills the import.
#[derive(Debug)]
pub struct Running {
    /// The manifest it imports, once begun.
    digest: Option<Sha256Digest>,
    control: Option<tokio::process::ChildStdin>,
    /// Its first answer, until taken.
    holdings: Option<tokio::sync::oneshot::Receiver<anyhow::Result<Holdings>>>,
    /// Where it stands, shared with the task that waits for it.
    state: std::sync::Arc<std::sync::Mutex<State>>,
    /// Notified when it fails once begun ([`State::report`]).
    failed: std::sync::Arc<tokio::sync::Notify>,
    /// The task that owns the process and collects its output.
    ended: tokio::task::JoinHandle<std::io::Result<std::process::Output>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        // The task owns the child, which is killed when the task is dropped.
        self.ended.abort();
    }
}

/// Where an import stands. Its failure stops the fetch only once it has its
/// whole request, and only if the pull has not given it up; whether it was
/// reported so decides, under the one lock, whose error the pull's is.
#[derive(Debug, Default)]
struct State {
    /// It has its whole request ([`Running::begin`]).
    begun: bool,
    /// It has exited, and not successfully.
    failed: bool,
    /// The pull gave it up ([`Running::abandon`]): its failure says nothing new.
    abandoned: bool,
    /// Its failure was reported, which is why the pull stopped.
    reported: bool,
}

impl State {
    /// Notify `failed` if the import has failed once begun, and not yet said so.
    fn report(&mut self, failed: &tokio::sync::Notify) {
        if self.failed && self.begun && !self.abandoned && !self.reported {
            self.reported = true;
            failed.notify_one();
        }
    }
}

impl Running {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The manifest it imports, once begun.
    pub fn digest(&self) -> Option<&Sha256Digest> {
        self.digest.as_ref()
    }

    /// What the repository holds of the image, as the import read it when
    /// the pull started; once (none the second time).
    pub fn holdings(
        &mut self,
    ) -> Option<impl std::future::Future<Output = anyhow::Result<Holdings>> + use<>> {
        let asked = self.holdings.take()?;
        Some(
            async move { (asked.await).unwrap_or_else(|_| anyhow::bail!("{PROGRAM} was stopped")) },
        )
    }

    /// The image is accepted: send the import the rest of its request, the
    /// staging layout `layout:tag` with the verified manifest `digest` staged.
    /// An import that has failed already has closed its end; its own error
    /// is the pull's ([`crate::store::Destination::import_failed`]).
    pub async fn begin(&mut self, layout: &Path, tag: &str, digest: &Sha256Digest) {
        use tokio::io::AsyncWriteExt;
        self.digest = Some(digest.clone());
        // One that failed before it began is reported now.
        {
            let mut s = self.lock();
            s.begun = true;
            s.report(&self.failed);
        }
        if let Some(c) = &mut self.control {
            let _ = c.write_all(&Start::rest(layout, tag, digest)).await;
        }
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
            let _ = c.write_all(DONE).await;
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
        let failed_first = {
            let mut s = self.lock();
            s.abandoned = true;
            s.reported
        };
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

    /// An import's failure stops the fetch once it is begun, whichever comes
    /// first, and never after the pull gave it up; whether it did is what
    /// `abandon` answers (CI once saw "the import failed" in place of the
    /// import's own error, when its task was slow to end after notifying).
    #[test]
    fn a_failure_is_reported_once_begun_and_not_after_it_was_given_up() {
        use std::future::Future;
        type Step = fn(&mut State);
        let fail: Step = |s| s.failed = true;
        let begin: Step = |s| s.begun = true;
        let abandon: Step = |s| s.abandoned = true;
        for (steps, reported) in [
            (vec![fail], false),
            (vec![begin], false),
            (vec![fail, begin], true),
            (vec![begin, fail], true),
            (vec![begin, abandon, fail], false),
            (vec![fail, abandon, begin], false),
        ] {
            let (mut s, told) = (State::default(), tokio::sync::Notify::new());
            for step in &steps {
                step(&mut s);
                s.report(&told);
            }
            assert_eq!(s.reported, reported, "{s:?}");
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let woke = std::pin::pin!(told.notified()).poll(&mut cx).is_ready();
            assert_eq!(woke, reported, "{s:?}");
        }
    }
}
