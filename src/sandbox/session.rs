//! The pull's one worker, as root holds it: the worker agent (agent.rs) in
//! its unit, the side channel that asks it for `skopeo inspect --raw`, and the
//! image proxy session (containers-image-proxy) that serves the blob fetch and
//! the fetch of attached signatures alike, started when first needed.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use anyhow::Context;
use containers_image_proxy::{Error as ProxyError, ImageProxy, ImageProxyConfig, OpenedImage};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::task::JoinHandle;

use super::prepare::PROXY_ENV;
use super::{Launch, Output, STOP_TIMEOUT, Worker, worker_failure};
use crate::digest::Sha256Digest;
use crate::error::{Failure, Kind, fail};
use crate::imgref::ImageRef;
use crate::manifest::{Descriptor, MANIFEST_MAX};
use crate::verify;
use crate::wire::agent::{self, Reply, Request};

/// The worker agent of a pull, running: its unit, its side channel, and its
/// image proxy.
#[derive(Debug)]
pub(super) struct Agent {
    /// The unit it runs as, under systemd.
    pub(super) unit: Option<String>,
    /// The side channel; one request at a time, the proxy running or not.
    side: tokio::sync::Mutex<BufReader<UnixStream>>,
    proxy: tokio::sync::Mutex<Proxy>,
    /// The image opened beside the manifest's `inspect`
    /// ([`Worker::open_beside`]), until a session takes it.
    opened: std::sync::Mutex<Option<Opened>>,
    /// From starting its unit to its [`agent::HELLO`].
    startup: Duration,
    /// Sessions begun and not run to their end: one cut short (a stall, a
    /// timeout) may have left a request waiting in the proxy, which then
    /// cannot be shut down in order, only stopped.
    open: std::sync::atomic::AtomicUsize,
}

/// The agent's image proxy: asked for when first needed.
#[derive(Debug)]
enum Proxy {
    /// containers-image-proxy's start, waiting for its `Initialize` reply,
    /// which comes once the agent is asked to start skopeo.
    Pending(JoinHandle<Result<ImageProxy, ProxyError>>),
    Ready(Arc<ImageProxy>),
    /// It failed to start, or was given up.
    Gone,
}

