//! The OCI image layout writer. Everything goes through a cap-std `Dir` for the
//! destination. Blobs are written to anonymous temp files and linked into place
//! only once verified; `index.json` is replaced atomically; a lock on the layout
//! directory makes concurrent pulls into one layout take turns.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use cap_std_ext::cap_std::ambient_authority;
use cap_std_ext::cap_std::fs::{Dir, Permissions, PermissionsExt};
use cap_std_ext::cap_tempfile::TempFile;
use cap_std_ext::dirext::CapStdExtDirExt;
use fn_error_context::context;
use serde_json::{Value, json};

use crate::digest::Sha256Digest;
use crate::error::{Failure, Kind, fail};
use crate::manifest::Descriptor;
use crate::verify::Verifier;

pub mod cstorage;
mod dest;
pub mod import;
pub mod ostree;

pub use dest::{Destination, Finished};

const BLOBS: &str = "blobs/sha256";
const INDEX: &str = "index.json";
const OCI_LAYOUT: &str = "oci-layout";
/// The annotation that names a tag in an OCI layout's index.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// Layout files are world-readable: host-update consumers read them through their
/// own unprivileged skopeo (rpm-ostree#5408).
const FILE_MODE: u32 = 0o644;
const DIR_MODE: u32 = 0o755;
/// Blob bytes are written to disk in pieces of this size.
const WRITE_BUF: usize = 1 << 20;

/// An OCI image layout, locked for this process while it is open.
#[derive(Debug)]
pub struct Layout {
    path: PathBuf,
    dir: Dir,
    blobs: Dir,
    /// What the destination was before; an unpublished pull restores that.
    origin: Origin,
    /// Blobs this pull linked into place, removed again if it never publishes.
    added: Mutex<Vec<String>>,
    published: AtomicBool,
    /// Whether the blobs must be on disk before the tag, and an unpublished
    /// pull's removed: false for a layout read once and removed by its owner
    /// ([`Layout::ephemeral`]).
    durable: bool,
    /// The layout directory opened for real (not `O_PATH`), holding the lock.
    lock: OwnedFd,
}

