//! Where a pull's verified blobs go, as the plan chose it: an OCI layout, or
//! an ostree repository through a staging layout and the import. The fetch
//! asks it for the layout and what it holds already, and begins it once the
//! image is accepted; the CLI finishes it, or abandons it after a failure.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Context;

use crate::digest::Sha256Digest;
use crate::error::{Failure, Kind};
use crate::imgref::{ImageRef, Target};
use crate::manifest::Manifest;
use crate::store::Layout;
use crate::store::import::Running;
use crate::store::ostree::Staging;
use crate::wire::import::{Holdings, Imported, Start};

/// A pull's destination.
#[derive(Debug)]
pub enum Destination {
    /// `oci:DIR`: the layout itself.
    Oci(PathBuf),
    /// `ostree:REPO[:REF]`: a staging layout in `REPO/tmp`, made only when the
    /// fetch first asks for it (once the signature policy has accepted the
    /// image), imported by `program` ([`crate::store::import`]) as the fetch
    /// fills it, and removed either way.
    Ostree {
        /// The import's command line: the repository and the ref among it.
        start: Box<Start>,
        /// The import's program, found before anything is fetched.
        program: PathBuf,
        /// What the repository holds of the image, once read.
        /// Or why it could not be read, for each who asks.
        holdings: tokio::sync::OnceCell<Result<Box<Holdings>, String>>,
        /// The staging layout, once made.
        staging: OnceLock<Staging>,
        /// The import, started with the pull; none once finished or abandoned.
        import: Mutex<Option<Box<Running>>>,
        /// Notified when an import fails before the pull is done.
        failed: Arc<tokio::sync::Notify>,
    },
    /// `containers-storage:`: a staging layout, copied into the store by
    /// root's skopeo after a good pull ([`crate::store::cstorage`]).
    Storage(Box<crate::store::cstorage::Storage>),
}

impl Destination {
    /// The destination `target` names, for a pull of `image`. An ostree one
    /// needs the import's program: without it the pull fails now (exit 10),
    /// before it fetches. With it, the import starts at once, and reads what
    /// the repository holds ([`crate::store::import::start`]).
    pub fn of(target: &Target, image: &ImageRef) -> anyhow::Result<Self> {
        Ok(match target {
            Target::Oci { dir, .. } => Self::Oci(dir.clone()),
            Target::Storage { dest, writer, .. } => Self::Storage(Box::new(
                crate::store::cstorage::Storage::new(dest, image, writer),
            )),
            Target::Ostree { dest, .. } => {
                let handoff = |e: anyhow::Error| Failure::new(Kind::Handoff, format!("{e:#}"));
                let program = crate::store::import::program().map_err(handoff)?;
                let start = Start {
                    proxy: std::env::current_exe()
                        .context("finding hostpull's own program")
                        .map_err(handoff)?,
                    dest: dest.clone(),
                    image: image.clone(),
                };
                let failed = Arc::default();
                let running = crate::store::import::start(&program, &start, Arc::clone(&failed));
                Self::Ostree {
                    import: Mutex::new(Some(Box::new(running.map_err(handoff)?))),
                    holdings: tokio::sync::OnceCell::new(),
                    start: Box::new(start),
                    program,
                    staging: OnceLock::new(),
                    failed,
                }
            }
        })
    }

    /// The layout the fetch writes; for `ostree:`, the staging layout, made
    /// on the first call.
    pub fn layout(&self) -> anyhow::Result<PathBuf> {
        match self {
            Self::Oci(dir) => Ok(dir.clone()),
            Self::Storage(s) => s.layout(),
            Self::Ostree { start, staging, .. } => {
                if let Some(s) = staging.get() {
                    return Ok(s.layout());
                }
                let made = Staging::new(&start.dest.repo)?;
                Ok(staging.get_or_init(|| made).layout())
            }
        }
    }

    /// Whether the layout is only a means (the staging layout): it keeps no
    /// old images and is not synced as a published one.
    pub fn ephemeral(&self) -> bool {
        !matches!(self, Self::Oci(_))
    }

