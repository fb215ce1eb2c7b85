//! The pull itself: resolve the manifest, then fetch every missing blob through a
//! proxy session, several in flight, verifying each on root's side.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use containers_image_proxy::{Error as ProxyError, ImageProxy, OpenedImage};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::digest::{self, Sha256Digest};
use crate::error::{Failure, Kind, Retry, fail, failure};
use crate::manifest::{self, Descriptor, MANIFEST_MAX, Parsed};
use crate::plan::Plan;
use crate::plan::imgref::ImageRef;
use crate::progress::{BlobState, Progress};
use crate::report::{CredentialReport, Report};
use crate::sandbox::{Worker, open_blob, proxy_failure};
use crate::signature::Verdict;
use crate::store::Layout;
use crate::verify;

/// GetBlob requests kept in flight. skopeo serves one request at a time, but
/// transfers overlap once several pipes are open; 4 was fastest in the lab.
/// Under `--max-rate`, fewer at low caps ([`crate::rate::in_flight`]).
const IN_FLIGHT: usize = 4;
/// The size blob pipes are widened to without a cap; see [`widen_pipes`].
const PIPE_SIZE: usize = 1 << 20;
/// The most one read from a blob pipe asks for.
const READ_BUF: usize = 1 << 20;

/// A manifest that root has hashed and checked, ready to fetch.
#[derive(Debug)]
struct Resolved {
    /// The digest of what the registry served for the reference: the
    /// manifest, or the index it was chosen from.
    toplevel: Sha256Digest,
    /// The digest of the registry's manifest, which the worker opens.
    source_digest: Sha256Digest,
    /// The digest and bytes of the manifest as the layout stores it: the
    /// registry's own, or its OCI form when the registry served Docker schema2.
    digest: Sha256Digest,
    raw: Vec<u8>,
    manifest: manifest::Manifest,
}

impl Resolved {
    fn new(
        toplevel: Sha256Digest,
        source_digest: Sha256Digest,
        raw: Vec<u8>,
        parsed: Parsed,
    ) -> anyhow::Result<Self> {
        let (manifest, raw) = match parsed {
            Parsed::Manifest(m, manifest::OCI_MANIFEST) => (m, raw),
            Parsed::Manifest(..) => {
                let oci = manifest::docker_to_oci(&raw)?;
                match manifest::parse(&oci)? {
                    Parsed::Manifest(m, _) => (m, oci),
                    Parsed::Index(_) => unreachable!("conversion keeps a manifest a manifest"),
                }
            }
            Parsed::Index(_) => {
                return fail(Kind::Verify, "an index inside an index is not supported");
            }
        };
        Ok(Self {
            toplevel,
            source_digest,
            digest: digest::sha256(&raw),
            raw,
            manifest,
        })
    }
}

/// Where the pull's layout is, asked for once the signature policy has accepted
/// the image (so a rejected image leaves nothing behind, not even a directory):
/// it may make the directory there and then (`--dest ostree:`'s staging).
pub type LayoutDir<'a> = &'a (dyn Fn() -> anyhow::Result<std::path::PathBuf> + Sync);

/// Pull as the plan says. SIGINT and SIGTERM stop it: the worker's units are
/// stopped, and the layout is left as it was.
pub async fn pull(plan: &Plan, progress: &Progress) -> anyhow::Result<Report> {
    pull_into(plan, progress, &|| Ok(plan.dest_dir.clone())).await
}

