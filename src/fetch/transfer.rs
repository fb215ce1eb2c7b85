//! Streaming the missing blobs of one image through a proxy session: several
//! in flight, each read, hashed and written by a task of its own, watched for
//! stalls and paced under `--max-rate`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use containers_image_proxy::{Error as ProxyError, ImageProxy, OpenedImage};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::digest::Sha256Digest;
use crate::error::{Kind, failure};
use crate::manifest::{Descriptor, Platform};
use crate::progress::BlobState;
use crate::sandbox::{BlobData, BlobPipe, open_blob, proxy_failure};
use crate::store::{BlobSink, Layout};

/// Blob requests kept in flight. skopeo serves one request at a time, but
/// transfers overlap once several pipes are open. 6, as `skopeo copy`
/// downloads at once: on loopback no slower than 4, and across a link where
/// each connection is slower than the link, its full pulls 13-16% faster
/// (docs/benchmarks.md, "Across a link"). Under `--max-rate`, fewer at low
/// caps ([`crate::rate::in_flight`]).
pub const IN_FLIGHT: usize = 6;
/// The size blob pipes are widened to without a cap; see [`BlobPipe::widen`].
const PIPE_SIZE: usize = 1 << 20;
/// The most one read from a blob pipe asks for.
const READ_BUF: usize = 1 << 20;
/// How long no byte of any blob may come before the oldest is finished
/// anyway ([`first_whole`]).
const FINISH_QUIET: Duration = Duration::from_secs(1);

/// When a byte last arrived. skopeo has no timeout of its own: a registry that
/// stops sending mid-blob leaves it blocked for good (seen for over 240 s).
#[derive(Debug, Clone)]
struct Watchdog {
    start: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Watchdog {
    /// A byte arrived.
    fn kick(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }

    /// How long no byte has arrived.
    fn quiet(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }
}

/// What the blob tasks of one pull share: the [`Watchdog`], the bytes read so
/// far of each blob (for progress), and the `--max-rate` pacer, one bucket
/// for every blob.
#[derive(Debug, Clone)]
pub(super) struct Flow {
    watchdog: Watchdog,
    read: Arc<Vec<AtomicU64>>,
    /// Whether each blob's reader has ended (its [`Job`] is dropped).
    ended: Arc<Vec<std::sync::atomic::AtomicBool>>,
    /// Notified when a blob's reader ends, or may have read it whole.
    read_whole: Arc<tokio::sync::Notify>,
    pacer: Option<crate::rate::Pacer>,
}

impl Flow {
    pub(super) fn new(blobs: usize, max_rate: Option<u64>) -> Self {
        Self {
            watchdog: Watchdog {
                start: Instant::now(),
                last_ms: Arc::default(),
            },
            read: Arc::new((0..blobs).map(|_| Default::default()).collect()),
            ended: Arc::new((0..blobs).map(|_| Default::default()).collect()),
            read_whole: Arc::default(),
            pacer: max_rate.map(crate::rate::Pacer::new),
        }
    }

    /// Bytes read so far of blob `i`.
    pub(super) fn read(&self, i: usize) -> u64 {
        self.read[i].load(Ordering::Relaxed)
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
            let n = n as u64;
            p.read(i, size, self.read(i).saturating_sub(n), n).await;
        }
    }

    /// `n` more bytes of blob `i` (0 at its end).
    fn kick(&self, i: usize, n: usize) {
        if let Some(p) = self.pacer.as_ref().filter(|_| n == 0) {
            p.done(i);
        }
        self.read[i].fetch_add(n as u64, Ordering::Relaxed);
        self.watchdog.kick();
        self.read_whole.notify_waiters();
    }

