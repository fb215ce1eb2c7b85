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
//! request's first argument), which starts without libostree, so faster
//! than this program (docs/benchmarks.md, "hostpull without libostree").
//! Neither fetches nor checks anything that root has not checked already.
//!
//! It starts with the pull ([`start`], one process a pull) and first prints
//! what the repository holds ([`Holdings`]), a JSON line, beside the worker,
//! so that hostpull itself never loads libostree and the libraries it brings
//! (their cost on every start is measured there too). Then it waits for the rest of its
//! request on stdin ([`Running::begin`]), sent as soon as the signature
//! policy has accepted the image and its verified manifest is staged; if
//! stdin ends first (the pull failed, or stopped), it exits having done
//! nothing. It imports beside the fetch: the rest of its stdin is the pull's
//! control pipe ([`crate::store::proxy::Control`]), and the proxy serves each
//! blob once the fetch has verified and staged it. It references nothing
//! until the pull says `done`; if the pipe ends without that, it fails and
//! removes the layer refs it made. A failure is its one `error:` line, which
//! becomes the pull's.
#![cfg_attr(not(feature = "ostree"), allow(dead_code))]

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;

use crate::digest::Sha256Digest;
use crate::plan::imgref::{ImageRef, OstreeDest};
use crate::store::ostree::{Holdings, Imported, Request};

/// The program's name, in `PREFIX/libexec` or, in a build tree, beside hostpull.
pub const PROGRAM: &str = "hostpull-ostree-import";

/// What the import is started with, as the pull starts: its command line,
/// `PROXY REPO IMAGE [REF]`. The rest of its [`Request`] comes on its stdin
/// once the image is accepted ([`Running::begin`]).
#[derive(Debug, Clone)]
pub struct Start {
    /// The layout proxy's program ([`Request::proxy`]).
    pub proxy: PathBuf,
    /// The repository, and the ref to point at the import.
    pub dest: OstreeDest,
    /// The registry image.
    pub image: ImageRef,
}

/// The most bytes of one field of the request's rest: a path.
const FIELD_MAX: usize = 4096;
const USAGE: &str =
    "usage: hostpull-ostree-import PROXY REPO IMAGE [REF], then LAYOUT TAG DIGEST on stdin";

impl Start {
    fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            self.proxy.clone().into(),
            self.dest.repo.clone().into(),
            self.image.to_string().into(),
        ];
        a.extend(self.dest.ostree_ref.clone().map(OsString::from));
        a
    }

    fn parse(args: Vec<OsString>) -> anyhow::Result<Self> {
        let (proxy, repo, image, ostree_ref) = match args.as_slice() {
            [p, r, i] => (p, r, i, None),
            [p, r, i, f] => (p, r, i, Some(text(f)?)),
            _ => anyhow::bail!("{USAGE}"),
        };
        // Root gives its own program's path (`current_exe()`).
        anyhow::ensure!(
            Path::new(proxy).is_absolute(),
            "the layout proxy is not an absolute path: {}; {USAGE}",
            proxy.to_string_lossy()
        );
        Ok(Self {
            proxy: proxy.into(),
            dest: OstreeDest {
                repo: repo.into(),
                ostree_ref,
            },
            image: ImageRef::parse(&text(image)?)?,
        })
    }

    /// The rest of the request, as it crosses the import's stdin: the staging
    /// layout, its tag and the manifest's digest, each ended by a NUL (which
    /// no path holds).
    fn rest(layout: &Path, tag: &str, digest: &Sha256Digest) -> Vec<u8> {
        let mut b = Vec::new();
        for f in [
            layout.as_os_str().as_bytes(),
            tag.as_bytes(),
            digest.as_str().as_bytes(),
        ] {
            b.extend_from_slice(f);
            b.push(0);
        }
        b
    }

    /// The whole request, its rest read from `input` a byte at a time, so
    /// that nothing after it (the pull's control pipe) is read; none if
    /// `input` ends first (the pull gave up before it began the import).
    fn request(self, input: impl std::os::fd::AsFd) -> anyhow::Result<Option<Request>> {
        let mut fields: Vec<Vec<u8>> = vec![Vec::new()];
        let mut byte = [0u8];
        while fields.len() < 4 {
            let n = rustix::io::retry_on_intr(|| rustix::io::read(&input, &mut byte))
                .context("reading the request")?;
            let first = fields.len() == 1;
            let field = fields.last_mut().context("reading the request")?;
            match (n, byte[0]) {
                (0, _) if first && field.is_empty() => return Ok(None),
                (0, _) => anyhow::bail!("the request ended early; {USAGE}"),
                (_, 0) => fields.push(Vec::new()),
                (_, b) if field.len() < FIELD_MAX => field.push(b),
                _ => anyhow::bail!("a field of the request is over {FIELD_MAX} bytes"),
            }
        }
        let [layout, tag, digest, _] =
            <[Vec<u8>; 4]>::try_from(fields).map_err(|_| anyhow::anyhow!("reading the request"))?;
        let utf8 = |b: Vec<u8>| String::from_utf8(b).context("not UTF-8");
        Ok(Some(Request {
            proxy: self.proxy,
            dest: self.dest,
            layout: OsString::from_vec(layout).into(),
            tag: utf8(tag)?,
            image: self.image,
            digest: Sha256Digest::parse(&utf8(digest)?).context("not a sha256 digest")?,
        }))
    }
}