/// [`pull`] into the layout that `dir` names when it is first needed.
pub async fn pull_into(
    plan: &Plan,
    progress: &Progress,
    dir: LayoutDir<'_>,
) -> anyhow::Result<Report> {
    let start = Instant::now();
    // As kubelet does: when the registry refuses a credential, the next one,
    // each try with a worker and an authfile of its own.
    let tries = crate::plan::auth::attempts(&plan.credentials).max(1);
    let mut n = 0;
    let (result, report) = loop {
        let mut spec = plan.worker.clone();
        spec.credentials = crate::plan::auth::attempt(&plan.credentials, n);
        let worker = Worker::prepare(&spec).await?;
        let result = tokio::select! {
            r = pull_with(&worker, plan, dir, progress) => r,
            kind = cancelled() => Err(Failure::new(kind, "interrupted: the pull was stopped").into()),
        };
        let report = worker.report().await;
        worker.shutdown().await;
        let refused = matches!(&result, Err(e) if failure(e).is_some_and(|f| f.kind == Kind::Auth));
        if refused && n + 1 < tries {
            tracing::warn!("credential {} of {tries} refused, trying the next", n + 1);
            n += 1;
            continue;
        }
        break match result {
            Err(e) if refused && n > 0 => (
                Err(e.context(format!("all {tries} credentials were refused"))),
                report,
            ),
            r => (r, report),
        };
    };
    let (resolved, fetched, signature) = result?;
    let total = resolved.manifest.layers.len();
    let fetched_layers = fetched
        .iter()
        .filter(|d| d.digest != resolved.manifest.config.digest)
        .count();
    Ok(Report {
        image: plan.image.to_string(),
        manifest_digest: resolved.digest,
        source_digest: resolved.source_digest,
        platform: plan.platform.to_string(),
        dest: plan.dest_dir.display().to_string(),
        tag: plan.tag.clone(),
        layers_total: total,
        layers_fetched: fetched_layers,
        layers_reused: total - fetched_layers,
        bytes_fetched: fetched.iter().map(|d| d.size).sum(),
        elapsed_ms: start.elapsed().as_millis(),
        max_rate: plan.max_rate,
        signature,
        credentials: CredentialReport::of_attempt(&plan.credentials, n),
        worker: report,
        ostree: None,
    })
}

/// How far a pull has come; a retry goes on from there, with a new worker
/// session, and fetches only what is still missing: verified blobs are kept.
#[derive(Debug, Default)]
enum Stage {
    /// Nothing established yet.
    #[default]
    Start,
    /// Root has hashed and checked the manifest.
    Resolved(Resolved),
    /// The signature policy accepted it; nothing is written before that.
    Accepted {
        resolved: Resolved,
        signature: Verdict,
    },
    /// The layout is locked, and what it was missing is known.
    Ready(Ready),
}

/// A pull that may fetch: the verified manifest, the policy's verdict, the
/// locked layout, and the blobs that were missing at first.
#[derive(Debug)]
struct Ready {
    resolved: Resolved,
    signature: Verdict,
    layout: Arc<Layout>,
    missing: Vec<Descriptor>,
}

/// The pull, retried on transient errors with exponential backoff and jitter,
/// within the overall `--timeout`. Each retry starts a new worker session and
/// goes on from the [`Stage`] the last one reached.
async fn pull_with(
    worker: &Worker,
    plan: &Plan,
    dir: LayoutDir<'_>,
    progress: &Progress,
) -> anyhow::Result<(Resolved, Vec<Descriptor>, Verdict)> {
    let mut stage = Stage::Start;
    let last_error = std::sync::Mutex::new(None::<String>);
    let retrying = async {
        let mut stalls = 0;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let e = match try_pull(worker, plan, dir, &mut stage, progress).await {
                Ok(ready) => return Ok(ready),
                Err(e) => e,
            };
            let detail = failure(&e)
                .and_then(|f| f.detail.as_deref())
                .unwrap_or_default();
            *last_error.lock().unwrap() = Some(crate::error::one_line(&format!("{e:#}: {detail}")));
            let retry = failure(&e).map_or(Retry::Never, |f| f.retry);
            stalls += u32::from(retry == Retry::Stalled);
            if retry == Retry::Never || attempt >= MAX_ATTEMPTS || stalls >= MAX_STALLS {
                return Err(e);
            }
            let delay = backoff(attempt);
            tracing::warn!(
                "attempt {attempt} failed, retrying in {:.1}s: {e:#}",
                delay.as_secs_f64()
            );
            // A stalled skopeo ends only when its unit is stopped.
            worker.stop_units().await;
            tokio::time::sleep(delay).await;
        }
    };
    let ready = match tokio::time::timeout(plan.retry.timeout, retrying).await {
        Ok(r) => r?,
        Err(_) => {
            // Say what kept failing, not only that time ran out.
            let timeout = plan.retry.timeout.as_secs();
            let f = Failure::new(
                Kind::Network,
                format!("timed out: the pull took longer than --timeout {timeout}s"),
            );
            return Err(match last_error.into_inner().unwrap() {
                Some(last) => f.with_detail(format!("last attempt: {last}")),
                None => f,
            }
            .into());
        }
    };
    Ok((ready.resolved, ready.missing, ready.signature))
}

