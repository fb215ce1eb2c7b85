//! Where a pull's verified blobs go, as the plan chose it: an OCI layout, or
//! an ostree repository through a staging layout and the import. The fetch
//! asks it for the layout and what it holds already; the CLI finishes it.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::digest::Sha256Digest;
use crate::error::{Failure, Kind};
use crate::manifest::Manifest;
use crate::plan::imgref::{ImageRef, OstreeDest, Target};
use crate::store::ostree::{Imported, Request, Staging};

/// A pull's destination.
#[derive(Debug)]
pub enum Destination {
    /// `oci:DIR`: the layout itself.
    Oci(PathBuf),
    /// `ostree:REPO[:REF]`: a staging layout in `REPO/tmp`, made only when the
    /// fetch first asks for it (once the signature policy has accepted the
    /// image), imported by `program` ([`crate::store::import`]) and removed
    /// either way.
    Ostree {
        /// The repository and the ref.
        dest: OstreeDest,
        /// The import's program, found before anything is fetched.
        program: PathBuf,
        /// The staging layout, once made.
        staging: OnceLock<Staging>,
    },
}

impl Destination {
    /// The destination `target` names. An ostree one needs the import's
    /// program: without it the pull fails now (exit 10), before it fetches.
    pub fn of(target: &Target) -> anyhow::Result<Self> {
        Ok(match target {
            Target::Oci { dir, .. } => Self::Oci(dir.clone()),
            Target::Ostree { dest, .. } => Self::Ostree {
                dest: dest.clone(),
                program: crate::store::import::program()
                    .map_err(|e| Failure::new(Kind::Handoff, format!("{e:#}")))?,
                staging: OnceLock::new(),
            },
        })
    }

    /// The layout the fetch writes; for `ostree:`, the staging layout, made
    /// on the first call.
    pub fn layout(&self) -> anyhow::Result<PathBuf> {
        match self {
            Self::Oci(dir) => Ok(dir.clone()),
            Self::Ostree { dest, staging, .. } => {
                if let Some(s) = staging.get() {
                    return Ok(s.layout());
                }
                let made = Staging::new(&dest.repo)?;
                Ok(staging.get_or_init(|| made).layout())
            }
        }
    }

    /// Whether the layout is only a means (the staging layout): it keeps no
    /// old images and is not synced as a published one.
    pub fn ephemeral(&self) -> bool {
        matches!(self, Self::Ostree { .. })
    }

    /// The blobs of the verified image that the destination has already, so
    /// that the fetch leaves them out (an OCI layout's own are found there).
    pub fn held(
        &self,
        image: &ImageRef,
        digest: &Sha256Digest,
        manifest: &Manifest,
    ) -> anyhow::Result<HashSet<Sha256Digest>> {
        match self {
            Self::Oci(_) => Ok(HashSet::new()),
            Self::Ostree { dest, .. } => crate::store::ostree::held(dest, image, digest, manifest),
        }
    }

    /// After a good pull of `image` (manifest `digest`, tagged `tag` in the
    /// layout): nothing more for `oci:`; for `ostree:`, the import. Dropped,
    /// it stops the import.
    pub async fn finish(
        &self,
        tag: &str,
        image: &ImageRef,
        digest: &Sha256Digest,
    ) -> anyhow::Result<Option<Imported>> {
        let Self::Ostree {
            dest,
            program,
            staging,
        } = self
        else {
            return Ok(None);
        };
        let Some(staging) = staging.get() else {
            return crate::error::fail(Kind::Handoff, "the pull made no staging layout to import");
        };
        let req = Request {
            dest: dest.clone(),
            layout: staging.layout(),
            tag: tag.to_owned(),
            image: image.clone(),
            digest: digest.clone(),
        };
        crate::store::import::import(program, &req).await.map(Some)
    }
}