/// A command-line argument that must be text.
fn text(a: &OsString) -> anyhow::Result<String> {
    a.to_str()
        .map(str::to_owned)
        .with_context(|| format!("not UTF-8: {}", a.to_string_lossy()))
}

/// The program's `main`. It answers first what the repository holds, as one
/// JSON line, then reads the rest of its request from stdin and imports.
/// Returns the exit code: 2 for a wrong command line or request, 1 for a
/// failure, 0 when the pull ended before the import began.
pub fn main(args: Vec<OsString>) -> i32 {
    let start = match Start::parse(args) {
        Ok(s) => s,
        Err(e) => return usage(format_args!("{e:#}")),
    };
    let held = crate::store::ostree::holdings_here(&start.dest.repo, &start.image);
    if let code @ 1.. = answer(held) {
        return code;
    }
    let req = match start.request(std::io::stdin()) {
        Ok(Some(r)) => r,
        Ok(None) => return 0,
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

/// `done` as a JSON line on stdout and exit 0, or its error as one `error:`
/// line and exit 1.
fn answer<T: serde::Serialize>(done: anyhow::Result<T>) -> i32 {
    let printed = done.and_then(|d| {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer(&mut out, &d)?;
        out.write_all(b"\n")?;
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

    #[test]
    fn the_request_crosses_the_command_line_then_stdin() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let digest = Sha256Digest::parse(&digest).unwrap();
        // A path need not be UTF-8, nor free of newlines.
        let layout = PathBuf::from(OsString::from_vec(
            b"/ostree/repo/tmp/h\xff\nx/layout".to_vec(),
        ));
        for r in [None, Some("exampleos/x86_64/stable".to_owned())] {
            let start = Start {
                proxy: "/usr/bin/hostpull".into(),
                dest: OstreeDest {
                    repo: "/ostree/repo".into(),
                    ostree_ref: r,
                },
                image: ImageRef::parse("quay.io/fedora/fcos:stable").unwrap(),
            };
            let (rx, mut tx) = std::io::pipe().unwrap();
            let rest = Start::rest(&layout, "latest", &digest);
            tx.write_all(&rest).unwrap();
            tx.write_all(b"done\n").unwrap();
            let back = Start::parse(start.args())
                .unwrap()
                .request(&rx)
                .unwrap()
                .unwrap();
            let want = Request {
                proxy: start.proxy.clone(),
                dest: start.dest.clone(),
                layout: layout.clone(),
                tag: "latest".into(),
                image: start.image.clone(),
                digest: digest.clone(),
            };
            assert_eq!(format!("{back:?}"), format!("{want:?}"));
            // Not a byte more: what follows is the pull's control pipe.
            let mut after = [0u8; 5];
            std::io::Read::read_exact(&mut &rx, &mut after).unwrap();
            assert_eq!(&after, b"done\n");
            // The pull ended before it began the import: nothing to do.
            drop(tx);
            assert!(
                Start::parse(start.args())
                    .unwrap()
                    .request(&rx)
                    .unwrap()
                    .is_none()
            );
            // Ended inside the request, or not a digest: an error.
            for cut in [1, rest.len() - 1] {
                let (rx, mut tx) = std::io::pipe().unwrap();
                tx.write_all(&rest[..cut]).unwrap();
                drop(tx);
                assert!(
                    Start::parse(start.args()).unwrap().request(&rx).is_err(),
                    "{cut}"
                );
            }
            let (rx, mut tx) = std::io::pipe().unwrap();
            tx.write_all(b"/l\0t\0sha256:x\0").unwrap();
            assert!(Start::parse(start.args()).unwrap().request(&rx).is_err());
        }
        // A field without its end is refused once it is longer than a path.
        let (rx, mut tx) = std::io::pipe().unwrap();
        tx.write_all(&vec![b'x'; FIELD_MAX + 1]).unwrap();
        let start = Start::parse(["/p", "/r", "quay.io/a:b"].map(OsString::from).to_vec()).unwrap();
        assert!(start.request(&rx).is_err());
        for bad in [
            &["/p", "/r", "quay.io/a:b", "ref", "extra"][..],
            &["/p", "/r", "Not An Image"],
            &["hostpull", "/r", "quay.io/a:b"],
            &["/p", "/r"],
            &[],
        ] {
            let args = bad.iter().map(OsString::from).collect();
            assert!(Start::parse(args).is_err(), "{bad:?}");
        }
    }
}
