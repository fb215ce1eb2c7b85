//! The staging layout served over skopeo's image proxy protocol, for
//! ostree-ext's `ImageImporter` (`--dest ostree:`).
//!
//! ostree-ext reads an image only through `skopeo experimental-image-proxy`,
//! a child it starts itself (containers-image-proxy 0.7). The staging layout
//! holds nothing but what root has verified: every blob is linked under its
//! digest only after its bytes matched ([`crate::store::BlobSink::commit`]).
//! skopeo would read each one back, hash it again and copy it through a pipe.
//! This server is that child instead: `hostpull __layout-proxy
//! LAYOUT DIGEST [--follow FD] experimental-image-proxy`, root's own code,
//! which the import runs in its own domain ([`crate::confined::import`]), with
//! no network and no unit. For the manifest (DIGEST), the config and each blob it
//! passes the staged file itself (`SCM_RIGHTS`), so the import reads each layer
//! once, from the page cache, and nothing hashes it twice.
//!
//! **Following a pull.** With `--follow FD` the import runs beside the fetch:
//! FD is the pull's [`Control`] pipe. A blob not staged yet is waited for (the
//! fetch links each one under its digest only once it has verified it), and
//! `CloseImage`, which ostree-ext sends after the last layer and before it
//! writes the image's ref, is answered only once the pull says `done`. If the
//! pipe ends without it, the pull failed: the waiting request fails, and so
//! does the import, which then removes the layer refs it made.
//!
//! It speaks protocol [`PROTOCOL`], the oldest containers-image-proxy accepts,
//! and only what ostree-ext asks for an `oci:` image: `Initialize`,
//! `OpenImage` (`oci:LAYOUT:TAG`, this layout only; the tag is not looked
//! up: the image is the manifest DIGEST), `GetManifest`,
//! `GetFullConfig`, `GetBlob` (only the image's own blobs, at their declared
//! size), `FinishPipe`, `CloseImage` and `Shutdown`. Anything else is refused,
//! as skopeo refuses an unknown method: with an error reply, not an exit.
//! The socket is its stdin; it ends when the socket does.
#![cfg_attr(not(feature = "ostree"), allow(dead_code))]

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::IoSlice;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use rustix::net::{RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::digest::Sha256Digest;
use crate::error::print;
use crate::manifest::{Descriptor, Manifest, OCI_MANIFEST};
use crate::open::Links;
use crate::wire::import::{Control, FAILED, Word};
use crate::wire::layout::{FOLLOW, PROTOCOL, PROXY_VERB, VERB};

/// The longest message either side sends (the crate's own bound).
const MSG_MAX: usize = 32 << 10;
/// The one image a layout serves.
const IMAGE_ID: u64 = 1;
/// How often a wait for a blob looks for it again, unless the pull speaks.
const POLL: Duration = Duration::from_millis(20);

/// `hostpull __layout-proxy LAYOUT DIGEST [--follow FD]
/// experimental-image-proxy [--no-creds] [--debug]`, with the proxy's socket as
/// stdin. The crate adds `--no-creds` for `auth_anonymous` (a local layout
/// needs no credential, and none is handed over) and `--debug` when
/// `CONTAINERS_IMAGE_PROXY_DEBUG` is set; any other option would mean
/// something this server does not do. Returns the exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let server = match parse(args) {
        Some(s) => s,
        None => {
            print(
                Some(VERB),
                format_args!("usage: {VERB} LAYOUT DIGEST [--follow FD] {PROXY_VERB}"),
            );
            return 2;
        }
    };
    let stdin = std::io::stdin();
    let sock = stdin.as_fd();
    if rustix::net::sockopt::socket_type(sock).ok() != Some(rustix::net::SocketType::SEQPACKET) {
        print(
            Some(VERB),
            format_args!("stdin is not the image proxy's socket"),
        );
        return 2;
    }
    match server.serve(sock) {
        Ok(()) => 0,
        Err(e) => {
            print(Some(VERB), format_args!("{e:#}"));
            1
        }
    }
}

/// The server the command line asks for, or `None` for a wrong one.
fn parse(args: Vec<OsString>) -> Option<Server> {
    let mut args = args.into_iter().peekable();
    let layout = args.next().filter(|l| !l.is_empty())?;
    let digest = Sha256Digest::parse(args.next()?.to_str()?)?;
    let control = match args.next_if(|a| a == FOLLOW) {
        Some(_) => Some(Control::new(inherited_pipe(
            args.next()?.to_str()?.parse().ok()?,
        )?)),
        None => None,
    };
    if args.next().is_none_or(|v| v != PROXY_VERB)
        || args.any(|a| a != "--no-creds" && a != "--debug")
    {
        return None;
    }
    Some(Server::new(PathBuf::from(layout), digest, control))
}