    /// The manifest `digest` if an `oci:` layout holds it: a regular file
    /// under its digest (opened without following a link, and without
    /// waiting on a FIFO), of `size` where that is known (an index names it),
    /// at most [`MANIFEST_MAX`](crate::manifest::MANIFEST_MAX) bytes, that
    /// hashes to it. A copy that does not (a layout changed by hand) is not
    /// used: the registry's is, and the layout gets it back. Reads only; never
    /// for `ostree:`, whose repository keeps no manifest as served. For
    /// `containers-storage:`, the image under the name, if it is `digest`.
    pub async fn held_manifest(&self, digest: &Sha256Digest, size: Option<u64>) -> Option<Vec<u8>> {
        let dir = match self {
            Self::Oci(dir) => dir,
            Self::Storage(s) => return s.held_manifest(digest).await,
            Self::Ostree { .. } => return None,
        };
        let max = crate::manifest::MANIFEST_MAX;
        let raw = read_plain(&dir.join("blobs/sha256").join(digest.hex()), max)?;
        if size.is_some_and(|s| s != raw.len() as u64) {
            return None;
        }
        (crate::digest::sha256(&raw) == *digest).then_some(raw)
    }

    /// Whether the destination has an image under `tag` (for `ostree:`, under
    /// the image's reference, as the import read the repository). A pull of
    /// a tag it has is most often the timer's check that finds nothing new,
    /// which asks the registry for the manifest alone. Reads only; what
    /// cannot be read is not had.
    pub async fn holds_tag(&self, tag: &str) -> bool {
        match self {
            Self::Oci(dir) => read_plain(&dir.join("index.json"), crate::manifest::MANIFEST_MAX)
                .and_then(|raw| serde_json::from_slice::<serde_json::Value>(&raw).ok())
                .and_then(|index| {
                    let tagged =
                        |m: &serde_json::Value| m["annotations"][crate::store::REF_NAME] == tag;
                    Some(index["manifests"].as_array()?.iter().any(tagged))
                })
                .unwrap_or(false),
            Self::Ostree { .. } => self.holdings().await.is_ok_and(|h| h.manifest.is_some()),
            Self::Storage(s) => s.holds_name().await,
        }
    }

