//! `--dest ostree:REPO[:REF]`: the pull goes into a private staging layout as
//! usual, then ostree-ext's `ImageImporter` imports that verified layout into
//! REPO the way rpm-ostree and bootc store containers (`ostree/container/...`
//! refs), and REF, if given, points at the imported commit. Only the import
//! needs the `ostree` cargo feature.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::plan::imgref::OstreeDest;

/// Where ostree-ext keeps the image refs (`ostree/container/image/<escaped ref>`).
pub const IMAGE_REF_PREFIX: &str = "ostree/container/image";

/// The staging layout: a root-only directory under `REPO/tmp`, on the
/// repository's own filesystem, where ostree also expires what a crash leaves.
/// Dropping it removes it, whether the import happened or not.
#[derive(Debug)]
pub struct Staging(tempfile::TempDir);

impl Staging {
    pub fn new(repo: &Path) -> anyhow::Result<Self> {
        let tmp = repo.join("tmp");
        tempfile::Builder::new()
            .prefix("hostpull-staging-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(&tmp)
            .map(Self)
            .with_context(|| format!("Creating a staging layout in {}", tmp.display()))
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

/// What an import did, for the `--json` result.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Imported {
    pub repo: PathBuf,
    /// The merge commit of the image (what REF and the image ref point at).
    pub commit: String,
    /// REF, if given, then the image ref.
    pub refs: Vec<String>,
}

/// The image reference the import is recorded under: the registry image, so
/// that rpm-ostree and bootc find it under the name they would pull it by.
pub fn target_imgref(image: &crate::plan::imgref::ImageRef) -> String {
    format!("ostree-unverified-registry:{image}")
}

/// The command ostree-ext's proxy runs instead of plain `skopeo`: skopeo in a
/// network namespace of its own (it reads only the local, verified layout, as
/// root) and stopped if hostpull dies, as with ostree-ext's default.
pub fn proxy_command() -> std::process::Command {
    let mut c = std::process::Command::new("setpriv");
    c.args([
        "--pdeathsig",
        "TERM",
        "--",
        "unshare",
        "--net",
        "--",
        "skopeo",
    ]);
    c
}

/// Import the staged layout `layout:tag` into the repository, recorded as
/// `image`, and point `dest`'s ref at the result. Without the `ostree`
/// feature, planning refuses an ostree destination already.
#[fn_error_context::context("Importing into ostree repository {}", dest.repo.display())]
pub async fn import(
    dest: &OstreeDest,
    layout: &Path,
    tag: &str,
    image: &crate::plan::imgref::ImageRef,
) -> anyhow::Result<Imported> {
    #[cfg(not(feature = "ostree"))]
    {
        let _ = (layout, tag, image);
        crate::error::fail(
            crate::error::Kind::Usage,
            "built without ostree support (cargo feature `ostree`)",
        )
    }
    #[cfg(feature = "ostree")]
    {
        use ostree_ext::container::store::{
            ImageImporter, ImageProxyConfig, PrepareResult, query_image,
        };
        use ostree_ext::container::{
            ImageReference, OstreeImageReference, SignatureSource, Transport,
        };
        use ostree_ext::gio;

        let repo = ostree_ext::ostree::Repo::new_for_path(&dest.repo);
        repo.open(gio::Cancellable::NONE)?;
        // Unverified: hostpull checked every digest, but no signature.
        let source = OstreeImageReference {
            sigverify: SignatureSource::ContainerPolicyAllowInsecure,
            imgref: ImageReference {
                transport: Transport::OciDir,
                name: format!("{}:{tag}", layout.display()),
            },
        };
        let target = OstreeImageReference::try_from(target_imgref(image).as_str())?;
        let config = ImageProxyConfig {
            // A local layout needs no credential: give skopeo none.
            auth_anonymous: true,
            skopeo_cmd: Some(proxy_command()),
            ..Default::default()
        };
        let mut importer = ImageImporter::new(&repo, &source, config).await?;
        importer.set_target(&target);
        // The staging reference is new every time, so ostree-ext cannot tell that
        // the image is there already; the target reference can.
        let state = match importer.prepare().await? {
            PrepareResult::AlreadyPresent(s) => s,
            PrepareResult::Ready(p) => match query_image(&repo, &target.imgref)? {
                Some(s) if s.manifest_digest == p.manifest_digest => s,
                _ => importer.import(p).await?,
            },
        };
        let mut refs = Vec::new();
        if let Some(r) = &dest.ostree_ref {
            repo.set_ref_immediate(None, r, Some(&state.merge_commit), gio::Cancellable::NONE)
                .with_context(|| format!("Setting ref {r}"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_command_line() {
        let c = proxy_command();
        let argv: Vec<_> = std::iter::once(c.get_program())
            .chain(c.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            argv.join(" "),
            "setpriv --pdeathsig TERM -- unshare --net -- skopeo"
        );
        let image = crate::plan::imgref::ImageRef::parse("quay.io/fedora/fcos:stable").unwrap();
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
        drop(s);
        assert!(!path.exists());
    }
}
