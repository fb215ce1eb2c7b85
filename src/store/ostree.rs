//! `--dest ostree:REPO[:REF]`: the pull goes into a private staging layout,
//! then ostree-ext's `ImageImporter` imports that verified layout into REPO the
//! way rpm-ostree and bootc store containers (`ostree/container/...` refs), and
//! REF, if given, points at the imported commit. Only the import needs the
//! `ostree` cargo feature.
//!
//! An update fetches only what the repository lacks: [`Holdings::held`]
//! decides, from the verified manifest and what REPO held as the pull started,
//! which blobs it has already, and the pull leaves those out of its "missing"
//! set. The staging layout then holds exactly what the
//! importer reads: the manifest, the config and the layers it has no commit
//! for (the proxy refuses a layer that is neither, once the pull is done).
//!
//! The import starts as soon as the manifest is staged and runs beside the
//! fetch, taking each blob once it is verified; it references nothing until
//! the pull is done, and removes the layer refs it made if the pull fails
//! ([`import_here`]).
//!
//! The import runs in a program of its own, `hostpull-ostree-import`
//! ([`crate::confined::import`], [`import_here`]), for an SELinux domain of its
//! own. ostree-ext reads the layout through its image proxy, which is that
//! program again serving the staged, verified files ([`crate::confined::layout_proxy`]):
//! no skopeo, no second hash, no network, no unit.
//!
//! Without the feature the import and what only it calls are compiled out; the
//! rest stays, with its tests, so both builds check it.
#![cfg_attr(not(feature = "ostree"), allow(dead_code))]

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::imgref::ImageRef;
use crate::wire::import::{Holdings, Imported, Request};

/// Where ostree-ext keeps the image refs (`ostree/container/image/<escaped ref>`).
pub const IMAGE_REF_PREFIX: &str = "ostree/container/image";
/// Where ostree-ext keeps one ref per imported layer
/// (`ostree/container/blob/<escaped digest>`), the commit that caches it.
pub const LAYER_REF_PREFIX: &str = "ostree/container/blob";
/// The staging directory: root-only, under `REPO/tmp`, on the repository's own
/// filesystem, where ostree also expires what a crash leaves. The layout is
/// its subdirectory `layout`. Dropping it removes it, whether the import
/// happened or not.
#[derive(Debug)]
pub struct Staging(tempfile::TempDir);

impl Staging {
    /// A new staging directory in `REPO/tmp`.
    pub fn new(repo: &Path) -> anyhow::Result<Self> {
        Self::in_dir(&repo.join("tmp"))
    }

