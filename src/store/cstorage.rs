//! `--dest containers-storage:`: the pull goes into a root-only staging layout
//! in `STAGING_DIR`, and once it is verified and published there, root's own
//! `skopeo copy --preserve-digests` (containers/storage's code, local: no
//! network, no credentials) writes it into the store, from a `dir:` view of
//! the staging (hard links) whose manifest is the registry's as served: a
//! Docker schema2 one too, which containers/image's `oci:` source would not
//! take, so that the store's digest is the registry's. What the store holds
//! under the name is read before the fetch, with `skopeo inspect --raw`: its
//! layers are not fetched again (the copy reuses them from the store), and an
//! image it holds at the pulled digest is not copied at all. So are the layers
//! of the image the repository last got in the store, which the state
//! directory remembers: a pull pinned by digest writes each update under a
//! name of its own. An image from an index goes in with the index beside it,
//! as `podman pull` stores one, so that the index's digest names it too.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;

use anyhow::Context;

use crate::digest::Sha256Digest;
use crate::error::{Failure, Kind, fail, one_line};
use crate::imgref::ImageRef;
use crate::imgref::cstorage::{PREFIX, STAGING_DIR, StorageRef, Writer};
use crate::manifest::{Manifest, Parsed};
use crate::store::ostree::Staging;

/// The state directory's records of what each repository last got in a store.
const RECORDS: &str = "containers-storage";

/// What the store holds under the destination's name, as read before the fetch.
#[derive(Debug)]
struct Held {
    digest: Sha256Digest,
    raw: Vec<u8>,
}

/// What the registry served for the image, as the bytes came: its manifest,
/// and the index it was chosen from, if any.
#[derive(Debug, Clone, Copy)]
pub struct Served<'a> {
    /// The manifest's digest.
    pub digest: &'a Sha256Digest,
    /// The manifest.
    pub raw: &'a [u8],
    /// The index, if the reference named one.
    pub index: Option<&'a [u8]>,
}

/// A `containers-storage:` destination of one pull.
#[derive(Debug)]
pub struct Storage {
    dest: StorageRef,
    /// The image as pulled: a pinned one is looked for by its digest.
    image: ImageRef,
    /// How root's skopeo runs, as planned.
    writer: Writer,
    staging: OnceLock<Staging>,
    held: tokio::sync::OnceCell<Option<Held>>,
    /// Where the image under the name is an index: the instance of it the
    /// store has, looked up by its digest, once.
    instance: tokio::sync::OnceCell<Option<Held>>,
    /// The image the repository last got in this store, as the state
    /// directory remembers it, if the store still has it.
    previous: tokio::sync::OnceCell<Option<Held>>,
    /// The registry's manifest of the image the pull staged (digest and
    /// bytes), and the index it was chosen from.
    pulled: OnceLock<(Held, Option<Held>)>,
}

impl Storage {
    /// The destination `dest` for a pull of `image`, written as `writer` says.
    pub fn new(dest: &StorageRef, image: &ImageRef, writer: &Writer) -> Self {
        Self {
            dest: dest.clone(),
            image: image.clone(),
            writer: writer.clone(),
            staging: OnceLock::new(),
            held: tokio::sync::OnceCell::new(),
            instance: tokio::sync::OnceCell::new(),
            previous: tokio::sync::OnceCell::new(),
            pulled: OnceLock::new(),
        }
    }

    /// The staging layout, made on the first call.
    pub fn layout(&self) -> anyhow::Result<PathBuf> {
        if let Some(s) = self.staging.get() {
            return Ok(s.layout());
        }
        let made = Staging::in_dir(Path::new(STAGING_DIR))?;
        Ok(self.staging.get_or_init(|| made).layout())
    }

    /// The image the store holds under the name (for a pinned pull without
    /// a tag, under NAME@DIGEST), read once. What cannot be read (no such
    /// image, no store yet) is not held; a store that is broken says so when
    /// the copy writes it.
    async fn held(&self) -> Option<&Held> {
        let read = async {
            let written = self.dest.written(self.image.digest.as_ref())?;
            self.inspect(&written).await
        };
        self.held.get_or_init(|| read).await.as_ref()
    }

    /// The manifest `written` names in the store, as `inspect --raw` reads it.
    async fn inspect(&self, written: &str) -> Option<Held> {
        let raw = self
            .skopeo(&["inspect", "--raw", &format!("{PREFIX}{written}")])
            .await
            .inspect_err(|e| tracing::debug!("reading {PREFIX}{written}: {e:#}"))
            .ok()
            .filter(|r| r.len() as u64 <= crate::manifest::MANIFEST_MAX)?;
        Some(Held {
            digest: crate::digest::sha256(&raw),
            raw,
        })
    }