impl Worker {
    /// The command that starts the agent, and its image proxy's
    /// configuration: the crate starts it, with the proxy's socketpair as its
    /// stdin; `side` becomes its stdout.
    pub(super) fn agent_command(
        &self,
        side: RawFd,
    ) -> anyhow::Result<(ImageProxyConfig, Option<String>)> {
        let exe = std::env::current_exe().context("finding hostpull's own program")?;
        let Launch { mut cmd, unit, .. } = self.launch_program(&exe, Some(&self.spec.skopeo))?;
        cmd.arg(agent::VERB);
        if let Some(env) = self.proxy_file_for(PROXY_ENV, unit.as_deref()) {
            cmd.arg(agent::PROXY_ENV_OPTION).arg(env);
        }
        cmd.arg(&self.spec.skopeo);
        cmd.args(self.registries_args(unit.as_deref()));
        stdout_from(&mut cmd, side);
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

    /// The pull's agent, started on first use.
    pub(super) async fn agent(&self) -> anyhow::Result<Arc<Agent>> {
        let mut slot = self.agent.lock().await;
        if let Some(a) = &*slot {
            return Ok(Arc::clone(a));
        }
        let a = Arc::new(self.start_agent().await?);
        *slot = Some(Arc::clone(&a));
        Ok(a)
    }

    /// Start the agent and wait for its hello; its proxy waits meanwhile.
    async fn start_agent(&self) -> anyhow::Result<Agent> {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .context("creating the worker's side channel")?;
        let (cfg, unit) = self.agent_command(theirs.as_raw_fd())?;
        let started = Instant::now();
        let mut pending = tokio::spawn(ImageProxy::new_with_config(cfg));
        let ours = std::os::unix::net::UnixStream::from(ours);
        ours.set_nonblocking(true)?;
        let mut side = BufReader::new(UnixStream::from_std(ours)?);
        let hello = async {
            tokio::select! {
                line = read_line(&mut side) => match line? {
                    Some(l) if l == agent::HELLO => Ok(()),
                    _ => fail(Kind::Worker, "the worker agent did not start"),
                },
                r = &mut pending => match r {
                    Err(e) => fail(Kind::Internal, format!("starting the worker: {e}")),
                    Ok(Err(e)) => Err(proxy_failure("starting the worker", e)),
                    Ok(Ok(_)) => fail(Kind::Worker, "the worker answered before it was asked"),
                },
            }
        };
        let r = self.observe(unit.as_deref(), hello).await;
        // Its copy in the agent is all that keeps the channel open now: when
        // the agent ends, root reads the end.
        drop(theirs);
        if let Err(e) = r {
            pending.abort();
            return Err(e);
        }
        Ok(Agent {
            unit,
            side: tokio::sync::Mutex::new(side),
            proxy: tokio::sync::Mutex::new(Proxy::Pending(pending)),
            startup: started.elapsed(),
            open: Default::default(),
            opened: Default::default(),
        })
    }

    /// Give the agent up: the next request starts another. It ends when it
    /// sees its channels close; its unit is stopped with the others.
    pub(super) async fn drop_agent(&self) {
        self.agent.lock().await.take();
    }

    /// Give `failed` up after an error, if it is still the pull's agent (a
    /// signature's `inspect` after the blobs may have started another).
    pub(super) async fn give_up(&self, failed: Arc<Agent>) {
        let mut slot = self.agent.lock().await;
        if slot.as_ref().is_some_and(|a| Arc::ptr_eq(a, &failed)) {
            slot.take();
        }
    }

    /// Close the agent's channels and let it end: a proxy is shut down and
    /// waited for, an agent never asked for one exits on its own.
    pub(super) async fn close_agent(&self) {
        let Some(agent) = self.agent.lock().await.take() else {
            return;
        };
        let Ok(Agent {
            side, proxy, open, ..
        }) = Arc::try_unwrap(agent)
        else {
            return;
        };
        drop(side);
        if open.into_inner() > 0 {
            return;
        }
        let stopped = match proxy.into_inner() {
            Proxy::Ready(p) => match Arc::try_unwrap(p) {
                Ok(p) => tokio::time::timeout(STOP_TIMEOUT, p.finalize())
                    .await
                    .map(|r| r.map_err(|e| e.to_string())),
                Err(_) => Ok(Ok(())),
            },
            Proxy::Pending(task) => tokio::time::timeout(STOP_TIMEOUT, task)
                .await
                .map(|_| Ok(())),
            Proxy::Gone => Ok(Ok(())),
        };
        if let Ok(Err(e)) = stopped {
            tracing::debug!("the worker's proxy ended badly: {e}");
        }
    }
}

/// In the child that `c` starts, `fd` replaces stdout (which the proxy crate
/// sets to /dev/null): the agent's side channel.
#[allow(unsafe_code)]
fn stdout_from(c: &mut std::process::Command, fd: RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: dup2(2) is async-signal-safe and allocates nothing; `fd` is
    // open in the parent until the agent has said hello, so in the child too.
    unsafe {
        c.pre_exec(move || {
            if libc::dup2(fd, 1) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// One line from the agent, without its newline; none at the end.
async fn read_line(side: &mut BufReader<UnixStream>) -> anyhow::Result<Option<String>> {
    let mut line = Vec::new();
    (&mut *side)
        .take(agent::LINE_MAX)
        .read_until(b'\n', &mut line)
        .await
        .context("reading the worker agent")?;
    match line.pop() {
        Some(b'\n') => Ok(Some(String::from_utf8_lossy(&line).into_owned())),
        _ => Ok(None),
    }
}

/// An image the proxy opened, and the digest of the manifest it resolved to
/// (the registry's, before any conversion).
#[derive(Debug)]
struct Opened {
    img: OpenedImage,
    digest: String,
    /// The manifest's bytes as the proxy gave them, where they hash to
    /// `digest`: the registry's own, unconverted (an OCI manifest).
    raw: Option<Vec<u8>>,
}

impl Worker {
    /// Start the pull's agent now, if it is not running yet.
    pub async fn start(&self) -> anyhow::Result<()> {
        self.agent().await.map(drop)
    }

    /// Open `image` in the worker's proxy, started now if it is not yet,
    /// beside root's `inspect` of the manifest: each pays the round trips to
    /// the registry (a connection, TLS, the token, the manifest) at the same
    /// time, and the blobs' session takes the image if it resolved to the
    /// manifest root chose ([`ProxySession::run`]). A failure is only
    /// logged: that session then opens the image itself, and says why if it
    /// fails again.
    pub async fn open_beside(&self, image: &ImageRef) {
        let opened = async {
            let agent = self.agent().await?;
            agent.open.fetch_add(1, SeqCst);
            let r = async {
                let proxy = agent.proxy(self).await?;
                let img = proxy.open_image(&image.to_transport()).await?;
                let (digest, raw) = proxy.fetch_manifest_raw_oci(&img).await?;
                let raw = (raw.len() as u64 <= MANIFEST_MAX
                    && crate::digest::sha256(&raw).as_str() == digest)
                    .then_some(raw);
                anyhow::Ok(Opened { img, digest, raw })
            }
            .await;
            agent.open.fetch_sub(1, SeqCst);
            *agent.opened.lock().unwrap_or_else(|p| p.into_inner()) = Some(r?);
            anyhow::Ok(())
        };
        if let Err(e) = opened.await {
            tracing::debug!("opening {image} beside its manifest: {e:#}");
        }
    }
}

impl Worker {
    /// The registry's bytes of manifest `digest`, from the image the proxy
    /// opened ([`Worker::open_beside`]) if it resolved to that manifest and
    /// gave it unconverted: root hashes them, so they need no `inspect`.
    pub async fn opened_manifest(&self, digest: &Sha256Digest) -> Option<Vec<u8>> {
        let agent = self.agent.lock().await.clone()?;
        let opened = agent.opened.lock().unwrap_or_else(|p| p.into_inner());
        let o = opened.as_ref().filter(|o| o.digest == digest.as_str())?;
        o.raw.clone()
    }
}

impl Agent {
    /// The image opened beside the manifest, if it resolved to `image`'s
    /// digest; it is then the session's.
    fn take_opened(&self, worker: &Worker, image: &ImageRef) -> Option<OpenedImage> {
        let mut opened = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        let want = image.digest.as_ref()?.to_string();
        let img = opened.take_if(|o| o.digest == want)?.img;
        worker.ledger().opened_beside = true;
        Some(img)
    }

    /// Run skopeo in the agent with `args`, to its end: at most `limit` + 1
    /// bytes of its stdout.
    pub(super) async fn run(&self, args: Vec<String>, limit: u64) -> anyhow::Result<Output> {
        let mut side = self.side.lock().await;
        send(side.get_mut(), &Request::Run { args, limit }).await?;
        let gone = || Failure::new(Kind::Worker, "the worker agent ended unexpectedly");
        let head = read_line(&mut side).await?.ok_or_else(gone)?;
        let reply: Reply = serde_json::from_str(&head)
            .map_err(|e| Failure::new(Kind::Worker, format!("the worker agent's reply: {e}")))?;
        if reply.stdout > limit.saturating_add(1) || reply.stderr > agent::STDERR_MAX {
            return fail(
                Kind::Worker,
                "the worker agent sent more than it was asked for",
            );
        }
        let mut stdout = vec![0; reply.stdout as usize];
        let mut stderr = vec![0; reply.stderr as usize];
        side.read_exact(&mut stdout).await.map_err(|_| gone())?;
        side.read_exact(&mut stderr).await.map_err(|_| gone())?;
        if let Some(signal) = reply.signal {
            // The agent dies of it too: `Worker::observe` reads why from the unit.
            return Err(
                Failure::new(Kind::Worker, format!("worker killed by signal {signal}"))
                    .with_detail(String::from_utf8_lossy(&stderr).trim().to_owned())
                    .into(),
            );
        }
        Ok(Output {
            code: reply.code,
            stdout,
            stderr,
        })
    }

    /// The image proxy: asked for of the agent the first time.
    async fn proxy(&self, worker: &Worker) -> anyhow::Result<Arc<ImageProxy>> {
        let mut state = self.proxy.lock().await;
        let task = match std::mem::replace(&mut *state, Proxy::Gone) {
            Proxy::Ready(p) => {
                *state = Proxy::Ready(Arc::clone(&p));
                return Ok(p);
            }
            Proxy::Gone => return fail(Kind::Worker, "the worker's image proxy failed earlier"),
            Proxy::Pending(task) => task,
        };
        let started = Instant::now();
        {
            let mut side = self.side.lock().await;
            send(side.get_mut(), &Request::Proxy).await?;
        }
        let proxy = match task.await {
            Ok(r) => r.map_err(|e| proxy_failure("starting the worker", e))?,
            Err(e) => return fail(Kind::Internal, format!("starting the worker: {e}")),
        };
        worker.record_session(self.startup + started.elapsed(), &proxy);
        let proxy = Arc::new(proxy);
        *state = Proxy::Ready(Arc::clone(&proxy));
        Ok(proxy)
    }
}

/// Send one request line.
async fn send(side: &mut UnixStream, request: &Request) -> anyhow::Result<()> {
    let mut line = serde_json::to_vec(request)?;
    line.push(b'\n');
    side.write_all(&line).await.map_err(|e| {
        Failure::new(
            Kind::Worker,
            format!("the worker agent ended unexpectedly: {e}"),
        )
    })?;
    Ok(())
}

/// An image proxy session with the pull's worker: [run](ProxySession::run)
/// opens an image and hands it over.
#[derive(Debug)]
pub struct ProxySession<'w> {
    worker: &'w Worker,
}

impl Worker {
    /// A session of the image proxy with this pull's worker, ready to
    /// [run](ProxySession::run): nothing starts yet.
    pub fn proxy_session(&self) -> ProxySession<'_> {
        ProxySession { worker: self }
    }
}

impl ProxySession<'_> {
    /// Open `image` in the worker's proxy (started if it is not yet), hand
    /// both to `work`, then close the image; watched throughout, so that a
    /// worker that died is reported as such. After an error the worker is
    /// given up: the next session starts another.
    pub async fn run<T>(
        self,
        image: &ImageRef,
        work: impl AsyncFnOnce(&ImageProxy, &OpenedImage) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let worker = self.worker;
        let agent = worker.agent().await?;
        agent.open.fetch_add(1, SeqCst);
        let session = async {
            let proxy = agent.proxy(worker).await?;
            let img = match agent.take_opened(worker, image) {
                Some(img) => img,
                None => proxy
                    .open_image(&image.to_transport())
                    .await
                    .map_err(|e| proxy_failure(&format!("opening {image}"), e))?,
            };
            let out = work(&proxy, &img).await?;
            proxy
                .close_image(&img)
                .await
                .map_err(|e| proxy_failure("closing the image", e))?;
            Ok(out)
        };
        let r = worker.observe(agent.unit.as_deref(), session).await;
        agent.open.fetch_sub(1, SeqCst);
        if r.is_err() {
            worker.give_up(agent).await;
        }
        r
    }

    /// Small blobs of `image` (signature payloads), whole and verified.
    pub async fn fetch_small(
        self,
        image: &ImageRef,
        blobs: &[Descriptor],
    ) -> anyhow::Result<Vec<Vec<u8>>> {
        self.run(image, async |proxy, img| {
            let mut out = Vec::new();
            for d in blobs {
                if d.size > MANIFEST_MAX {
                    return fail(
                        Kind::Verify,
                        format!("blob {} of {image} is larger than 4 MiB", d.digest),
                    );
                }
                let doing = format!("fetching {} of {image}", d.digest);
                let BlobPipe { data, finish, .. } = open_blob(proxy, img, d)
                    .await
                    .map_err(|e| proxy_failure(&doing, e))?;
                let mut buf = Vec::new();
                let mut reader = data.into_reader().take(d.size + 1);
                let (read, finished) = tokio::join!(reader.read_to_end(&mut buf), finish);
                finished.map_err(|e| proxy_failure(&doing, e))?;
                read.with_context(|| doing.clone())?;
                verify::check_bytes("blob", &buf, &d.digest, d.size)?;
                out.push(buf);
            }
            Ok(out)
        })
        .await
    }
}

/// A blob from the worker: its data, the worker's verdict on sending it
/// (FinishPipe's reply, or what `GetRawBlob`'s error pipe says), and the data
/// pipe's descriptor where it is known.
pub struct BlobPipe<'a> {
    /// The blob's bytes, as the worker sends them.
    pub data: BlobData,
    /// The worker's verdict, once `data` is drained.
    pub finish: std::pin::Pin<Box<dyn Future<Output = Result<(), ProxyError>> + Send + 'a>>,
    /// `data`'s pipe: owned by it, open as long as it is.
    pipe: Option<RawFd>,
}

impl BlobPipe<'_> {
    /// Widen the data pipe to `size` bytes if it is narrower. Blob pipes come
    /// from skopeo with the kernel's default 64 KiB: each read then moves at
    /// most that much through tokio's blocking pool, and skopeo's writer parks
    /// whenever the pipe is full; a 1 MiB pipe cut P1 by a quarter
    /// (docs/benchmarks.md). fcntl(F_SETPIPE_SZ) on the descriptor held, not an open(2)
    /// of /proc/self/fd/N, which SELinux would check (`fifo_file open` on
    /// hostpull_worker_t's pipe).
    #[allow(unsafe_code)]
    pub fn widen(&self, size: usize) {
        let Some(fd) = self.pipe else { return };
        // SAFETY: `data` owns `fd` and lives as long as `self`.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        if rustix::pipe::fcntl_getpipe_size(fd).is_ok_and(|s| s < size) {
            let _ = rustix::pipe::fcntl_setpipe_size(fd, size);
        }
    }
}