impl Layout {
    /// Open the layout at `path`, creating it if needed, and wait for its lock.
    #[context("opening OCI layout {}", path.display())]
    pub fn open_locked(path: &Path) -> anyhow::Result<Self> {
        // A pull that failed on a layout it created removes the directory while it
        // holds the lock; whoever waited on that lock then finds an unlinked
        // directory and starts over.
        if path.exists() && !path.is_dir() {
            return fail(
                Kind::Usage,
                format!("{} exists and is not a directory", path.display()),
            );
        }
        loop {
            let created = match std::fs::create_dir(path) {
                Ok(()) => true,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::create_dir_all(path)?;
                    true
                }
                Err(e) => return Err(e.into()),
            };
            let dir = Dir::open_ambient_dir(path, ambient_authority())?;
            let lock = dir.reopen_as_ownedfd()?;
            rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)?;
            if rustix::fs::fstat(&lock)?.st_nlink == 0 {
                continue;
            }
            return Self::init(path, dir, lock, created);
        }
    }

    fn init(path: &Path, dir: Dir, lock: OwnedFd, created: bool) -> anyhow::Result<Self> {
        if created {
            dir.set_permissions(".", Permissions::from_mode(DIR_MODE))?;
        }
        let mut origin = if created { Origin::New } else { Origin::Layout };
        match dir.read_to_string(OCI_LAYOUT) {
            Ok(s) => {
                let v: Value = serde_json::from_str(&s).unwrap_or_default();
                if v["imageLayoutVersion"] != "1.0.0" {
                    return fail(
                        Kind::Usage,
                        format!("{}: unsupported oci-layout {s:?}", path.display()),
                    );
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if dir.entries()?.next().is_some() {
                    return fail(
                        Kind::Usage,
                        format!(
                            "{} exists, is not empty and is not an OCI image layout",
                            path.display()
                        ),
                    );
                }
                dir.atomic_write_with_perms(
                    OCI_LAYOUT,
                    br#"{"imageLayoutVersion":"1.0.0"}"#,
                    Permissions::from_mode(FILE_MODE),
                )?;
                if !created {
                    origin = Origin::Empty;
                }
            }
            Err(e) => {
                return fail(Kind::Usage, format!("{}/{OCI_LAYOUT}: {e}", path.display()));
            }
        }
        // A file, a dangling symlink or a loop where the blob directories belong
        // is a layout that is not one (2), not an internal error.
        for d in ["blobs", BLOBS] {
            let bad = |why: &dyn std::fmt::Display| {
                Failure::new(
                    Kind::Usage,
                    format!(
                        "{}/{d}: {why}: not a usable OCI image layout",
                        path.display()
                    ),
                )
            };
            match dir.metadata_optional(d).map_err(|e| bad(&e))? {
                None => {
                    dir.create_dir(d).map_err(|e| bad(&e))?;
                    dir.set_permissions(d, Permissions::from_mode(DIR_MODE))?;
                }
                Some(m) if m.is_dir() => {}
                Some(_) => return Err(bad(&"not a directory").into()),
            }
        }
        let blobs = dir.open_dir(BLOBS)?;
        Ok(Self {
            path: path.to_owned(),
            dir,
            blobs,
            origin,
            added: Mutex::default(),
            published: AtomicBool::new(false),
            durable: true,
            lock,
        })
    }

    /// A layout that is read once and then removed (`--dest ostree:`'s
    /// staging, which the import reads): no early writeback, no `syncfs`
    /// before the tag. Nothing relies on it surviving a crash (ostree syncs
    /// what it imports), and what the kernel has not written back by the time
    /// the staging is removed never reaches the disk at all. Its owner removes
    /// it, not a failed pull's drop.
    pub fn ephemeral(&mut self) {
        self.durable = false;
    }

    fn write_error(&self, e: std::io::Error) -> anyhow::Error {
        write_error(&self.path, e)
    }

    /// A blob is reused when the file named by its digest exists with the right
    /// size. Only verified bytes are ever linked under that name.
    pub fn has_blob(&self, d: &Descriptor) -> anyhow::Result<bool> {
        Ok(self
            .blobs
            .symlink_metadata_optional(d.digest.hex())?
            .is_some_and(|m| m.is_file() && m.len() == d.size))
    }

    /// Start receiving a blob: a temp file that is hashed as it is written.
    pub fn blob_sink(
        &self,
        what: &str,
        digest: &Sha256Digest,
        size: u64,
    ) -> anyhow::Result<BlobSink<'_>> {
        Ok(BlobSink {
            layout: self,
            tmp: TempFile::new(&self.blobs).context("creating temp blob")?,
            verifier: Verifier::new(what, digest.clone(), size),
            digest: digest.clone(),
            buf: vec![0; WRITE_BUF].into_boxed_slice(),
            len: 0,
        })
    }

    /// Verify and store a blob that is already in memory (a manifest).
    pub fn write_blob(
        &self,
        what: &str,
        digest: &Sha256Digest,
        bytes: &[u8],
    ) -> anyhow::Result<()> {
        let mut sink = self.blob_sink(what, digest, bytes.len() as u64)?;
        sink.write(bytes)?;
        sink.commit()
    }

    /// A blob's bytes, as stored.
    pub fn read_blob(&self, digest: &Sha256Digest) -> anyhow::Result<Vec<u8>> {
        Ok(self.blobs.read(digest.hex())?)
    }

    /// Publish: point `tag` at a manifest in `index.json`, replacing the tag's
    /// old entry. Blobs are synced to disk first; the index is replaced
    /// atomically, so a reader sees the old or the new one.
    #[context("updating index.json")]
    pub fn set_tag(
        &self,
        tag: &str,
        media_type: &str,
        digest: &Sha256Digest,
        size: u64,
    ) -> anyhow::Result<()> {
        if self.durable {
            rustix::fs::syncfs(&self.lock).context("syncing blobs")?;
        }
        let mut index = self.read_index()?;
        let manifests = index["manifests"]
            .as_array_mut()
            .context("index.json has no manifests array")?;
        manifests.retain(|m| m["annotations"][REF_NAME] != tag);
        manifests.push(json!({
            "mediaType": media_type,
            "digest": digest,
            "size": size,
            "annotations": { REF_NAME: tag },
        }));
        let bytes = serde_json::to_vec(&index)?;
        self.dir
            .atomic_write_with_perms(INDEX, bytes, Permissions::from_mode(FILE_MODE))?;
        self.published.store(true, Ordering::Release);
        Ok(())
    }

    fn read_index(&self) -> anyhow::Result<Value> {
        match self.dir.read(INDEX) {
            Ok(b) => match serde_json::from_slice::<Value>(&b) {
                Ok(v) if v["manifests"].is_array() => Ok(v),
                _ => fail(
                    Kind::Usage,
                    format!(
                        "{}/index.json is not a valid OCI index",
                        self.path.display()
                    ),
                ),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(json!({
                "schemaVersion": 2,
                "mediaType": crate::manifest::OCI_INDEX,
                "manifests": [],
            })),
            // A directory where index.json belongs, say: not an internal error.
            Err(e) => fail(
                Kind::Usage,
                format!("{}/index.json: {e}", self.path.display()),
            ),
        }
    }
}