/// Attempts at most, and stalls at most, before a transient error is final.
const MAX_ATTEMPTS: u32 = 5;
const MAX_STALLS: u32 = 2;
/// How a stall's message starts.
const STALLED: &str = "stalled:";

/// 1 s, 2 s, 4 s, 8 s … capped at 30 s, each times a random factor in [0.5, 1.5).
fn backoff(attempt: u32) -> std::time::Duration {
    backoff_with(attempt, crate::sandbox::rand_u32())
}

/// [`backoff`] with the random factor drawn from `random`.
fn backoff_with(attempt: u32, random: u32) -> std::time::Duration {
    let base = 1000u64
        .saturating_mul(1 << attempt.saturating_sub(1).min(5))
        .min(30_000);
    let jitter = 0.5 + f64::from(random) / f64::from(u32::MAX);
    std::time::Duration::from_millis((base as f64 * jitter) as u64)
}

/// One attempt: take `stage` as far as it goes, and fetch. On an error,
/// `stage` keeps what was established.
async fn try_pull(
    worker: &Worker,
    plan: &Plan,
    dir: LayoutDir<'_>,
    stage: &mut Stage,
    progress: &Progress,
) -> anyhow::Result<Ready> {
    loop {
        *stage = match std::mem::take(stage) {
            Stage::Start => Stage::Resolved(resolve_in_time(worker, plan, progress).await?),
            // Before the layout is touched: a rejected image leaves no trace.
            Stage::Resolved(resolved) => match check_signature(worker, plan, &resolved).await {
                Ok(signature) => Stage::Accepted {
                    resolved,
                    signature,
                },
                Err(e) => {
                    *stage = Stage::Resolved(resolved);
                    return Err(e);
                }
            },
            Stage::Accepted {
                resolved,
                signature,
            } => match open_layout(plan, dir, &resolved).await {
                Ok((layout, missing)) => Stage::Ready(Ready {
                    resolved,
                    signature,
                    layout,
                    missing,
                }),
                Err(e) => {
                    *stage = Stage::Accepted {
                        resolved,
                        signature,
                    };
                    return Err(e);
                }
            },
            Stage::Ready(ready) => {
                let r = &ready.resolved;
                let fetched =
                    fetch_into(worker, plan, (r, &ready.layout), &ready.missing, progress);
                match fetched.await {
                    Ok(()) => return Ok(ready),
                    Err(e) => {
                        *stage = Stage::Ready(ready);
                        return Err(e);
                    }
                }
            }
        };
    }
}

/// [`resolve`], or a stall when the registry sends no manifest in time.
async fn resolve_in_time(
    worker: &Worker,
    plan: &Plan,
    progress: &Progress,
) -> anyhow::Result<Resolved> {
    progress.steps("resolving the manifest", 0, 3);
    let stall = plan.retry.stall;
    match tokio::time::timeout(stall, resolve(worker, plan)).await {
        Ok(r) => r,
        Err(_) => Err(Failure::new(
            Kind::Network,
            format!(
                "{STALLED} no manifest from the registry in {}s",
                stall.as_secs()
            ),
        )
        .with_retry(Retry::Stalled)
        .into()),
    }
}

/// The signature policy's verdict on the manifest the registry served (and
/// the index it came from).
async fn check_signature(
    worker: &Worker,
    plan: &Plan,
    resolved: &Resolved,
) -> anyhow::Result<Verdict> {
    let mut digests = vec![resolved.toplevel.clone()];
    if resolved.source_digest != resolved.toplevel {
        digests.push(resolved.source_digest.clone());
    }
    crate::signature::check(worker, plan, &digests).await
}