/// A blob's bytes: the pipe itself (`GetRawBlob`), or the reader that
/// containers-image-proxy puts in front of it (`GetBlob`).
pub enum BlobData {
    Pipe(std::fs::File),
    Reader(Box<dyn tokio::io::AsyncRead + Send + Unpin>),
}

impl BlobData {
    /// The bytes as an async reader, whichever way they come.
    pub fn into_reader(self) -> Box<dyn tokio::io::AsyncRead + Send + Unpin> {
        match self {
            Self::Pipe(pipe) => Box::new(tokio::fs::File::from_std(pipe)),
            Self::Reader(reader) => reader,
        }
    }
}

/// This process's pipe descriptors, as /proc/self/fd lists them.
fn pipe_fds() -> Vec<RawFd> {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    fds.flatten()
        .filter(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|t| t.to_string_lossy().starts_with("pipe:"))
        })
        .filter_map(|fd| fd.file_name().to_str()?.parse().ok())
        .collect()
}

/// Ask the worker for blob `d`: `GetRawBlob` where it speaks 0.2.8, else `GetBlob`.
pub async fn open_blob<'a>(
    proxy: &'a ImageProxy,
    img: &OpenedImage,
    d: &Descriptor,
) -> Result<BlobPipe<'a>, ProxyError> {
    let digest = oci_spec::image::Digest::try_from(d.digest.as_str())
        .map_err(|e| ProxyError::Other(e.to_string().into()))?;
    if !proxy.supports_get_raw_blob() {
        // containers-image-proxy hides GetBlob's pipe behind a reader: it is
        // the one pipe that the request brought. (While other blobs' pipes
        // close, it may take a number seen before: then it stays narrow.)
        let before = pipe_fds();
        let (reader, finish) = proxy.get_blob(img, &digest, d.size).await?;
        let new: Vec<RawFd> = pipe_fds()
            .into_iter()
            .filter(|fd| !before.contains(fd))
            .collect();
        return Ok(BlobPipe {
            data: BlobData::Reader(Box::new(reader)),
            finish: Box::pin(finish),
            pipe: if let [fd] = new[..] { Some(fd) } else { None },
        });
    }
    let (size, file, errors) = proxy.get_raw_blob(img, &digest).await?;
    // The registry's Content-Length, as the worker tells it: a wrong one is
    // caught by root's own count anyway, but need not be streamed first.
    if let Some(size) = size.filter(|&s| s != d.size) {
        return Err(ProxyError::Other(
            format!(
                "size mismatch: the registry sends {size} bytes, the descriptor says {}",
                d.size
            )
            .into(),
        ));
    }
    Ok(BlobPipe {
        pipe: Some(file.as_raw_fd()),
        data: BlobData::Pipe(file.into_std().await),
        finish: Box::pin(async move { errors.await.map_err(ProxyError::from) }),
    })
}

