//! The staging layout served over skopeo's image proxy protocol, for
//! ostree-ext's `ImageImporter` (`--dest ostree:`).
//!
//! ostree-ext reads an image only through `skopeo experimental-image-proxy`,
//! a child it starts itself (containers-image-proxy 0.7). The staging layout
//! holds nothing but what root has verified: every blob is linked under its
//! digest only after its bytes matched ([`crate::store::BlobSink::commit`]).
//! skopeo would read each one back, hash it again and copy it through a pipe.
//! This server is that child instead: `hostpull-ostree-import __layout-proxy
//! LAYOUT experimental-image-proxy`, root's own code, in the import's own
//! process and domain ([`crate::store::import`]), with no network and no unit. For the manifest, the config and each blob it passes
//! the staged file itself (`SCM_RIGHTS`), so the import reads each layer once,
//! from the page cache, and nothing hashes it twice.
//!
//! It speaks protocol [`PROTOCOL`], the oldest containers-image-proxy accepts,
//! and only what ostree-ext asks for an `oci:` image: `Initialize`,
//! `OpenImage` (`oci:LAYOUT:TAG`, this layout only), `GetManifest`,
//! `GetFullConfig`, `GetBlob` (only the image's own blobs, at their declared
//! size), `FinishPipe`, `CloseImage` and `Shutdown`. Anything else is refused,
//! as skopeo refuses an unknown method: with an error reply, not an exit.
//! The socket is its stdin; it ends when the socket does.
#![cfg_attr(not(feature = "ostree"), allow(dead_code))]

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io::{IoSlice, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::Context;
use rustix::net::{RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::manifest::{Descriptor, Manifest, OCI_MANIFEST};

/// The hidden first argument that makes `hostpull-ostree-import` the server.
pub const VERB: &str = "__layout-proxy";
/// What the crate appends to the command it is given.
const PROXY_VERB: &str = "experimental-image-proxy";
/// The protocol version it speaks: the base one, without layer info (which
/// ostree-ext needs only for `containers-storage:`).
pub const PROTOCOL: &str = "0.2.3";
/// The longest message either side sends (the crate's own bound).
const MSG_MAX: usize = 32 << 10;
/// The one image a layout serves.
const IMAGE_ID: u64 = 1;

/// `hostpull-ostree-import __layout-proxy LAYOUT experimental-image-proxy
/// [--no-creds] [--debug]`, with the proxy's socket as stdin. The crate adds `--no-creds`
/// for `auth_anonymous` (a local layout needs no credential, and none is
/// handed over) and `--debug` when `CONTAINERS_IMAGE_PROXY_DEBUG` is set; any
/// other option would mean something this server does not do. Returns the
/// exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let mut args = args.into_iter();
    let (layout, verb) = (args.next().unwrap_or_default(), args.next());
    if layout.is_empty()
        || verb.is_none_or(|v| v != PROXY_VERB)
        || args.any(|a| a != "--no-creds" && a != "--debug")
    {
        eprintln!("error: {VERB}: usage: hostpull {VERB} LAYOUT {PROXY_VERB}");
        return 2;
    }
    let stdin = std::io::stdin();
    let sock = stdin.as_fd();
    if rustix::net::sockopt::socket_type(sock).ok() != Some(rustix::net::SocketType::SEQPACKET) {
        eprintln!("error: {VERB}: stdin is not the image proxy's socket");
        return 2;
    }
    match Server::new(PathBuf::from(layout)).serve(sock) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {VERB}: {e:#}");
            1
        }
    }
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

/// The server's state: the layout, its image once opened, the files handed out
/// and not yet finished (`FinishPipe` has nothing to wait for: each is whole).
#[derive(Debug)]
struct Server {
    layout: PathBuf,
    image: Option<Image>,
    pipes: HashSet<u32>,
    next_pipe: u32,
}

impl Server {
    fn new(layout: PathBuf) -> Self {
        Self {
            layout,
            image: None,
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
                Ok(value(Value::Null))
            }
            ("GetManifest", [id]) => {
                let desc = &self.image(id)?.desc;
                Ok(Answer {
                    value: desc.digest.as_str().into(),
                    fd: Some(self.staged(desc)?),
                })
            }
            ("GetFullConfig", [id]) => {
                let config = self.image(id)?.manifest.config.clone();
                Ok(Answer {
                    value: Value::Null,
                    fd: Some(self.staged(&config)?),
                })
            }
            ("GetBlob", [id, Value::String(digest), size]) => {
                let blob = self.blob(id, digest, size)?;
                Ok(Answer {
                    value: blob.size.into(),
                    fd: Some(self.staged(&blob)?),
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

    /// `oci:LAYOUT:TAG`: the manifest that `index.json` tags TAG.
    fn open(&mut self, reference: &str) -> anyhow::Result<()> {
        let tag = reference
            .strip_prefix("oci:")
            .and_then(|r| r.strip_prefix(self.layout.to_str()?))
            .and_then(|r| r.strip_prefix(':'))
            .filter(|t| !t.is_empty())
            .with_context(|| format!("{reference}: not oci:{}:TAG", self.layout.display()))?;
        let index: Value = serde_json::from_slice(
            &std::fs::read(self.layout.join("index.json")).context("reading index.json")?,
        )
        .context("parsing index.json")?;
        let entry = index["manifests"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["annotations"][crate::store::REF_NAME] == tag)
            .with_context(|| format!("no image tagged {tag:?}"))?;
        let desc: Descriptor = serde_json::from_value(entry.clone()).context("index.json")?;
        if desc.media_type != OCI_MANIFEST {
            anyhow::bail!(
                "{tag}: media type {:?} is not an OCI manifest",
                desc.media_type
            );
        }
        let mut raw = Vec::new();
        File::from(self.staged(&desc)?).read_to_end(&mut raw)?;
        let manifest = serde_json::from_slice(&raw).context("parsing the manifest")?;
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

    /// The staged file of `blob`, opened for reading, if it has its size.
    /// Only verified bytes are ever linked under a digest.
    fn staged(&self, blob: &Descriptor) -> anyhow::Result<OwnedFd> {
        use rustix::fs::{Mode, OFlags};
        let path = self.layout.join("blobs/sha256").join(blob.digest.hex());
        let fd = rustix::fs::open(
            &path,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .with_context(|| format!("blob {} is not staged", blob.digest))?;
        let st = rustix::fs::fstat(&fd)?;
        let regular = rustix::fs::FileType::from_raw_mode(st.st_mode).is_file();
        if !regular || st.st_size as u64 != blob.size {
            anyhow::bail!(
                "staged blob {} is not a file of {} bytes",
                blob.digest,
                blob.size
            );
        }
        Ok(fd)
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

/// The command that starts this server on `layout`, for the crate's
/// `skopeo_cmd` (it appends [`PROXY_VERB`] and sets stdin): the program
/// that runs the import, again.
pub fn command(layout: &Path) -> anyhow::Result<std::process::Command> {
    let exe = std::env::current_exe().context("finding the import's own program")?;
    let mut c = std::process::Command::new(exe);
    c.arg(VERB).arg(layout);
    Ok(c)
}