/// Lock the layout, and list the blobs it lacks. What an ostree destination
/// has already (store::ostree::held) need not come: it is neither fetched
/// nor staged.
async fn open_layout(
    plan: &Plan,
    dir: LayoutDir<'_>,
    resolved: &Resolved,
) -> anyhow::Result<(Arc<Layout>, Vec<Descriptor>)> {
    let path = dir()?;
    let layout = tokio::task::spawn_blocking(move || Layout::open_locked(&path)).await??;
    let held = match &plan.ostree {
        Some(o) => {
            crate::store::ostree::held(o, &plan.image, &resolved.digest, &resolved.manifest)?
        }
        None => Default::default(),
    };
    let mut missing: Vec<Descriptor> = Vec::new();
    for d in resolved.manifest.blobs() {
        if !layout.has_blob(d)?
            && !held.contains(&d.digest)
            && !missing.iter().any(|t| t.digest == d.digest)
        {
            missing.push(d.clone());
        }
    }
    Ok((Arc::new(layout), missing))
}

/// Resolves on SIGINT or SIGTERM, with the matching exit code.
pub(crate) async fn cancelled() -> Kind {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => Kind::Interrupted,
        _ = term.recv() => Kind::Terminated,
    }
}

/// Fetch the registry's manifest bytes, check them against a pinned digest, and
/// pick the platform from an index.
async fn resolve(worker: &Worker, plan: &Plan) -> anyhow::Result<Resolved> {
    let raw = worker.inspect_raw(&plan.image, MANIFEST_MAX).await?;
    let digest = digest::sha256(&raw);
    if let Some(pinned) = &plan.image.digest
        && *pinned != digest
    {
        return fail(
            Kind::Verify,
            format!("manifest digest {digest} does not match the pinned {pinned}"),
        );
    }
    match manifest::parse(&raw)? {
        Parsed::Index(index) => {
            let d = manifest::select(&index, &plan.platform)?;
            tracing::info!("{}: chose {} for {}", plan.image, d.digest, plan.platform);
            let raw = worker
                .inspect_raw(&plan.image.with_digest(&d.digest), MANIFEST_MAX)
                .await?;
            verify::check_bytes("manifest", &raw, &d.digest, d.size)?;
            let parsed = manifest::parse(&raw)?;
            Resolved::new(digest, d.digest.clone(), raw, parsed)
        }
        parsed => Resolved::new(digest.clone(), digest, raw, parsed),
    }
}

/// Fetch what the layout lacks of `missing` (the blobs it lacked when the pull
/// began), then publish: manifest blob, then the tag.
async fn fetch_into(
    worker: &Worker,
    plan: &Plan,
    (r, layout): (&Resolved, &Arc<Layout>),
    missing: &[Descriptor],
    progress: &Progress,
) -> anyhow::Result<()> {
    let mut todo: Vec<Descriptor> = Vec::new();
    for d in missing {
        if !layout.has_blob(d)? {
            todo.push(d.clone());
        }
    }
    let mut blobs: Vec<&Descriptor> = Vec::new();
    for d in r.manifest.blobs() {
        if !blobs.iter().any(|b| b.digest == d.digest) {
            blobs.push(d);
        }
    }
    let tally = Tally {
        blobs,
        missing,
        todo,
    };
    progress.steps("fetching blobs", 1, 3);
    progress.blobs(&tally.states(|_| 0), false);
    if !tally.todo.is_empty() {
        let image = plan.image.with_digest(&r.source_digest);
        fetch_blobs(worker, plan, &image, layout, &tally, progress).await?;
    }
    progress.blobs(&tally.states(|_| u64::MAX), true);
    // The consumer will parse the config: it must be able to. (It is not in
    // the layout only when an ostree destination has this very image already.)
    if layout.has_blob(&r.manifest.config)? {
        let config = layout.read_blob(&r.manifest.config.digest)?;
        manifest::check_config(&config)
            .with_context(|| format!("Checking image config {}", r.manifest.config.digest))?;
    }
    progress.steps("publishing", 2, 3);
    layout.write_blob("manifest", &r.digest, &r.raw)?;
    layout.set_tag(
        &plan.tag,
        manifest::OCI_MANIFEST,
        &r.digest,
        r.raw.len() as u64,
    )
}