    /// What an ostree repository holds of the image, as the import read it
    /// when the pull started; asked once, its failure kept for each who asks.
    async fn holdings(&self) -> anyhow::Result<&Holdings> {
        let Self::Ostree {
            import, holdings, ..
        } = self
        else {
            anyhow::bail!("an OCI layout has no holdings");
        };
        let held = holdings
            .get_or_init(|| async {
                let asked = (import.lock().unwrap_or_else(|p| p.into_inner()))
                    .as_mut()
                    .and_then(|r| r.holdings());
                match asked {
                    Some(a) => a.await.map(Box::new).map_err(|e| format!("{e:#}")),
                    None => Err("what the repository holds could not be read".into()),
                }
            })
            .await;
        held.as_deref().map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The blobs of the verified image (`digest`, the registry's `served`
    /// before a conversion) that the destination has already, so that the
    /// fetch leaves them out (an OCI layout's own are found there).
    pub async fn held(
        &self,
        digest: &Sha256Digest,
        served: &Sha256Digest,
        manifest: &Manifest,
    ) -> anyhow::Result<HashSet<Sha256Digest>> {
        match self {
            Self::Oci(_) => return Ok(HashSet::new()),
            Self::Storage(s) => return Ok(s.held_blobs(served, manifest).await),
            Self::Ostree { .. } => {}
        }
        // A failed answer fails the pull (exit 10, never retried).
        let holdings =
            (self.holdings().await).map_err(|e| Failure::new(Kind::Handoff, format!("{e:#}")))?;
        Ok(holdings.held(digest, manifest))
    }

    /// The image is accepted and `layout` (from [`Self::layout`]) locked:
    /// for `ostree:`, stage its verified manifest (`digest`, `raw`) and send
    /// the running import the rest of its request, so that it imports beside
    /// the fetch, waiting for each blob ([`crate::confined::layout_proxy`]). Once per
    /// image: a retry goes on with the running import; a different manifest
    /// (the tag moved between two credentials' tries) abandons it, and a new
    /// one starts (`ostree::a_tag_that_moves_between_credentials_imports_what_it_names_last`).
    /// Nothing for `oci:`; `containers-storage:` keeps the registry's
    /// manifest as `served`, which is what the store gets.
    pub async fn begin(
        &self,
        layout: &Layout,
        tag: &str,
        (digest, raw): (&Sha256Digest, &[u8]),
        served: crate::store::cstorage::Served<'_>,
    ) -> anyhow::Result<()> {
        let Self::Ostree {
            start,
            program,
            import,
            failed,
            ..
        } = self
        else {
            if let Self::Storage(s) = self {
                s.begin(served);
            }
            return Ok(());
        };
        let mut running = {
            let mut running = import.lock().unwrap();
            match running.as_ref().map(|r| r.digest()) {
                Some(Some(d)) if d == digest => return Ok(()),
                _ => running.take(),
            }
        };
        // Begun with another manifest: a new import, whose reading of the
        // repository is not needed again.
        if let Some(old) = running.take_if(|r| r.digest().is_some())
            && let Some(e) = old.abandon().await
        {
            tracing::debug!("the import of the other manifest: {e:#}");
        }
        let running = match running {
            Some(r) => r,
            None => crate::store::import::start(program, start, Arc::clone(failed))
                .map(Box::new)
                .map_err(|e| Failure::new(Kind::Handoff, format!("{e:#}")))?,
        };
        // Put back either way, even if the pull is stopped while the request
        // is sent: a failed pull abandons it, and hears its error.
        let mut back = PutBack(import, Some(running));
        let staged = layout.write_blob("manifest", digest, raw);
        let path = staged.and_then(|()| self.layout());
        if let (Ok(path), Some(running)) = (&path, &mut back.1) {
            running.begin(path, tag, digest).await;
        }
        path.map(drop)
    }

    /// After a good pull: nothing more for `oci:`; for `ostree:`, tell the
    /// import the pull is done, and wait for it (dropped, it stops the
    /// import); for `containers-storage:`, copy the staged image into the
    /// store.
    pub async fn finish(&self) -> anyhow::Result<Finished> {
        if let Self::Storage(s) = self {
            return s.finish().await.map(Finished::Stored);
        }
        match self.take_import() {
            Some(running) if running.digest().is_some() => {
                running.finish().await.map(Finished::Imported)
            }
            None if matches!(self, Self::Oci(_)) => Ok(Finished::Published),
            unbegun => {
                if let Some(running) = unbegun {
                    running.abandon().await;
                }
                crate::error::fail(Kind::Handoff, "the pull began no import")
            }
        }
    }

    /// After a failed pull: stop the import, if one began, and wait until it
    /// has removed what it made. Returns the import's own error if it failed
    /// first ([`Self::import_failed`]).
    pub async fn abandon(&self) -> Option<anyhow::Error> {
        self.take_import()?.abandon().await
    }

    /// Resolves if an import fails before the pull is done: the fetch need
    /// not go on. Never for `oci:`.
    pub async fn import_failed(&self) {
        match self {
            Self::Oci(_) | Self::Storage(_) => std::future::pending().await,
            Self::Ostree { failed, .. } => failed.notified().await,
        }
    }

    fn take_import(&self) -> Option<Box<Running>> {
        match self {
            Self::Oci(_) | Self::Storage(_) => None,
            Self::Ostree { import, .. } => import.lock().unwrap().take(),
        }
    }
}

/// What finishing a destination did.
#[derive(Debug)]
pub enum Finished {
    /// The `oci:` layout is published; nothing more.
    Published,
    /// What the ostree import did.
    Imported(Imported),
    /// How consumers name the image in the store: `containers-storage:[STORE]NAME@DIGEST`.
    Stored(String),
}

/// An import taken out of its destination, put back when dropped.
struct PutBack<'a>(&'a Mutex<Option<Box<Running>>>, Option<Box<Running>>);

impl Drop for PutBack<'_> {
    fn drop(&mut self) {
        let mut slot = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = self.1.take();
    }
}

/// The bytes of `path` if it is a regular file of at most `max` bytes,
/// opened without following a link and without waiting on a FIFO.
fn read_plain(path: &std::path::Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let (file, len) = crate::open::regular(path, crate::open::Links::Refuse).ok()?;
    if len > max {
        return None;
    }
    let mut raw = Vec::new();
    file.take(max + 1).read_to_end(&mut raw).ok()?;
    Some(raw)
}