/// The pipe inherited as descriptor `fd` (not stdio), taken over; `None` if
/// `fd` is not an open pipe.
#[allow(unsafe_code)]
fn inherited_pipe(fd: RawFd) -> Option<OwnedFd> {
    // SAFETY: fcntl(2) on a number reads no memory of ours; it fails (EBADF)
    // if nothing is open under it.
    if fd <= 2 || unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return None;
    }
    // SAFETY: `fd` is open (above), and this process got it for this use
    // alone: nothing else in it knows the number, so nothing else closes it.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let st = rustix::fs::fstat(&fd).ok()?;
    (rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Fifo).then_some(fd)
}

/// A request, as containers-image-proxy sends it.
#[derive(Debug, Deserialize)]
struct Request {
    method: String,
    #[serde(default)]
    args: Vec<Value>,
}

/// What a request returns: a value, and the staged file to read, if any.
#[derive(Debug)]
struct Answer {
    value: Value,
    fd: Option<OwnedFd>,
}

/// The opened image: its manifest's descriptor and the manifest.
#[derive(Debug)]
struct Image {
    desc: Descriptor,
    manifest: Manifest,
}

/// The server's state: the layout and its image's manifest digest, the image
/// once opened, the pull it follows if any, the files handed out and not yet
/// finished (`FinishPipe` has nothing to wait for: each is whole).
#[derive(Debug)]
struct Server {
    layout: PathBuf,
    digest: Sha256Digest,
    image: Option<Image>,
    control: Option<Control>,
    pipes: HashSet<u32>,
    next_pipe: u32,
}

impl Server {
    fn new(layout: PathBuf, digest: Sha256Digest, control: Option<Control>) -> Self {
        Self {
            layout,
            digest,
            image: None,
            control,
            pipes: HashSet::new(),
            next_pipe: 1,
        }
    }

    /// Answer requests until `Shutdown` or the end of the socket.
    fn serve(mut self, sock: BorrowedFd<'_>) -> anyhow::Result<()> {
        let mut buf = vec![0u8; MSG_MAX];
        loop {
            let (n, _) =
                rustix::net::recv(sock, &mut buf[..], RecvFlags::empty()).context("recv")?;
            if n == 0 {
                return Ok(());
            }
            let req: Request = match serde_json::from_slice(&buf[..n]) {
                Ok(r) => r,
                Err(e) => {
                    send(sock, &reply_error(format!("malformed request: {e}")), None)?;
                    continue;
                }
            };
            if req.method == "Shutdown" {
                return Ok(());
            }
            match self.handle(&req) {
                Ok(Answer { value, fd: None }) => send(sock, &reply(value, 0), None)?,
                Ok(Answer {
                    value,
                    fd: Some(fd),
                }) => {
                    let id = self.next_pipe;
                    self.next_pipe += 1;
                    self.pipes.insert(id);
                    send(sock, &reply(value, id), Some(fd.as_fd()))?;
                }
                Err(e) => send(sock, &reply_error(format!("{e:#}")), None)?,
            }
        }
    }

    fn handle(&mut self, req: &Request) -> anyhow::Result<Answer> {
        let value = |value| Answer { value, fd: None };
        match (req.method.as_str(), req.args.as_slice()) {
            ("Initialize", []) => Ok(value(PROTOCOL.into())),
            ("OpenImage", [Value::String(r)]) => {
                self.open(r)?;
                Ok(value(IMAGE_ID.into()))
            }
            ("CloseImage", [id]) => {
                self.image(id)?;
                // The last request before the image's ref is written.
                if let Some(c) = &mut self.control {
                    c.wait_done()?;
                }
                Ok(value(Value::Null))
            }
            ("GetManifest", [id]) => {
                let desc = &self.image(id)?.desc;
                Ok(Answer {
                    value: desc.digest.as_str().into(),
                    fd: Some(self.staged(desc)?.context("the manifest is not staged")?),
                })
            }
            ("GetFullConfig", [id]) => {
                let config = self.image(id)?.manifest.config.clone();
                Ok(Answer {
                    value: Value::Null,
                    fd: Some(self.when_staged(&config)?),
                })
            }
            ("GetBlob", [id, Value::String(digest), size]) => {
                let blob = self.blob(id, digest, size)?;
                Ok(Answer {
                    value: blob.size.into(),
                    fd: Some(self.when_staged(&blob)?),
                })
            }
            ("FinishPipe", [id]) => {
                let known = id
                    .as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .is_some_and(|id| self.pipes.remove(&id));
                anyhow::ensure!(known, "no pipe {id}");
                Ok(value(Value::Null))
            }
            (m, args) => anyhow::bail!("unsupported request {m} with {} arguments", args.len()),
        }
    }