/// One proxy session for all missing blobs of one image.
async fn fetch_blobs(
    worker: &Worker,
    plan: &Plan,
    image: &ImageRef,
    layout: &Arc<Layout>,
    tally: &Tally<'_>,
    progress: &Progress,
) -> anyhow::Result<()> {
    let todo = &tally.todo;
    let stall = plan.retry.stall;
    let watchdog = Watchdog::new(todo.len(), plan.max_rate);
    let session = worker.proxy_session()?.timed();
    let session = session.run(image, async |proxy, img| {
        transfer(proxy, img, layout, todo, &watchdog).await
    });
    tokio::select! {
        r = session => r,
        never = report_bytes(progress, &watchdog, tally) => match never {},
        () = watchdog.stalled(stall) => Err(Failure::new(
            Kind::Network,
            format!("{STALLED} no data from the registry for {}s (--stall-timeout)", stall.as_secs()),
        )
        .with_retry(Retry::Stalled)
        .into()),
    }
}

/// Where every blob stands, ten times a second, while anyone is told.
async fn report_bytes(
    progress: &Progress,
    flow: &Watchdog,
    tally: &Tally<'_>,
) -> std::convert::Infallible {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if !progress.enabled() {
            return std::future::pending().await;
        }
        let read = |i: usize| flow.read[i].load(std::sync::atomic::Ordering::Relaxed);
        progress.blobs(&tally.states(read), false);
    }
}

/// The blobs of the image as progress shows them: those not `missing` when
/// the pull began are reused, those missing but not in `todo` came with an
/// earlier attempt, and those in `todo` are as far as they have been read.
#[derive(Debug)]
struct Tally<'a> {
    blobs: Vec<&'a Descriptor>,
    missing: &'a [Descriptor],
    todo: Vec<Descriptor>,
}

impl Tally<'_> {
    /// `read(i)`: the bytes of `todo[i]` read so far.
    fn states(&self, read: impl Fn(usize) -> u64) -> Vec<BlobState> {
        self.blobs
            .iter()
            .map(|d| BlobState {
                digest: d.digest.clone(),
                what: what(d),
                bytes: match self.todo.iter().position(|t| t.digest == d.digest) {
                    Some(i) => read(i).min(d.size),
                    None => d.size,
                },
                total: d.size,
                cached: !self.missing.iter().any(|m| m.digest == d.digest),
            })
            .collect()
    }
}

/// What a blob is, for messages and progress.
fn what(d: &Descriptor) -> &'static str {
    if d.media_type.contains("config") {
        "config"
    } else {
        "layer"
    }
}

/// When a byte last arrived. skopeo has no timeout of its own: a registry that
/// stops sending mid-blob leaves it blocked for good (seen for over 240 s).
#[derive(Debug, Clone)]
struct Watchdog {
    start: Instant,
    last_ms: Arc<std::sync::atomic::AtomicU64>,
    /// Bytes read so far of each blob being fetched, for progress.
    read: Arc<Vec<std::sync::atomic::AtomicU64>>,
    /// `--max-rate`: one bucket for every blob of the pull.
    pacer: Option<crate::rate::Pacer>,
}

impl Watchdog {
    fn new(blobs: usize, max_rate: Option<u64>) -> Self {
        Self {
            start: Instant::now(),
            last_ms: Arc::default(),
            read: Arc::new((0..blobs).map(|_| Default::default()).collect()),
            pacer: max_rate.map(crate::rate::Pacer::new),
        }
    }

    /// How many blobs to keep open at once.
    fn in_flight(&self) -> usize {
        self.pacer
            .as_ref()
            .map_or(IN_FLIGHT, |p| crate::rate::in_flight(p.rate(), IN_FLIGHT))
    }