    /// Resolves once no byte has arrived for `stall`. Time that the cap
    /// holds the readers back is ours, not the registry's: a paced pull is
    /// never taken for a stalled one.
    pub(super) async fn stalled(&self, stall: Duration) {
        loop {
            let mut quiet = self.watchdog.quiet();
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
/// opened once it allows: [`Flow::open`]). Below protocol 0.2.8, skopeo
/// answers one request at a time and a FinishPipe returns only when its blob
/// is complete, so a blob is finished only once its reader has read it all:
/// GetBlob A B C D, then, say, C is read first, FinishPipe C (which waits for
/// nothing), GetBlob E, and so on, the other blobs flowing meanwhile; a large
/// blob never holds a place that a small one has freed. From 0.2.8 on, `GetRawBlob` hands over the blob without
/// hashing it in the worker (root hashes it anyway) and reports the worker's
/// side on an error pipe of its own, with a typed `retryable` code. Each pipe is
/// read, hashed and written by a reader of its own ([`Reader::spawn`]: a
/// thread for a `GetRawBlob` pipe, a runtime task otherwise), so that the
/// hashing of several blobs spreads over the cores.
///
/// While the config is open no other blob is asked for: first in `todo` when
/// it is missing, it comes alone, and the platform it declares is checked
/// ([`super::check_config`]) before any layer is asked for; second (where an
/// index declared the platform), beside one layer only. The platform is given
/// back.
pub(super) async fn transfer(
    proxy: &ImageProxy,
    img: &OpenedImage,
    (layout, want): (&Arc<Layout>, &Platform),
    tally: &Tally<'_>,
    flow: &Flow,
) -> anyhow::Result<Option<Platform>> {
    let mut pending = tally.todo.iter().enumerate();
    let mut window = VecDeque::new();
    let mut declared = None;
    let result = async {
        loop {
            let config_open =
                |w: &VecDeque<Open<'_, _, _>>| w.iter().any(|(_, d, ..)| tally.what(d) == "config");
            while window.len() < flow.in_flight() && !config_open(&window) {
                let Some((i, d)) = pending.next() else { break };
                let what = tally.what(d);
                let doing = format!("fetching {what} {}", d.digest);
                flow.open(d.size).await;
                let blob = open_blob(proxy, img, d)
                    .await
                    .map_err(|e| proxy_failure(&doing, e))?;
                // Under a cap the kernel's 64 KiB is plenty, and what a
                // wider pipe holds reaches the registry as a burst.
                if flow.pacer.is_none() {
                    blob.widen(PIPE_SIZE);
                }
                let BlobPipe { data, finish, .. } = blob;
                let job = Job {
                    layout: Arc::clone(layout),
                    what,
                    d: d.clone(),
                    flow: flow.clone(),
                    i,
                };
                let reading = Reader::spawn(data, job);
                window.push_back((doing, d, i, finish, reading));
            }
            if window.is_empty() {
                break;
            }
            // Whichever blob is read whole first is finished first, so that
            // one large blob does not hold the window while younger ones end.
            // Its FinishPipe then waits for nothing but the pipe's end, which
            // skopeo (below 0.2.8) closes only then.
            let k = first_whole(&window, flow).await;
            let Some((doing, d, _, finish, mut reading)) = window.remove(k) else {
                break;
            };
            let theirs = finish.await;
            let ours = (&mut reading.task).await.unwrap_or_else(|e| {
                Err(Consumed::Early(anyhow::anyhow!("blob reader failed: {e}")))
            });
            merge_errors(&doing, ours, theirs)?;
            if tally.what(d) == "config" {
                declared = super::check_config(layout, d, want)?;
            }
        }
        Ok(())
    }
    .await;
    // On an error, stop the other readers: that closes their pipes, so skopeo
    // stops writing, and drops their temp files.
    for (_, _, _, _, mut reading) in window {
        reading.stop();
        let _ = (&mut reading.task).await;
    }
    result.map(|()| declared)
}

/// The place in `window` of the first blob read whole (its size, or its
/// reader ended), waiting for one; or, once no byte has come for
/// [`FINISH_QUIET`], the oldest: a worker below 0.2.8 closes a pipe only on
/// its FinishPipe, so a blob that came short (or a worker that writes only
/// then) is seen so only once it is asked for.
async fn first_whole<T, F>(window: &VecDeque<Open<'_, T, F>>, flow: &Flow) -> usize {
    loop {
        let read = flow.read_whole.notified();
        tokio::pin!(read);
        read.as_mut().enable();
        let whole = |(_, d, i, ..): &Open<'_, T, F>| {
            flow.read(*i) >= d.size || flow.ended[*i].load(Ordering::Acquire)
        };
        if let Some(k) = window.iter().position(whole) {
            return k;
        }
        let quiet = flow.watchdog.quiet();
        if quiet >= FINISH_QUIET {
            return 0;
        }
        tokio::select! {
            () = read => {}
            () = tokio::time::sleep(FINISH_QUIET - quiet) => {}
        }
    }
}

/// A blob in flight: what fetching it is called, it, its place in the
/// pull, the worker's side of it, and our reader.
type Open<'a, T, F> = (T, &'a Descriptor, usize, F, Reader);

/// A blob reader: a task of the runtime, or a thread reading the pipe
/// itself; stopped when dropped, so that a pull that is cancelled (its
/// future dropped) stops reading at once, which closes the pipes.
#[derive(Debug)]
struct Reader {
    task: tokio::task::JoinHandle<Result<(), Consumed>>,
    /// How a thread is told to stop.
    stop: Option<Arc<Stop>>,
}

impl Reader {
    /// Read a blob on a thread of its own if the pipe itself is ours and the
    /// pull is not paced: a blocking read wakes when the worker writes, where
    /// the runtime's reader of a `File` hands every read to its blocking pool
    /// and back, and copies each chunk once more. With skopeo 1.22, whose
    /// `GetRawBlob` hands over the pipe, that cut both the CPU and the wall
    /// time of a 512 MiB pull (docs/benchmarks.md).
    fn spawn(data: BlobData, job: Job) -> Self {
        match data {
            BlobData::Pipe(pipe) if job.flow.pacer.is_none() => match Stop::new() {
                Ok(stop) => {
                    let stop = Arc::new(stop);
                    let theirs = Arc::clone(&stop);
                    Self {
                        task: tokio::task::spawn_blocking(move || drain(pipe, job, &theirs)),
                        stop: Some(stop),
                    }
                }
                Err(e) => {
                    tracing::debug!("blob reader on the runtime: {e}");
                    Self::on_runtime(BlobData::Pipe(pipe), job)
                }
            },
            data => Self::on_runtime(data, job),
        }
    }