    /// The manifest `digest` the store holds: the image under the name, or,
    /// where that is an index listing `digest`, the instance of it the store
    /// has (the copy stores the index beside the instance it chose, as
    /// `podman pull` does), looked up by its digest.
    async fn held_instance(&self, digest: &Sha256Digest) -> Option<&Held> {
        let held = self.held().await?;
        if held.digest == *digest {
            return Some(held);
        }
        let Ok(Parsed::Index(index)) = crate::manifest::parse(&held.raw) else {
            return None;
        };
        if !index.manifests.iter().any(|d| d.digest == *digest) {
            return None;
        }
        let read = async { self.inspect(&self.dest.pinned(digest)).await };
        // Looked up once a pull: a retry that chose another instance (the
        // tag moved) finds it not held, and fetches it.
        (self.instance.get_or_init(|| read).await.as_ref()).filter(|h| h.digest == *digest)
    }

    /// The held manifest's bytes, if they are `digest`'s.
    pub async fn held_manifest(&self, digest: &Sha256Digest) -> Option<Vec<u8>> {
        self.held_instance(digest).await.map(|h| h.raw.clone())
    }

    /// Whether the store has an image under the name.
    pub async fn holds_name(&self) -> bool {
        self.held().await.is_some()
    }

    /// The blobs of `manifest` (`digest`) the store has: all of them when it
    /// holds that very image; else the layers of the image under the name
    /// and of the one the repository last got, which the copy reuses from
    /// the store.
    pub async fn held_blobs(
        &self,
        digest: &Sha256Digest,
        manifest: &Manifest,
    ) -> HashSet<Sha256Digest> {
        if self.held_instance(digest).await.is_some() {
            return manifest.blobs().map(|d| d.digest.clone()).collect();
        }
        let mut layers = HashSet::new();
        for held in [self.held().await, self.previous().await]
            .into_iter()
            .flatten()
        {
            if let Ok(Parsed::Manifest(m, _)) = crate::manifest::parse(&held.raw) {
                layers.extend(m.layers.into_iter().map(|d| d.digest));
            }
        }
        layers
    }

    /// The state directory's record of what this repository last got in
    /// this store: a file named by the hash of `[STORE]NAME`.
    fn record(&self) -> Option<PathBuf> {
        let key = crate::digest::sha256(self.dest.repository().as_bytes());
        Some(self.writer.state.as_ref()?.join(RECORDS).join(key.hex()))
    }

    /// The image the record names, if the store still has it. A pull pinned
    /// by digest is written under NAME@DIGEST, so the last update is under
    /// another name: without this, all of its layers would be fetched again.
    async fn previous(&self) -> Option<&Held> {
        let read = async {
            let text = crate::open::read(&self.record()?, crate::open::Links::Refuse).ok()?;
            let digest = Sha256Digest::parse(std::str::from_utf8(&text).ok()?.trim())?;
            let held = self.inspect(&self.dest.pinned(&digest)).await?;
            (held.digest == digest).then_some(held)
        };
        self.previous.get_or_init(|| read).await.as_ref()
    }

    /// Record `digest` as what this repository last got in this store (a
    /// failure only costs the next pull the hint).
    fn remember(&self, digest: &Sha256Digest) {
        let Some(path) = self.record() else {
            return;
        };
        let write = || {
            let dir = path.parent().unwrap_or(Path::new("/"));
            std::fs::create_dir_all(dir)?;
            let tmp = dir.join(format!(".{}.tmp", std::process::id()));
            std::fs::write(&tmp, format!("{digest}\n"))?;
            std::fs::rename(&tmp, &path)
        };
        if let Err(e) = write() {
            tracing::debug!("remembering {digest} in {}: {e}", path.display());
        }
    }

    /// The image is accepted: `served` (the registry's manifest, and its
    /// index) is what the store gets.
    pub fn begin(&self, served: Served<'_>) {
        let held = |raw: &[u8]| Held {
            digest: crate::digest::sha256(raw),
            raw: raw.to_vec(),
        };
        let manifest = Held {
            digest: served.digest.clone(),
            raw: served.raw.to_vec(),
        };
        let _ = self.pulled.set((manifest, served.index.map(held)));
    }