/// A full disk is the destination's problem, said plainly (exit 11, as when
/// the space check finds it before the first blob).
fn write_error(path: &Path, e: std::io::Error) -> anyhow::Error {
    if e.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error()) {
        crate::error::Failure::new(
            Kind::NoSpace,
            format!("no space left on the device of {}", path.display()),
        )
        .into()
    } else {
        anyhow::Error::new(e).context("writing blob")
    }
}

/// A pull that ends without publishing (an error, a cancel) leaves the layout as
/// it found it: the blobs it added are removed, and so is a layout it created.
/// A crash skips this; the next pull then reuses the verified blobs it finds.
impl Drop for Layout {
    fn drop(&mut self) {
        // A staging layout is its owner's to remove, once its import is done
        // or abandoned: a failed try (a credential refused) must not pull it
        // from under the import, which reads it until then.
        if *self.published.get_mut() || !self.durable {
            return;
        }
        let result = match self.origin {
            Origin::New => std::fs::remove_dir_all(&self.path),
            Origin::Empty => self
                .dir
                .remove_dir_all("blobs")
                .and_then(|()| self.dir.remove_file(OCI_LAYOUT)),
            Origin::Layout => self
                .added
                .get_mut()
                .unwrap()
                .iter()
                .try_for_each(|hex| self.blobs.remove_file(hex)),
        };
        if let Err(e) = result {
            tracing::warn!("cleaning up {}: {e}", self.path.display());
        }
    }
}

/// What a pull's destination was before the pull.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Nothing: the pull made the directory.
    New,
    /// An empty directory (a mount point, say).
    Empty,
    /// An OCI image layout.
    Layout,
}

/// What `hostpull prune` removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Pruned {
    /// Blobs removed.
    pub blobs: usize,
    /// Bytes freed.
    pub bytes: u64,
}

impl Layout {
    /// Remove every blob that no tag in `index.json` reaches, through manifests
    /// and nested indexes. Runs under the layout lock, so never beside a pull.
    #[context("pruning {}", self.path.display())]
    pub fn prune(&self) -> anyhow::Result<Pruned> {
        let index = self.read_index()?;
        let mut keep = std::collections::HashSet::new();
        let mut todo: Vec<Value> = vec![index];
        while let Some(doc) = todo.pop() {
            let descriptors = doc["manifests"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(doc["layers"].as_array().into_iter().flatten())
                .chain(std::iter::once(&doc["config"]).filter(|c| c.is_object()));
            for d in descriptors {
                let Some(digest) = d["digest"].as_str().and_then(Sha256Digest::parse) else {
                    continue;
                };
                let is_manifest = doc["manifests"].is_array();
                if keep.insert(digest.hex().to_owned()) && is_manifest {
                    // A manifest or index: what it references is kept too.
                    let bytes = self.read_blob(&digest)?;
                    todo.push(
                        serde_json::from_slice(&bytes)
                            .with_context(|| format!("parsing {digest}"))?,
                    );
                }
            }
        }
        let mut pruned = Pruned::default();
        for entry in self.blobs.entries()? {
            let entry = entry?;
            let name = entry.file_name().into_string().unwrap_or_default();
            if !keep.contains(&name) {
                pruned.bytes += entry.metadata()?.len();
                pruned.blobs += 1;
                self.blobs.remove_file(&name)?;
            }
        }
        Ok(pruned)
    }
}

/// A blob being received. Every chunk is hashed as it arrives; the file is
/// linked under its digest by [`BlobSink::commit`] only once digest and size
/// match. Dropped uncommitted, the anonymous temp file vanishes.
#[derive(Debug)]
pub struct BlobSink<'a> {
    layout: &'a Layout,
    tmp: TempFile<'a>,
    verifier: Verifier,
    digest: Sha256Digest,
    /// Bytes received and hashed, not yet written: `buf[..len]`.
    buf: Box<[u8]>,
    len: usize,
}