/// A proxy error as a [`Failure`]. From protocol 0.2.8 on, the worker marks
/// transient errors itself (`error_code: "retryable"`, containers/common's
/// `IsErrorRetryable()`); that fact, not its wording, makes them transient.
pub fn proxy_failure(doing: &str, e: ProxyError) -> anyhow::Error {
    let text = e.to_string();
    let f: Failure = worker_failure(doing, &text);
    if e.is_retryable() && f.kind != Kind::Network {
        return super::skopeo::transient_failure(doing, &text).into();
    }
    f.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Retry, failure};

    /// The worker's `error_code` (0.2.8), not its words, makes an error
    /// transient: a reply or an error pipe that says "retryable" is retried
    /// whatever it says; the same words without the code are not.
    #[test]
    fn proxy_failure_retries_what_the_worker_marks_retryable() {
        use containers_image_proxy::GetBlobError;
        let words = "lying-worker refuses this blob once";
        let reply = |retryable| {
            let (method, error) = ("GetRawBlob".into(), words.into());
            if retryable {
                ProxyError::RetryableRequestFailure { method, error }
            } else {
                ProxyError::RequestInitiationFailure { method, error }
            }
        };
        let unauthorized = ProxyError::RetryableRequestFailure {
            method: "GetRawBlob".into(),
            error: "reading blob: unauthorized: authentication required".into(),
        };
        const RETRYABLE: &str =
            "transient error while fetching layer x: the worker marks it retryable";
        // (error, exit code, message)
        let cases = [
            (reply(true), 6, RETRYABLE),
            (reply(false), 8, "worker failed while fetching layer x"),
            (GetBlobError::Retryable(words.into()).into(), 6, RETRYABLE),
            (
                GetBlobError::Other(words.into()).into(),
                8,
                "worker failed while fetching layer x",
            ),
            // The code wins over words that would read otherwise.
            (
                unauthorized,
                6,
                "transient error while fetching layer x: registry error code unauthorized",
            ),
            (
                ProxyError::Other("connection reset by peer".into()),
                6,
                "network error while fetching layer x: connection reset by peer",
            ),
        ];
        for (e, code, message) in cases {
            let shown = e.to_string();
            let f = proxy_failure("fetching layer x", e);
            assert_eq!(crate::error::exit_code(&f), code, "{shown}");
            // Every network error here is retried, and nothing else.
            let retry = failure(&f).unwrap().retry;
            assert_eq!(retry == Retry::Transient, code == 6, "{shown}");
            assert_eq!(failure(&f).unwrap().message, message, "{shown}");
            assert!(
                failure(&f)
                    .unwrap()
                    .detail
                    .as_deref()
                    .unwrap()
                    .contains(shown.rsplit(": ").next().unwrap()),
                "{shown}: {f:#}"
            );
        }
    }

    /// The pipe a blob comes through is widened, and only that one: another
    /// pipe of this process keeps its size.
    #[test]
    fn widen_touches_the_blob_pipe_alone() {
        let (read, _write) = rustix::pipe::pipe().unwrap();
        let (other, _other_write) = rustix::pipe::pipe().unwrap();
        // A second descriptor of the blob's pipe, to read its size by.
        let same = read.try_clone().unwrap();
        let size = |fd: &std::os::fd::OwnedFd| rustix::pipe::fcntl_getpipe_size(fd).unwrap();
        let before = size(&other);
        assert!(size(&same) < 1 << 20);
        let fds = pipe_fds();
        assert!(fds.contains(&read.as_raw_fd()) && fds.contains(&other.as_raw_fd()));
        let blob = BlobPipe {
            pipe: Some(read.as_raw_fd()),
            data: BlobData::Pipe(read.into()),
            finish: Box::pin(async { Ok(()) }),
        };
        blob.widen(1 << 20);
        assert_eq!(size(&same), 1 << 20);
        assert_eq!(size(&other), before);
        // Wide enough already: left as it is.
        blob.widen(4096);
        assert_eq!(size(&same), 1 << 20);
    }
}