    /// After a good pull: copy the staged image into the store, unless it
    /// holds that image under the name already. Returns how consumers name
    /// it, `containers-storage:[STORE]NAME@DIGEST`.
    pub async fn finish(&self) -> anyhow::Result<String> {
        let Some((manifest, index)) = self.pulled.get() else {
            return fail(Kind::Handoff, "the pull staged no image");
        };
        let digest = &manifest.digest;
        let stored = format!("{PREFIX}{}", self.dest.pinned(digest));
        if self.held_instance(digest).await.is_some() {
            self.remember(digest);
            return Ok(stored);
        }
        // An image from an index is written under the index's digest where a
        // digest names it: the name then finds the index, as the pin does.
        let top = index.as_ref().unwrap_or(manifest);
        let Some(written) = self.dest.written(Some(&top.digest)) else {
            return fail(Kind::Handoff, "nothing names the image in the store");
        };
        let from = format!("dir:{}", self.dir_view(manifest, index.as_ref())?.display());
        let to = format!("{PREFIX}{written}");
        let mut args = vec![
            "copy",
            "--quiet",
            "--preserve-digests",
            // Root has applied the signature policy to the registry's image;
            // this copy is between two of its own stores.
            "--insecure-policy",
        ];
        // The copy picks the index's instance by platform: the one the pull
        // chose, by the platform its entry names.
        let platform = index.as_ref().and_then(|i| entry_platform(&i.raw, digest));
        if let Some(p) = &platform {
            args.extend(["--override-os", &p.os, "--override-arch", &p.architecture]);
            if let Some(v) = &p.variant {
                args.extend(["--override-variant", v]);
            }
        }
        args.extend([from.as_str(), to.as_str()]);
        self.skopeo(&args)
            .await
            .with_context(|| format!("copying the image into {to}"))?;
        self.remember(digest);
        Ok(stored)
    }

    /// containers-image's `dir:` layout beside the staging layout: the
    /// manifest as served as its manifest.json, or the index it came from
    /// with the manifest beside it as that instance's (`HEX.manifest.json`);
    /// and a hard link to each of its blobs the staging has (those it lacks
    /// the store has: the copy reuses them).
    fn dir_view(&self, manifest: &Held, index: Option<&Held>) -> anyhow::Result<PathBuf> {
        let layout = self.layout()?;
        let dir = layout.with_file_name("dir");
        let made = (|| {
            std::fs::create_dir(&dir)?;
            std::fs::write(dir.join("version"), "Directory Transport Version: 1.1\n")?;
            match index {
                Some(index) => {
                    std::fs::write(dir.join("manifest.json"), &index.raw)?;
                    let instance = format!("{}.manifest.json", manifest.digest.hex());
                    std::fs::write(dir.join(instance), &manifest.raw)?;
                }
                None => std::fs::write(dir.join("manifest.json"), &manifest.raw)?,
            }
            let blobs = match crate::manifest::parse(&manifest.raw) {
                Ok(Parsed::Manifest(m, _)) => {
                    m.blobs().map(|d| d.digest.hex().to_owned()).collect()
                }
                _ => Vec::new(),
            };
            for hex in blobs {
                let blob = layout.join("blobs/sha256").join(&hex);
                if blob.is_file() {
                    std::fs::hard_link(blob, dir.join(hex))?;
                }
            }
            std::io::Result::Ok(())
        })();
        made.with_context(|| format!("making {}", dir.display()))?;
        Ok(dir)
    }

    /// Run root's skopeo with `args`, locally: a clean environment, no
    /// stdin. Its stdout, if it succeeds.
    async fn skopeo(&self, args: &[&str]) -> anyhow::Result<Vec<u8>> {
        let skopeo = &self.writer.skopeo;
        let mut c = tokio::process::Command::new(skopeo);
        c.args(args)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .envs(self.writer.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(domain) = self.writer.domain.as_deref() {
            let domain = CString::new(domain)?;
            #[allow(unsafe_code)]
            // SAFETY: between fork and exec the child only makes the
            // open(2), write(2) and close(2) calls of `set_exec_context`, on
            // memory made before the fork: nothing that allocates or locks.
            unsafe {
                c.pre_exec(move || set_exec_context(&domain));
            }
        }
        let out = c
            .output()
            .await
            .with_context(|| format!("starting {}", skopeo.display()))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            let msg = last
                .split_once("msg=")
                .map_or(last, |(_, m)| m.trim_matches('"'));
            return Err(Failure::new(
                Kind::Handoff,
                format!("skopeo failed ({}): {}", out.status, one_line(msg)),
            )
            .into());
        }
        Ok(out.stdout)
    }
}

/// Make the next `execve` of this thread enter the SELinux context `domain`
/// (libselinux's `setexeccon`), in the child between fork and exec.
fn set_exec_context(domain: &CStr) -> std::io::Result<()> {
    const ATTR: &CStr = c"/proc/thread-self/attr/exec";
    let bytes = domain.to_bytes_with_nul();
    #[allow(unsafe_code)]
    // SAFETY: `ATTR` and `bytes` are valid for the calls; the fd is ours.
    unsafe {
        let fd = libc::open(ATTR.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if usize::try_from(n).ok() != Some(bytes.len()) {
            return Err(err);
        }
    }
    Ok(())
}

/// The platform the entry of `index` for `digest` names.
fn entry_platform(index: &[u8], digest: &Sha256Digest) -> Option<crate::manifest::Platform> {
    match crate::manifest::parse(index) {
        Ok(Parsed::Index(i)) => {
            i.manifests
                .into_iter()
                .find(|d| d.digest == *digest)?
                .platform
        }
        _ => None,
    }
}