impl BlobSink<'_> {
    /// Hash and buffer a chunk; fails at the first byte past the declared size.
    pub fn write(&mut self, mut chunk: &[u8]) -> anyhow::Result<()> {
        while !chunk.is_empty() {
            let spare = self.spare();
            let n = spare.len().min(chunk.len());
            spare[..n].copy_from_slice(&chunk[..n]);
            self.filled(n)?;
            chunk = &chunk[n..];
        }
        Ok(())
    }

    /// Where the next bytes go: a reader fills it, then calls [`Self::filled`].
    /// Reading straight into the write buffer saves a copy of every byte.
    pub fn spare(&mut self) -> &mut [u8] {
        &mut self.buf[self.len..]
    }

    /// The first `n` bytes of [`Self::spare`] arrived: hash them, and write
    /// the buffer out once it is full.
    pub fn filled(&mut self, n: usize) -> anyhow::Result<()> {
        self.verifier.update(&self.buf[self.len..self.len + n])?;
        self.len += n;
        if self.len == self.buf.len() {
            self.flush()?;
        }
        Ok(())
    }

    /// Would `n` more bytes fill the buffer, so that it goes to disk (and
    /// so possibly blocks)?
    pub fn would_flush(&self, n: usize) -> bool {
        self.len + n >= self.buf.len()
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        self.tmp
            .write_all(&self.buf[..self.len])
            .map_err(|e| self.layout.write_error(e))?;
        self.len = 0;
        Ok(())
    }

    /// Check the blob's digest and size, then move it into place.
    pub fn commit(mut self) -> anyhow::Result<()> {
        self.flush()?;
        self.verifier.finish()?;
        if self.layout.durable {
            start_writeback(self.tmp.as_file());
        }
        self.tmp
            .as_file()
            .set_permissions(Permissions::from_mode(FILE_MODE))?;
        self.tmp
            .replace(self.digest.hex())
            .context("linking verified blob")?;
        self.layout
            .added
            .lock()
            .unwrap()
            .push(self.digest.hex().to_owned());
        Ok(())
    }
}

