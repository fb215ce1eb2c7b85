//! One session of the image proxy (containers-image-proxy) with a worker: its
//! configuration, the unit it runs as and the watch on that unit, in one value
//! that serves the blob fetch and the fetch of attached signatures alike.

use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

use anyhow::Context;
use containers_image_proxy::{Error as ProxyError, ImageProxy, ImageProxyConfig, OpenedImage};
use tokio::io::AsyncReadExt;

use super::{Launch, Worker, worker_failure};
use crate::error::{Failure, Kind, fail};
use crate::manifest::{Descriptor, MANIFEST_MAX};
use crate::plan::imgref::ImageRef;
use crate::verify;

/// An image proxy session not yet started: what the worker is given, and the
/// unit it will run as, kept together so that the session is watched as the
/// unit it is.
#[derive(Debug)]
pub struct ProxySession<'w> {
    worker: &'w Worker,
    pub(super) config: ImageProxyConfig,
    pub(super) unit: Option<String>,
    /// Whether the worker's report tells this session's startup.
    timed: bool,
}

impl Worker {
    /// A session of the image proxy with a new worker, ready to
    /// [run](ProxySession::run): nothing starts yet.
    pub fn proxy_session(&self) -> anyhow::Result<ProxySession<'_>> {
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
        Ok(ProxySession {
            worker: self,
            config: cfg,
            unit,
            timed: false,
        })
    }
}

impl ProxySession<'_> {
    /// Let the worker's report tell how long this session's worker took to
    /// answer, and what protocol it speaks.
    pub fn timed(mut self) -> Self {
        self.timed = true;
        self
    }

    /// Start the worker, open `image`, hand both to `work`, then close the
    /// image and stop the worker; watched throughout, so that a worker that
    /// died is reported as such. On an error the proxy is dropped, which
    /// closes its socket, and skopeo exits on that.
    pub async fn run<T>(
        self,
        image: &ImageRef,
        work: impl AsyncFnOnce(&ImageProxy, &OpenedImage) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let Self {
            worker,
            config,
            unit,
            timed,
        } = self;
        let session = async {
            let started = Instant::now();
            let proxy = ImageProxy::new_with_config(config)
                .await
                .map_err(|e| proxy_failure("starting the worker", e))?;
            if timed {
                worker.record_session(started.elapsed(), &proxy);
            }
            let img = proxy
                .open_image(&image.to_transport())
                .await
                .map_err(|e| proxy_failure(&format!("opening {image}"), e))?;
            let out = work(&proxy, &img).await?;
            proxy
                .close_image(&img)
                .await
                .map_err(|e| proxy_failure("closing the image", e))?;
            proxy
                .finalize()
                .await
                .map_err(|e| proxy_failure("stopping the worker", e))?;
            Ok(out)
        };
        worker.observe(unit.as_deref(), session).await
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
                let BlobPipe { reader, finish, .. } = open_blob(proxy, img, d)
                    .await
                    .map_err(|e| proxy_failure(&doing, e))?;
                let mut buf = Vec::new();
                let mut reader = reader.take(d.size + 1);
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
    pub reader: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    /// The worker's verdict, once `reader` is drained.
    pub finish: std::pin::Pin<Box<dyn Future<Output = Result<(), ProxyError>> + Send + 'a>>,
    /// `reader`'s pipe: owned by it, open as long as it is.
    pipe: Option<RawFd>,
}

impl BlobPipe<'_> {
    /// Widen the data pipe to `size` bytes if it is narrower. Blob pipes come
    /// from skopeo with the kernel's default 64 KiB: each read then moves at
    /// most that much through tokio's blocking pool, and skopeo's writer parks
    /// whenever the pipe is full; a 1 MiB pipe cut a 512 MiB pull from 2.65 s to
    /// 2.0 s here. fcntl(F_SETPIPE_SZ) on the descriptor held, not an open(2)
    /// of /proc/self/fd/N, which SELinux would check (`fifo_file open` on
    /// hostpull_worker_t's pipe).
    #[allow(unsafe_code)]
    pub fn widen(&self, size: usize) {
        let Some(fd) = self.pipe else { return };
        // SAFETY: `reader` owns `fd` and lives as long as `self`.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        if rustix::pipe::fcntl_getpipe_size(fd).is_ok_and(|s| s < size) {
            let _ = rustix::pipe::fcntl_setpipe_size(fd, size);
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
            reader: Box::new(reader),
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
        reader: Box::new(file),
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
            reader: Box::new(tokio::fs::File::from_std(std::fs::File::from(read))),
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