    /// Wait until a blob may be opened: under a cap, once the bucket is out
    /// of debt, then charge the buffers the registry fills when it opens.
    async fn open(&self, size: u64) {
        if let Some(p) = &self.pacer {
            p.ready().await;
            p.opened(size);
        }
    }

    /// The most one read from a blob pipe asks for.
    fn chunk(&self) -> usize {
        self.pacer.as_ref().map_or(READ_BUF, |p| p.chunk(READ_BUF))
    }

    /// `n` bytes of blob `i` (of `size`) were just read: under a cap, wait
    /// until the pull may read more, and until it is blob `i`'s turn.
    async fn paced(&self, i: usize, size: u64, n: usize) {
        if let Some(p) = &self.pacer {
            let read = self.read[i].load(std::sync::atomic::Ordering::Relaxed);
            let n = n as u64;
            p.read(i, size, read.saturating_sub(n), n).await;
        }
    }

    /// `n` more bytes of blob `i` (0 at its end).
    fn kick(&self, i: usize, n: usize) {
        if let Some(p) = self.pacer.as_ref().filter(|_| n == 0) {
            p.done(i);
        }
        self.read[i].fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        let now = self.start.elapsed().as_millis() as u64;
        self.last_ms
            .store(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// Resolves once no byte has arrived for `stall`. Time that the cap
    /// holds the readers back is ours, not the registry's: a paced pull is
    /// never taken for a stalled one.
    async fn stalled(&self, stall: Duration) {
        loop {
            let last =
                Duration::from_millis(self.last_ms.load(std::sync::atomic::Ordering::Relaxed));
            let mut quiet = self.start.elapsed().saturating_sub(last);
            if let Some(p) = &self.pacer {
                quiet = quiet.min(p.free_at().elapsed());
            }
            if quiet >= stall {
                return;
            }
            tokio::time::sleep(stall - quiet).await;
        }
    }
}

/// Keep `IN_FLIGHT` blobs streaming (under a cap as many as it allows, each
/// opened once it allows: [`Watchdog::open`]). Below protocol 0.2.8, skopeo
/// answers one request at a time and a FinishPipe returns only when its blob
/// is complete, so requests go out in a strict order, GetBlob A B C D,
/// FinishPipe A, GetBlob E, FinishPipe B, …: while FinishPipe waits for the
/// oldest blob, the younger ones keep flowing. From 0.2.8 on, `GetRawBlob` hands over the blob without
/// hashing it in the worker (root hashes it anyway) and reports the worker's
/// side on an error pipe of its own, with a typed `retryable` code. Each pipe is
/// read, hashed and written by a task of its own, so that the hashing of
/// several blobs spreads over the cores.
async fn transfer(
    proxy: &ImageProxy,
    img: &OpenedImage,
    layout: &Arc<Layout>,
    todo: &[Descriptor],
    watchdog: &Watchdog,
) -> anyhow::Result<()> {
    let mut pending = todo.iter().enumerate();
    let mut window = VecDeque::new();
    let result = async {
        loop {
            while window.len() < watchdog.in_flight() {
                let Some((i, d)) = pending.next() else { break };
                let what = what(d);
                let doing = format!("fetching {what} {}", d.digest);
                watchdog.open(d.size).await;
                let (reader, finish) = open_blob(proxy, img, d)
                    .await
                    .map_err(|e| proxy_failure(&doing, e))?;
                // Under a cap the kernel's 64 KiB is plenty, and what a
                // wider pipe holds reaches the registry as a burst.
                if watchdog.pacer.is_none() {
                    widen_pipes();
                }
                let reading = Reader(tokio::spawn(consume(
                    reader,
                    Arc::clone(layout),
                    what,
                    d.clone(),
                    (watchdog.clone(), i),
                )));
                window.push_back((doing, finish, reading));
            }
            let Some((doing, finish, mut reading)) = window.pop_front() else {
                break;
            };
            let theirs = finish.await;
            let ours = (&mut reading.0).await.unwrap_or_else(|e| {
                Err(Consumed::Early(anyhow::anyhow!("blob reader failed: {e}")))
            });
            merge_errors(&doing, ours, theirs)?;
        }
        Ok(())
    }
    .await;
    // On an error, stop the other readers: that closes their pipes, so skopeo
    // stops writing, and drops their temp files.
    for (_, _, mut reading) in window {
        reading.0.abort();
        let _ = (&mut reading.0).await;
    }
    result
}

/// A blob reader task, aborted when dropped: a pull that is cancelled (its
/// future dropped) stops reading at once, which closes the pipes.
#[derive(Debug)]
struct Reader(tokio::task::JoinHandle<Result<(), Consumed>>);

impl Drop for Reader {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Merge a blob's two outcomes. When we stopped reading early (too many bytes,
/// a full disk), the worker's complaint about the closed pipe is only a
/// consequence: ours stands. When the stream ended short, the worker's own
/// error (a reset connection, say) explains it better, if it says anything
/// we can classify.
fn merge_errors(
    doing: &str,
    ours: Result<(), Consumed>,
    theirs: Result<(), ProxyError>,
) -> anyhow::Result<()> {
    match (ours, theirs) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(Consumed::Early(e) | Consumed::AtEnd(e)), Ok(()))
        | (Err(Consumed::Early(e)), Err(_)) => Err(e),
        (Ok(()), Err(e)) => Err(proxy_failure(doing, e)),
        (Err(Consumed::AtEnd(ours)), Err(theirs)) => {
            let theirs = proxy_failure(doing, theirs);
            let theirs_kind = failure(&theirs).map(|f| f.kind);
            if theirs_kind.is_some_and(|k| k != Kind::Worker) {
                Err(theirs)
            } else {
                Err(ours)
            }
        }
    }
}

/// How reading a blob pipe failed: before its end (we stopped reading, so the
/// worker saw a broken pipe) or at its end (a short or corrupt blob).
#[derive(Debug)]
enum Consumed {
    Early(anyhow::Error),
    AtEnd(anyhow::Error),
}

/// Stream a blob pipe into a verifying sink. Hashing happens inline: SHA-256
/// with SHA-NI costs less per chunk than a hand-off to another thread. Writes
/// that reach the disk may block for a while under writeback throttling, so
/// they leave the async worker to others (`block_in_place`).
async fn consume(
    mut reader: impl AsyncRead + Unpin,
    layout: Arc<Layout>,
    what: &'static str,
    d: Descriptor,
    (watchdog, i): (Watchdog, usize),
) -> Result<(), Consumed> {
    let mut sink = layout
        .blob_sink(what, &d.digest, d.size)
        .map_err(Consumed::Early)?;
    let mut buf = vec![0u8; watchdog.chunk()];
    loop {
        let n = reader
            .read(&mut buf)
            .await
            .context("Reading blob pipe")
            .map_err(Consumed::AtEnd)?;
        watchdog.kick(i, n);
        if n == 0 {
            return tokio::task::block_in_place(|| sink.commit()).map_err(Consumed::AtEnd);
        }
        let chunk = &buf[..n];
        let written = if sink.would_flush(n) {
            tokio::task::block_in_place(|| sink.write(chunk))
        } else {
            sink.write(chunk)
        };
        written.map_err(Consumed::Early)?;
        watchdog.paced(i, d.size, n).await;
    }
}

/// Blob pipes come from skopeo with the kernel's default 64 KiB. Each read
/// then moves at most that much through tokio's blocking pool, and skopeo's
/// writer parks whenever the pipe is full; a 1 MiB pipe cut a 512 MiB pull from
/// 2.65 s to 2.0 s here. containers-image-proxy does not expose the pipe's fd,
/// so the pipes this process holds are reopened through /proc/self/fd (which
/// reaches the same pipe) and widened there.
fn widen_pipes() {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for fd in fds.flatten() {
        let is_pipe =
            std::fs::read_link(fd.path()).is_ok_and(|t| t.to_string_lossy().starts_with("pipe:"));
        if !is_pipe {
            continue;
        }
        let nonblock = rustix::fs::OFlags::NONBLOCK.bits() as i32;
        if let Ok(pipe) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nonblock)
            .open(fd.path())
            && rustix::pipe::fcntl_getpipe_size(&pipe).is_ok_and(|size| size < PIPE_SIZE)
        {
            let _ = rustix::pipe::fcntl_setpipe_size(&pipe, PIPE_SIZE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(media_type: &str, c: char, size: u64) -> Descriptor {
        Descriptor {
            media_type: media_type.into(),
            digest: Sha256Digest::parse(&format!("sha256:{}", c.to_string().repeat(64))).unwrap(),
            size,
            urls: vec![],
            platform: None,
            annotations: Default::default(),
        }
    }

    const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

    /// Our reading error stands when we stopped early; at the end, the
    /// worker's explains more if it can be classified.
    #[test]
    fn merge_errors_prefers_the_better_explanation() {
        let ours = |m: &str| anyhow::Error::from(Failure::new(Kind::Verify, m));
        let reset = || ProxyError::Other("connection reset by peer".into());
        let vague = || ProxyError::Other("something odd".into());
        let shown = |r: anyhow::Result<()>| {
            let e = r.unwrap_err();
            (
                crate::error::exit_code(&e),
                failure(&e).unwrap().message.clone(),
            )
        };
        assert!(merge_errors("x", Ok(()), Ok(())).is_ok());
        for (ours, theirs) in [
            (Consumed::Early(ours("early")), Ok(())),
            (Consumed::Early(ours("early")), Err(reset())),
            (Consumed::AtEnd(ours("at end")), Ok(())),
            (Consumed::AtEnd(ours("at end")), Err(vague())),
        ] {
            let (code, message) = shown(merge_errors("x", Err(ours), theirs));
            assert_eq!(code, 7, "{message}");
            assert!(message == "early" || message == "at end", "{message}");
        }
        assert_eq!(
            shown(merge_errors(
                "fetching x",
                Err(Consumed::AtEnd(ours("at end"))),
                Err(reset())
            )),
            (6, "network error while fetching x".to_owned())
        );
        assert_eq!(
            shown(merge_errors("fetching x", Ok(()), Err(vague()))),
            (8, "worker failed while fetching x".to_owned())
        );
    }

    #[test]
    fn backoff_doubles_to_a_cap_with_jitter() {
        let ms = |attempt, random| backoff_with(attempt, random).as_millis();
        for (attempt, base) in [
            (1, 1000),
            (2, 2000),
            (3, 4000),
            (5, 16_000),
            (6, 30_000),
            (40, 30_000),
        ] {
            assert_eq!(ms(attempt, 0), base / 2, "{attempt}");
            assert_eq!(ms(attempt, u32::MAX), base * 3 / 2, "{attempt}");
        }
        assert_eq!(ms(0, 0), 500);
        for attempt in 1..10 {
            let d = backoff(attempt).as_millis();
            assert!((500..45_000).contains(&d), "{attempt}: {d}");
        }
    }

    #[test]
    fn tally_shows_reused_earlier_and_partial_blobs() {
        let config = desc("application/vnd.oci.image.config.v1+json", 'c', 100);
        let earlier = desc(LAYER, 'e', 10);
        let partial = desc(LAYER, 'b', 10);
        let over = desc(LAYER, 'd', 10);
        let missing = [earlier.clone(), partial.clone(), over.clone()];
        let tally = Tally {
            blobs: vec![&config, &earlier, &partial, &over],
            missing: &missing,
            todo: vec![partial.clone(), over.clone()],
        };
        let got: Vec<_> = tally
            .states(|i| [4, 99][i])
            .into_iter()
            .map(|b| (b.what, b.bytes, b.total, b.cached))
            .collect();
        // (what, bytes, total, cached)
        let want = [
            ("config", 100, 100, true),
            ("layer", 10, 10, false),
            ("layer", 4, 10, false),
            ("layer", 10, 10, false),
        ];
        assert_eq!(got, want);
    }
}