/// Start writing a complete blob back to disk, without waiting for it: the
/// `syncfs` before `index.json` (the durability) then finds little left to do,
/// while this blob's reader goes on at once (an `fdatasync` here blocked it and
/// was slower). Advisory: if it fails, the final `syncfs` still writes it all.
#[allow(unsafe_code)]
fn start_writeback(file: impl std::os::fd::AsFd) {
    use std::os::fd::AsRawFd;
    // SAFETY: sync_file_range(2) on a descriptor we hold reads and writes no
    // memory of ours; offset 0 and length 0 mean the whole file.
    let r = unsafe {
        libc::sync_file_range(file.as_fd().as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE)
    };
    if r != 0 {
        tracing::debug!("sync_file_range: {}", std::io::Error::last_os_error());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::sha256;

    fn desc(bytes: &[u8]) -> Descriptor {
        Descriptor {
            media_type: String::new(),
            digest: sha256(bytes),
            size: bytes.len() as u64,
            urls: vec![],
            platform: None,
            annotations: Default::default(),
        }
    }

    /// A reader fills the sink's own buffer in pieces of any size: every byte
    /// is hashed once and written once, across the buffer's end too.
    #[test]
    fn a_sink_is_filled_in_place() {
        let td = tempfile::tempdir().unwrap();
        let l = Layout::open_locked(&td.path().join("layout")).unwrap();
        let bytes: Vec<u8> = (0..WRITE_BUF * 2 + 12_345)
            .map(|i| (i % 251) as u8)
            .collect();
        let d = desc(&bytes);
        let mut sink = l.blob_sink("layer", &d.digest, d.size).unwrap();
        let mut rest = &bytes[..];
        // 333 333 does not divide the buffer, so pieces straddle its end,
        // where `spare` is shorter than the piece.
        while !rest.is_empty() {
            let spare = sink.spare();
            let n = spare.len().min(rest.len()).min(333_333);
            spare[..n].copy_from_slice(&rest[..n]);
            sink.filled(n).unwrap();
            rest = &rest[n..];
        }
        sink.commit().unwrap();
        assert_eq!(l.read_blob(&d.digest).unwrap(), bytes);
        // `write` goes the same way; a byte too many is refused at once.
        let mut sink = l.blob_sink("layer", &d.digest, d.size).unwrap();
        sink.write(&bytes).unwrap();
        let spare = sink.spare();
        spare[0] = 1;
        let e = sink.filled(1).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 7, "{e:#}");
    }

    #[test]
    fn write_verify_and_tag() {
        let td = tempfile::tempdir().unwrap();
        let path = td.path().join("layout");
        let l = Layout::open_locked(&path).unwrap();
        let d = desc(b"blob");
        assert!(!l.has_blob(&d).unwrap());
        // Wrong bytes are refused and leave nothing.
        let e = l.write_blob("layer", &d.digest, b"blub").unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 7);
        assert!(!l.has_blob(&d).unwrap());
        let mut sink = l.blob_sink("layer", &d.digest, 4).unwrap();
        sink.write(b"bl").unwrap();
        sink.write(b"ob").unwrap();
        sink.commit().unwrap();
        assert!(l.has_blob(&d).unwrap());
        l.set_tag("v1", "m", &d.digest, 4).unwrap();
        l.set_tag("v2", "m", &d.digest, 4).unwrap();
        l.set_tag("v1", "m2", &d.digest, 4).unwrap();
        let index: Value =
            serde_json::from_slice(&std::fs::read(path.join(INDEX)).unwrap()).unwrap();
        let tags: Vec<_> = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["annotations"][REF_NAME].as_str().unwrap(),
                    m["mediaType"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(tags, [("v2", "m"), ("v1", "m2")]);
        let names: Vec<_> = std::fs::read_dir(path.join(BLOBS))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, [d.digest.hex()], "no temp files");
        let mode = std::fs::metadata(path.join(BLOBS).join(d.digest.hex()))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o644
        );
        drop(l);
        assert!(Layout::open_locked(&path).unwrap().has_blob(&d).unwrap());
    }

    #[test]
    fn a_full_disk_is_exit_11_other_write_errors_internal() {
        let p = Path::new("/l");
        let full = std::io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error());
        let e = write_error(p, full);
        assert_eq!(crate::error::exit_code(&e), 11);
        assert_eq!(e.to_string(), "no space left on the device of /l");
        let eio = std::io::Error::from_raw_os_error(rustix::io::Errno::IO.raw_os_error());
        assert_eq!(crate::error::exit_code(&write_error(p, eio)), 1);
    }

    #[test]
    fn refuses_foreign_directory() {
        let td = tempfile::tempdir().unwrap();
        let file = td.path().join("a-file");
        std::fs::write(&file, "x").unwrap();
        assert_eq!(
            crate::error::exit_code(&Layout::open_locked(&file).unwrap_err()),
            2
        );
        std::fs::write(td.path().join("precious"), "x").unwrap();
        let e = Layout::open_locked(td.path()).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(td.path().join("precious").exists());
    }

    #[test]
    fn blob_dirs_that_are_not_dirs_are_usage_errors() {
        for blobs in [true, false] {
            let td = tempfile::tempdir().unwrap();
            let path = td.path().join("l");
            std::fs::create_dir(&path).unwrap();
            std::fs::write(
                path.join("oci-layout"),
                br#"{"imageLayoutVersion":"1.0.0"}"#,
            )
            .unwrap();
            if blobs {
                std::fs::write(path.join("blobs"), b"").unwrap();
            } else {
                std::fs::create_dir(path.join("blobs")).unwrap();
                std::fs::write(path.join("blobs/sha256"), b"").unwrap();
            }
            let e = Layout::open_locked(&path).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{e:#}");
            assert!(format!("{e:#}").contains("/blobs"), "{e:#}");
        }
        // oci-layout or index.json a directory.
        let td = tempfile::tempdir().unwrap();
        let path = td.path().join("l");
        std::fs::create_dir_all(path.join("oci-layout")).unwrap();
        let e = Layout::open_locked(&path).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2, "{e:#}");
        assert!(format!("{e:#}").contains("oci-layout"), "{e:#}");
        let path = td.path().join("m");
        let l = Layout::open_locked(&path).unwrap();
        std::fs::create_dir(path.join("index.json")).unwrap();
        let e = l
            .set_tag("t", crate::manifest::OCI_MANIFEST, &desc(b"x").digest, 1)
            .unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2, "{e:#}");
        assert!(format!("{e:#}").contains("index.json"), "{e:#}");
    }

    #[test]
    fn unpublished_pulls_leave_no_trace() {
        let td = tempfile::tempdir().unwrap();
        let path = td.path().join("new");
        let (a, b) = (desc(b"a"), desc(b"b"));
        // A layout this pull created goes away with it.
        let l = Layout::open_locked(&path).unwrap();
        l.write_blob("layer", &a.digest, b"a").unwrap();
        drop(l);
        assert!(!path.exists());
        // An empty directory (a mount point) is left empty.
        std::fs::create_dir(&path).unwrap();
        let l = Layout::open_locked(&path).unwrap();
        l.write_blob("layer", &a.digest, b"a").unwrap();
        drop(l);
        assert_eq!(std::fs::read_dir(&path).unwrap().count(), 0);
        // Published: kept.
        let l = Layout::open_locked(&path).unwrap();
        l.write_blob("layer", &a.digest, b"a").unwrap();
        l.set_tag("t", "m", &a.digest, 1).unwrap();
        drop(l);
        // An existing layout loses only what the unpublished pull added.
        let l = Layout::open_locked(&path).unwrap();
        l.write_blob("layer", &b.digest, b"b").unwrap();
        assert!(l.has_blob(&b).unwrap());
        drop(l);
        let l = Layout::open_locked(&path).unwrap();
        assert!(l.has_blob(&a).unwrap());
        assert!(!l.has_blob(&b).unwrap());
        assert!(path.join(INDEX).exists());
    }

    #[test]
    fn prune_keeps_what_tags_reach() {
        let td = tempfile::tempdir().unwrap();
        let l = Layout::open_locked(td.path()).unwrap();
        let blob = |b: &[u8]| {
            let d = sha256(b);
            l.write_blob("blob", &d, b).unwrap();
            d
        };
        let (config, layer, orphan) = (blob(b"{}"), blob(b"layer"), blob(b"orphan"));
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "config": {"digest": config, "size": 2},
            "layers": [{"digest": layer, "size": 5}],
        })
        .to_string();
        let m = blob(manifest.as_bytes());
        l.set_tag(
            "t",
            crate::manifest::OCI_MANIFEST,
            &m,
            manifest.len() as u64,
        )
        .unwrap();
        assert_eq!(l.prune().unwrap(), Pruned { blobs: 1, bytes: 6 });
        for d in [&config, &layer, &m] {
            assert!(l.read_blob(d).is_ok(), "{d} kept");
        }
        assert!(l.read_blob(&orphan).is_err());
        assert_eq!(l.prune().unwrap(), Pruned::default());
    }

    #[test]
    fn lock_serializes() {
        let td = tempfile::tempdir().unwrap();
        let path = td.path().join("l");
        let first = Layout::open_locked(&path).unwrap();
        let p2 = path.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let _second = Layout::open_locked(&p2).unwrap();
            tx.send(()).unwrap();
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(300))
                .is_err(),
            "second pull must wait"
        );
        drop(first);
        rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
        t.join().unwrap();
    }
}