    /// `oci:LAYOUT:TAG`: the image whose manifest is the staged blob DIGEST,
    /// written before the import started (the tag is published only after
    /// the fetch).
    fn open(&mut self, reference: &str) -> anyhow::Result<()> {
        reference
            .strip_prefix("oci:")
            .and_then(|r| r.strip_prefix(self.layout.to_str()?))
            .and_then(|r| r.strip_prefix(':'))
            .filter(|t| !t.is_empty())
            .with_context(|| format!("{reference}: not oci:{}:TAG", self.layout.display()))?;
        let path = self.blob_path(&self.digest);
        let raw = std::fs::read(&path)
            .with_context(|| format!("manifest {} is not staged", self.digest))?;
        crate::verify::check_bytes("manifest", &raw, &self.digest, raw.len() as u64)?;
        let manifest = serde_json::from_slice(&raw).context("parsing the manifest")?;
        let desc = Descriptor {
            media_type: OCI_MANIFEST.to_owned(),
            digest: self.digest.clone(),
            size: raw.len() as u64,
            urls: Vec::new(),
            platform: None,
            annotations: Default::default(),
        };
        self.image = Some(Image { desc, manifest });
        Ok(())
    }

    fn image(&self, id: &Value) -> anyhow::Result<&Image> {
        self.image
            .as_ref()
            .filter(|_| id.as_u64() == Some(IMAGE_ID))
            .with_context(|| format!("no open image {id}"))
    }

    /// The image's blob `digest`, asked for at its declared `size`.
    fn blob(&self, id: &Value, digest: &str, size: &Value) -> anyhow::Result<Descriptor> {
        let image = self.image(id)?;
        let blob = image
            .manifest
            .blobs()
            .find(|b| b.digest.as_str() == digest)
            .with_context(|| format!("blob {digest} is not in image {}", image.desc.digest))?;
        if size.as_u64() != Some(blob.size) {
            anyhow::bail!("blob {digest} has {} bytes, not {size}", blob.size);
        }
        Ok(blob.clone())
    }

    fn blob_path(&self, digest: &Sha256Digest) -> PathBuf {
        self.layout.join("blobs/sha256").join(digest.hex())
    }

    /// The staged file of `blob`, opened for reading, if it has its size;
    /// `None` if it is not there. Only verified bytes are ever linked under
    /// a digest.
    fn staged(&self, blob: &Descriptor) -> anyhow::Result<Option<OwnedFd>> {
        let file = match crate::open::regular(&self.blob_path(&blob.digest), Links::Refuse) {
            Ok((file, len)) if len == blob.size => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() != std::io::ErrorKind::InvalidInput => {
                return Err(e).with_context(|| format!("opening staged blob {}", blob.digest));
            }
            _ => anyhow::bail!(
                "staged blob {} is not a file of {} bytes",
                blob.digest,
                blob.size
            ),
        };
        Ok(Some(OwnedFd::from(file)))
    }

    /// [`Self::staged`], and while the pull that this server follows goes
    /// on, waited for.
    fn when_staged(&mut self, blob: &Descriptor) -> anyhow::Result<OwnedFd> {
        loop {
            if let Some(fd) = self.staged(blob)? {
                return Ok(fd);
            }
            let Some(control) = &mut self.control else {
                anyhow::bail!("blob {} is not staged", blob.digest);
            };
            // What the pull said up to now: the blob was looked for after it.
            match control.word() {
                Word::Pending => {
                    control.wait(Some(POLL))?;
                }
                // A layer ref removed after the pull decided what to fetch
                // (another tool's prune), so it was neither fetched nor kept.
                Word::Done => anyhow::bail!(
                    "layer {} is neither in the repository nor staged \
                     (its ref went away during the pull?); pull again",
                    blob.digest
                ),
                Word::Failed => anyhow::bail!("{} (waiting for blob {})", FAILED, blob.digest),
            }
        }
    }
}

fn reply(value: Value, pipeid: u32) -> Value {
    json!({ "success": true, "value": value, "pipeid": pipeid, "error": "" })
}

fn reply_error(error: String) -> Value {
    json!({ "success": false, "value": Value::Null, "pipeid": 0, "error": error })
}

/// Send one reply, with `fd` attached if given.
fn send(sock: BorrowedFd<'_>, reply: &Value, fd: Option<BorrowedFd<'_>>) -> anyhow::Result<()> {
    let bytes = serde_json::to_vec(reply)?;
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
    if !fds.is_empty() {
        ancillary.push(SendAncillaryMessage::ScmRights(&fds));
    }
    rustix::net::sendmsg(
        sock,
        &[IoSlice::new(&bytes)],
        &mut ancillary,
        SendFlags::empty(),
    )
    .context("sendmsg")?;
    Ok(())
}