    fn on_runtime(data: BlobData, job: Job) -> Self {
        Self {
            task: tokio::spawn(consume(data.into_reader(), job)),
            stop: None,
        }
    }

    fn stop(&self) {
        self.task.abort();
        if let Some(stop) = &self.stop {
            stop.set();
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Tells a reader thread to stop, even while it waits for the pipe.
#[derive(Debug)]
struct Stop {
    asked: std::sync::atomic::AtomicBool,
    /// An eventfd, readable once asked.
    wake: std::os::fd::OwnedFd,
}

impl Stop {
    fn new() -> std::io::Result<Self> {
        use rustix::event::{EventfdFlags, eventfd};
        Ok(Self {
            asked: Default::default(),
            wake: eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?,
        })
    }

    fn set(&self) {
        self.asked.store(true, Ordering::Relaxed);
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }

    fn asked(&self) -> bool {
        self.asked.load(Ordering::Relaxed)
    }

    /// Wait until `pipe` has bytes (or its end) or a stop is asked.
    fn wait(&self, pipe: &std::fs::File) {
        use rustix::event::{PollFd, PollFlags, poll};
        let mut fds = [
            PollFd::new(pipe, PollFlags::IN),
            PollFd::new(&self.wake, PollFlags::IN),
        ];
        // An error (EINTR) only means another round.
        let _ = poll(&mut fds, None);
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

/// What a blob reader gets: where to store the blob, what it is, and how the
/// pull's blobs flow (it is blob `i` of `flow`).
#[derive(Debug)]
struct Job {
    layout: Arc<Layout>,
    what: &'static str,
    d: Descriptor,
    flow: Flow,
    i: usize,
}

/// The reader is done with the blob, whichever way.
impl Drop for Job {
    fn drop(&mut self) {
        self.flow.ended[self.i].store(true, Ordering::Release);
        self.flow.read_whole.notify_waiters();
    }
}

impl Job {
    /// Where the blob's bytes go.
    fn sink(&self) -> Result<BlobSink<'_>, Consumed> {
        let Self {
            layout, what, d, ..
        } = self;
        layout
            .blob_sink(what, &d.digest, d.size)
            .map_err(Consumed::Early)
    }
}

/// Stream a blob pipe into a verifying sink, read straight into its write
/// buffer ([`crate::store::BlobSink::spare`]). Hashing happens inline: SHA-256
/// with SHA-NI costs less per chunk than a hand-off to another thread. Writes
/// that reach the disk may block for a while under writeback throttling, so
/// they leave the async worker to others (`block_in_place`).
async fn consume(mut reader: impl AsyncRead + Unpin, job: Job) -> Result<(), Consumed> {
    let mut sink = job.sink()?;
    let Job { d, flow, i, .. } = &job;
    loop {
        let spare = sink.spare();
        let len = spare.len().min(flow.chunk());
        let n = reader
            .read(&mut spare[..len])
            .await
            .context("reading blob pipe")
            .map_err(Consumed::AtEnd)?;
        flow.kick(*i, n);
        if n == 0 {
            return tokio::task::block_in_place(|| sink.commit()).map_err(Consumed::AtEnd);
        }
        let written = if sink.would_flush(n) {
            tokio::task::block_in_place(|| sink.filled(n))
        } else {
            sink.filled(n)
        };
        written.map_err(Consumed::Early)?;
        flow.paced(*i, d.size, n).await;
    }
}

/// [`consume`] on a thread of its own ([`Reader::spawn`]): the pipe is read
/// without blocking, and waited for with `stop` beside it.
fn drain(pipe: std::fs::File, job: Job, stop: &Stop) -> Result<(), Consumed> {
    use rustix::io::Errno;
    let mut sink = job.sink()?;
    let Job { flow, i, .. } = &job;
    let nonblocking = rustix::fs::fcntl_getfl(&pipe)
        .and_then(|f| rustix::fs::fcntl_setfl(&pipe, f | rustix::fs::OFlags::NONBLOCK));
    nonblocking.map_err(|e| Consumed::Early(anyhow::Error::new(e).context("reading blob pipe")))?;
    loop {
        if stop.asked() {
            return Err(Consumed::Early(anyhow::anyhow!("blob reader stopped")));
        }
        let n = match rustix::io::read(&pipe, sink.spare()) {
            Ok(n) => n,
            Err(Errno::AGAIN) => {
                stop.wait(&pipe);
                continue;
            }
            Err(Errno::INTR) => continue,
            Err(e) => {
                let e = anyhow::Error::new(e).context("reading blob pipe");
                return Err(Consumed::AtEnd(e));
            }
        };
        flow.kick(*i, n);
        if n == 0 {
            return sink.commit().map_err(Consumed::AtEnd);
        }
        sink.filled(n).map_err(Consumed::Early)?;
    }
}

/// The blobs of the image as progress shows them: those not `missing` when
/// the pull began are reused, those missing but not in `todo` came with an
/// earlier attempt, and those in `todo` are as far as they have been read.
#[derive(Debug)]
pub(super) struct Tally<'a> {
    /// The image's config: the one blob that is no layer.
    pub(super) config: &'a Sha256Digest,
    pub(super) blobs: Vec<&'a Descriptor>,
    pub(super) missing: &'a [Descriptor],
    pub(super) todo: Vec<Descriptor>,
}

impl Tally<'_> {
    /// What a blob is, for messages and progress.
    pub(super) fn what(&self, d: &Descriptor) -> &'static str {
        if d.digest == *self.config {
            "config"
        } else {
            "layer"
        }
    }

    /// `read(i)`: the bytes of `todo[i]` read so far.
    pub(super) fn states(&self, read: impl Fn(usize) -> u64) -> Vec<BlobState> {
        self.blobs
            .iter()
            .map(|d| BlobState {
                digest: d.digest.clone(),
                what: self.what(d),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Failure;

    /// The blob read whole first is finished first, whatever its place: a
    /// large one does not hold the window. One whose reader ended (an error,
    /// or a raw blob's pipe closed) counts as read.
    #[tokio::test]
    async fn the_first_blob_read_whole_is_finished_first() {
        let d = |n: u8, size| Descriptor {
            media_type: String::new(),
            digest: crate::digest::sha256(&[n]),
            size,
            urls: vec![],
            platform: None,
            annotations: Default::default(),
        };
        let (large, small, other) = (d(1, 100), d(2, 10), d(3, 10));
        let flow = Flow::new(3, None);
        let reader = || Reader {
            task: tokio::spawn(std::future::pending()),
            stop: None,
        };
        let window: VecDeque<Open<'_, (), ()>> = [(&large, 0), (&small, 1), (&other, 2)]
            .into_iter()
            .map(|(d, i)| ((), d, i, (), reader()))
            .collect();
        flow.kick(0, 60);
        flow.kick(2, 4);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        {
            let waiting = first_whole(&window, &flow);
            tokio::pin!(waiting);
            assert!(waiting.as_mut().poll(&mut cx).is_pending());
            flow.kick(1, 10);
            assert_eq!(waiting.await, 1);
        }
        let rest: VecDeque<_> = window.into_iter().filter(|o| o.2 != 1).collect();
        let waiting = first_whole(&rest, &flow);
        tokio::pin!(waiting);
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        flow.ended[2].store(true, Ordering::Release);
        flow.read_whole.notify_waiters();
        assert_eq!(
            waiting.await,
            1,
            "the other small one, second in the window"
        );
    }

    /// A pipe that is ours is read by a thread: to its end, and the blob is
    /// stored; or until it is told to stop, even while the worker sends
    /// nothing and keeps the pipe open, and then nothing is stored.
    #[tokio::test]
    async fn a_reader_thread_drains_its_pipe_or_stops() {
        use std::io::Write;
        let td = tempfile::tempdir().unwrap();
        let layout = Arc::new(Layout::open_locked(&td.path().join("layout")).unwrap());
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        let d = Descriptor {
            media_type: String::new(),
            digest: crate::digest::sha256(&bytes),
            size: bytes.len() as u64,
            urls: vec![],
            platform: None,
            annotations: Default::default(),
        };
        let job = |max_rate| Job {
            layout: Arc::clone(&layout),
            what: "layer",
            d: d.clone(),
            flow: Flow::new(1, max_rate),
            i: 0,
        };
        let pipe = || {
            let (read, write) = rustix::pipe::pipe().unwrap();
            (BlobData::Pipe(read.into()), std::fs::File::from(write))
        };
        let within = |r| tokio::time::timeout(Duration::from_secs(10), r);

        let (data, mut write) = pipe();
        let mut reader = Reader::spawn(data, job(None));
        assert!(reader.stop.is_some(), "not on a thread of its own");
        let sender = std::thread::spawn(move || {
            for chunk in bytes.chunks(100_000) {
                write.write_all(chunk).unwrap();
            }
        });
        let read = within(&mut reader.task).await.expect("reader hangs");
        assert!(matches!(read, Ok(Ok(()))), "{read:?}");
        sender.join().unwrap();
        assert!(layout.has_blob(&d).unwrap());
        std::fs::remove_file(td.path().join("layout/blobs/sha256").join(d.digest.hex())).unwrap();

        let (data, mut write) = pipe();
        let mut reader = Reader::spawn(data, job(None));
        write.write_all(b"the first bytes, then nothing").unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        reader.stop();
        let read = within(&mut reader.task)
            .await
            .expect("a stopped reader hangs");
        assert!(matches!(read, Ok(Err(Consumed::Early(_)))), "{read:?}");
        assert!(!layout.has_blob(&d).unwrap());
        drop(write);

        // Paced, or behind containers-image-proxy's reader: on the runtime.
        assert!(Reader::spawn(pipe().0, job(Some(1 << 20))).stop.is_none());
        let behind = BlobData::Reader(Box::new(tokio::io::empty()));
        assert!(Reader::spawn(behind, job(None)).stop.is_none());
    }

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
            (
                6,
                "network error while fetching x: connection reset by peer".to_owned()
            )
        );
        assert_eq!(
            shown(merge_errors("fetching x", Ok(()), Err(vague()))),
            (8, "worker failed while fetching x".to_owned())
        );
    }

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

    #[test]
    fn tally_shows_reused_earlier_and_partial_blobs() {
        // A Docker image's config: its media type does not say "config".
        let config = desc("application/vnd.docker.container.image.v1+json", 'c', 100);
        let earlier = desc(LAYER, 'e', 10);
        let partial = desc(LAYER, 'b', 10);
        let over = desc(LAYER, 'd', 10);
        let missing = [earlier.clone(), partial.clone(), over.clone()];
        let tally = Tally {
            config: &config.digest,
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