    /// A new staging directory in `tmp`, root's alone.
    pub fn in_dir(tmp: &Path) -> anyhow::Result<Self> {
        tempfile::Builder::new()
            .prefix("hostpull-staging-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(tmp)
            .map(Self)
            .with_context(|| format!("creating a staging layout in {}", tmp.display()))
    }

    /// The staging directory.
    #[cfg(test)]
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// The OCI layout the pull writes.
    pub fn layout(&self) -> PathBuf {
        self.0.path().join("layout")
    }
}

/// The image reference the import is recorded under: the registry image, so
/// that rpm-ostree and bootc find it under the name they would pull it by.
pub fn target_imgref(image: &ImageRef) -> String {
    format!("ostree-unverified-registry:{image}")
}

/// What the repository `repo` holds for a pull of `image` ([`Holdings`]), in
/// this process, which is `hostpull-ostree-import` ([`crate::confined::import`]).
/// Without the `ostree` feature, planning refuses an ostree destination already.
#[fn_error_context::context("reading what ostree repository {} has", repo.display())]
pub fn holdings_here(repo: &Path, image: &ImageRef) -> anyhow::Result<Holdings> {
    #[cfg(not(feature = "ostree"))]
    {
        let _ = image;
        crate::error::fail(
            crate::error::Kind::Usage,
            "built without ostree support (cargo feature `ostree`)",
        )
    }
    #[cfg(feature = "ostree")]
    {
        use ostree_ext::container::OstreeImageReference;
        use ostree_ext::container::store::query_image;
        let repo = open_repo(repo)?;
        let target = OstreeImageReference::try_from(target_imgref(image).as_str())?;
        // An image ref whose commit cannot be read counts as absent, as in
        // ostree-ext's own try_query_image(): the pull then fetches it all.
        // hostpull logs this process's other lines as warnings.
        let manifest = query_image(&repo, &target.imgref)
            .unwrap_or_else(|e| {
                use std::io::Write;
                let e = crate::error::one_line(&format!("{e:#}"));
                let _ = writeln!(std::io::stderr(), "{e}");
                None
            })
            .map(|s| s.manifest_digest.to_string());
        let layers = (layer_refs(&repo)?.iter())
            .filter_map(|r| ostree_ext::refescape::unprefix_unescape_ref(LAYER_REF_PREFIX, r).ok())
            .collect();
        Ok(Holdings { manifest, layers })
    }
}

#[cfg(feature = "ostree")]
fn open_repo(path: &Path) -> anyhow::Result<ostree_ext::ostree::Repo> {
    let repo = ostree_ext::ostree::Repo::new_for_path(path);
    repo.open(ostree_ext::gio::Cancellable::NONE)?;
    Ok(repo)
}

/// Import the staged layout `layout:tag` (manifest `digest`) of `req` into
/// the repository, recorded as `image`, and point `dest`'s ref at the result: in
/// this process, which is `hostpull-ostree-import` ([`crate::confined::import`]).
/// The pull may still be fetching: `control` is its pipe
/// ([`crate::wire::import::Control`]), without close-on-exec so that the proxy
/// inherits it. Nothing is referenced before the pull says it is done.
/// Without the `ostree` feature, planning refuses an ostree destination already.
#[fn_error_context::context("importing into ostree repository {}", req.dest.repo.display())]
pub async fn import_here(req: &Request, control: std::os::fd::OwnedFd) -> anyhow::Result<Imported> {
    let Request {
        dest,
        image,
        digest,
        ..
    } = req;
    #[cfg(not(feature = "ostree"))]
    {
        let _ = (dest, image, digest, control);
        crate::error::fail(
            crate::error::Kind::Usage,
            "built without ostree support (cargo feature `ostree`)",
        )
    }
    #[cfg(feature = "ostree")]
    {
        use ostree_ext::container::OstreeImageReference;
        use ostree_ext::gio;

        let repo = open_repo(&dest.repo)?;
        let target = OstreeImageReference::try_from(target_imgref(image).as_str())?;
        // The image is there with this very manifest: nothing to read, and no
        // proxy to start (the pull fetched nothing either).
        let stored = ostree_ext::container::store::query_image(&repo, &target.imgref)
            .ok()
            .flatten()
            .filter(|s| s.manifest_digest.to_string() == digest.as_str());
        let (state, imported) = match stored {
            Some(s) => (s, false),
            None => {
                let before = layer_refs(&repo)?;
                let r = import_layout(&repo, &target, req, &control).await;
                r.map_err(|e| forget_new_layers(&repo, &before, e))?
            }
        };
        // An import waited for the pull before it wrote the image's ref (the
        // proxy's `CloseImage`); without one, wait here.
        if !imported {
            let mut c = crate::wire::import::Control::new(control);
            tokio::task::spawn_blocking(move || c.wait_done()).await??;
        }
        let mut refs = Vec::new();
        if let Some(r) = &dest.ostree_ref {
            repo.set_ref_immediate(None, r, Some(&state.merge_commit), gio::Cancellable::NONE)
                .with_context(|| format!("setting ref {r}"))?;
            refs.push(r.clone());
        }
        refs.push(ostree_ext::refescape::prefix_escape_for_ref(
            IMAGE_REF_PREFIX,
            &target.imgref.to_string(),
        )?);
        Ok(Imported {
            repo: dest.repo.clone(),
            commit: state.merge_commit.clone(),
            refs,
        })
    }
}

/// The layer refs of `repo` ([`LAYER_REF_PREFIX`]).
#[cfg(feature = "ostree")]
fn layer_refs(repo: &ostree_ext::ostree::Repo) -> anyhow::Result<Vec<String>> {
    let refs = repo
        .list_refs_ext(
            Some(LAYER_REF_PREFIX),
            ostree_ext::ostree::RepoListRefsExtFlags::empty(),
            ostree_ext::gio::Cancellable::NONE,
        )
        .context("listing the layer refs")?;
    Ok(refs.into_keys().map(|r| r.to_string()).collect())
}

/// After a failed import: ostree-ext commits each layer with its ref as the
/// layer ends, so the layers before the failure are referenced. Remove the
/// refs the import made, so that a failed pull leaves the refs as they were
/// (their objects go with the next prune). Returns `e`, with what could not
/// be removed.
#[cfg(feature = "ostree")]
fn forget_new_layers(
    repo: &ostree_ext::ostree::Repo,
    before: &[String],
    e: anyhow::Error,
) -> anyhow::Error {
    let now = match layer_refs(repo) {
        Ok(now) => now,
        Err(l) => return e.context(format!("{l:#}")),
    };
    for r in now.iter().filter(|r| !before.contains(r)) {
        if let Err(d) = repo.set_ref_immediate(None, r, None, ostree_ext::gio::Cancellable::NONE) {
            return e.context(format!("the import's layer ref {r} is left: {d}"));
        }
    }
    e
}

/// Serve the staging layout `layout:tag`, manifest `digest`, as the pull on
/// `control` fills it ([`crate::confined::layout_proxy`]), and import it into `repo` as
/// `target`. Also says whether it imported (`prepare()` may find the image
/// there already).
#[cfg(feature = "ostree")]
async fn import_layout(
    repo: &ostree_ext::ostree::Repo,
    target: &ostree_ext::container::OstreeImageReference,
    req: &Request,
    control: &std::os::fd::OwnedFd,
) -> anyhow::Result<(Box<ostree_ext::container::store::LayeredImageState>, bool)> {
    use ostree_ext::container::store::{ImageImporter, ImageProxyConfig, PrepareResult};
    use ostree_ext::container::{ImageReference, OstreeImageReference, SignatureSource, Transport};
    use std::os::fd::AsFd;

    let (layout, tag) = (&req.layout, &req.tag);
    // Unverified: hostpull checked every digest and the signature
    // policy already, before anything was written.
    let source = OstreeImageReference {
        sigverify: SignatureSource::ContainerPolicyAllowInsecure,
        imgref: ImageReference {
            transport: Transport::OciDir,
            name: format!("{}:{tag}", layout.display()),
        },
    };
    let config = ImageProxyConfig {
        // A local layout needs no credential: ostree-ext would otherwise pass
        // on the host's /etc/ostree/auth.json.
        auth_anonymous: true,
        skopeo_cmd: Some(crate::wire::layout::command(
            &req.proxy,
            layout,
            &req.digest,
            Some(control.as_fd()),
        )),
        ..Default::default()
    };
    let mut importer = ImageImporter::new(repo, &source, config)
        .await
        .map_err(with_proxy_detail)
        .with_context(|| format!("starting the layout proxy {}", req.proxy.display()))?;
    importer.set_target(target);
    Ok(match importer.prepare().await.map_err(with_proxy_detail)? {
        PrepareResult::AlreadyPresent(s) => (s, false),
        PrepareResult::Ready(p) => (importer.import(p).await.map_err(with_proxy_detail)?, true),
    })
}

/// containers-image-proxy 0.7 shows its `Other` errors as just "error": why
/// the proxy failed (its exit status and stderr) is only in the variant. Put
/// it in the message.
#[cfg(feature = "ostree")]
fn with_proxy_detail(e: anyhow::Error) -> anyhow::Error {
    use ostree_ext::containers_image_proxy::Error;
    let detail = e.chain().find_map(|c| match c.downcast_ref::<Error>() {
        Some(Error::Other(s)) => Some(s.to_string()),
        _ => None,
    });
    match detail {
        Some(d) => e.context(d),
        None => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_is_the_registry_image() {
        let image = ImageRef::parse("quay.io/fedora/fcos:stable").unwrap();
        assert_eq!(
            target_imgref(&image),
            "ostree-unverified-registry:quay.io/fedora/fcos:stable"
        );
    }

    #[test]
    fn staging_is_private_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let repo = tempfile::tempdir().unwrap();
        assert!(
            Staging::new(repo.path()).is_err(),
            "no tmp/: not a repository"
        );
        std::fs::create_dir(repo.path().join("tmp")).unwrap();
        let s = Staging::new(repo.path()).unwrap();
        let path = s.path().to_owned();
        assert_eq!(path.parent(), Some(repo.path().join("tmp").as_path()));
        assert_eq!(path.metadata().unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(s.layout(), path.join("layout"));
        drop(s);
        assert!(!path.exists());
    }
}
