//! `--dest ostree:REPO[:REF]`: the pull goes into a private staging layout,
//! then ostree-ext's `ImageImporter` imports that verified layout into REPO the
//! way rpm-ostree and bootc store containers (`ostree/container/...` refs), and
//! REF, if given, points at the imported commit. Only the import needs the
//! `ostree` cargo feature.
//!
//! An update fetches only what the repository lacks: [`held`] decides, from the
//! verified manifest, which blobs REPO has already, and the pull leaves those
//! out of its "missing" set. The staging layout then holds exactly what the
//! importer reads: the manifest, the config and the layers it has no commit
//! for ([`import`] checks that against `prepare()` before it imports).
//!
//! ostree-ext reads the layout with a `skopeo experimental-image-proxy` of its
//! own. With `--sandbox systemd` that skopeo runs as a transient unit with no
//! network (`PrivateNetwork=yes`, set up by PID 1) and the layout bound
//! read-only, so the orchestrator needs no `CAP_SYS_ADMIN` for a namespace
//! (selinux/hostpull.te: hostpull_import_t). Without systemd, it runs under
//! `unshare --net`.
//!
//! Without the feature the import and what only it calls are compiled out; the
//! rest stays, with its tests, so both builds check it.
#![cfg_attr(not(feature = "ostree"), allow(dead_code))]

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::digest::Sha256Digest;
use crate::manifest::Manifest;
use crate::plan::imgref::{ImageRef, OstreeDest};
use crate::plan::worker::{Isolation, WorkerSpec};
use crate::sandbox::unit;

/// Where ostree-ext keeps the image refs (`ostree/container/image/<escaped ref>`).
pub const IMAGE_REF_PREFIX: &str = "ostree/container/image";
/// Where ostree-ext keeps one ref per imported layer
/// (`ostree/container/blob/<escaped digest>`), the commit that caches it.
pub const LAYER_REF_PREFIX: &str = "ostree/container/blob";
/// The staging layout's place inside the import unit (a bind mount into its
/// private /tmp; the staging directory above it is root-only).
pub const LAYOUT_IN_UNIT: &str = "/tmp/layout";
/// The staging directory's SELinux label, set where SELinux is enabled: the
/// import unit's domain may read this type and no other part of the repository.
pub const STAGING_SELINUX_CONTEXT: &str = "system_u:object_r:hostpull_staging_t:s0";
/// The import unit's domain (selinux/hostpull.te).
pub const IMPORT_SELINUX_CONTEXT: &str = "system_u:system_r:hostpull_import_t:s0";

/// The staging directory: root-only, under `REPO/tmp`, on the repository's own
/// filesystem, where ostree also expires what a crash leaves. The layout is
/// its subdirectory `layout` (mode 0755), which the import unit gets bound
/// read-only. Dropping it removes it, whether the import happened or not.
#[derive(Debug)]
pub struct Staging(tempfile::TempDir);

impl Staging {
    /// `label`: the SELinux context for the staging directory, where SELinux
    /// is enabled (everything in it inherits the type).
    pub fn new(repo: &Path, label: Option<&str>) -> anyhow::Result<Self> {
        let tmp = repo.join("tmp");
        let made = with_fscreate(label, || {
            tempfile::Builder::new()
                .prefix("hostpull-staging-")
                .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .tempdir_in(&tmp)
        });
        made.map(Self)
            .with_context(|| format!("Creating a staging layout in {}", tmp.display()))
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

/// Run `f` (which creates a file) with this thread's file creation context set
/// to `label`, then reset it. Without a label, just `f`.
fn with_fscreate<T>(
    label: Option<&str>,
    f: impl FnOnce() -> std::io::Result<T>,
) -> std::io::Result<T> {
    let Some(label) = label else {
        return f();
    };
    set_fscreate(label.as_bytes())?;
    let r = f();
    set_fscreate(b"")?;
    r
}

/// The calling thread's file creation context, as libselinux's
/// setfscreatecon(): opened for writing only (with `O_TRUNC`, the enforcing
/// guest saw a `dac_override` denial) and written with exactly one write(2),
/// an empty one to reset it. `std::fs::write(…, b"")` makes no write(2) at
/// all: the label stayed on the thread, and the next worker's CA directory
/// was created as `hostpull_staging_t`, which the worker may not search.
fn set_fscreate(label: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut attr = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/thread-self/attr/fscreate")?;
    match attr.write(label)? {
        n if n == label.len() => Ok(()),
        _ => Err(std::io::Error::other("a short write to attr/fscreate")),
    }
}

/// What an import did, for the `--json` result.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Imported {
    /// The repository.
    pub repo: PathBuf,
    /// The merge commit of the image (what REF and the image ref point at).
    pub commit: String,
    /// REF, if given, then the image ref.
    pub refs: Vec<String>,
}

/// The image reference the import is recorded under: the registry image, so
/// that rpm-ostree and bootc find it under the name they would pull it by.
pub fn target_imgref(image: &ImageRef) -> String {
    format!("ostree-unverified-registry:{image}")
}

/// Whether the repository has each blob of the image already, as ostree-ext
/// would decide it (the pure part of [`held`]): the whole image when its image
/// ref records this very manifest (`prepare()` says `AlreadyPresent`), else
/// each layer it has a layer ref for (`prepare()` gives such a layer a commit
/// and `import()` skips it). The config of an image not yet there is always
/// needed: `prepare()` reads it.
pub fn held_of(
    stored_manifest: Option<&str>,
    digest: &Sha256Digest,
    manifest: &Manifest,
    has_layer: impl Fn(&Sha256Digest) -> anyhow::Result<bool>,
) -> anyhow::Result<HashSet<Sha256Digest>> {
    if stored_manifest == Some(digest.as_str()) {
        return Ok(manifest.blobs().map(|d| d.digest.clone()).collect());
    }
    let mut held = HashSet::new();
    for l in &manifest.layers {
        if has_layer(&l.digest)? {
            held.insert(l.digest.clone());
        }
    }
    Ok(held)
}

/// The blobs of the verified image (`digest`, `manifest`) that the repository
/// of `dest` has already, so that the pull leaves them out ([`held_of`]).
/// Without the `ostree` feature, none (planning refuses such a destination).
#[fn_error_context::context("Reading what ostree repository {} has", dest.repo.display())]
pub fn held(
    dest: &OstreeDest,
    image: &ImageRef,
    digest: &Sha256Digest,
    manifest: &Manifest,
) -> anyhow::Result<HashSet<Sha256Digest>> {
    #[cfg(not(feature = "ostree"))]
    {
        let _ = (dest, image, digest, manifest);
        Ok(HashSet::new())
    }
    #[cfg(feature = "ostree")]
    {
        use ostree_ext::container::OstreeImageReference;
        use ostree_ext::container::store::query_image;
        let repo = open_repo(&dest.repo)?;
        let target = OstreeImageReference::try_from(target_imgref(image).as_str())?;
        // An image ref whose commit cannot be read counts as absent, as in
        // ostree-ext's own try_query_image(): the pull then fetches it all.
        let stored = query_image(&repo, &target.imgref)
            .unwrap_or_else(|e| {
                tracing::warn!("{e:#}");
                None
            })
            .map(|s| s.manifest_digest.to_string());
        held_of(stored.as_deref(), digest, manifest, |d| {
            let r = ostree_ext::refescape::prefix_escape_for_ref(LAYER_REF_PREFIX, d.as_str())?;
            Ok(repo.resolve_rev(&r, true)?.is_some())
        })
    }
}

#[cfg(feature = "ostree")]
fn open_repo(path: &Path) -> anyhow::Result<ostree_ext::ostree::Repo> {
    let repo = ostree_ext::ostree::Repo::new_for_path(path);
    repo.open(ostree_ext::gio::Cancellable::NONE)?;
    Ok(repo)
}

/// skopeo's global option that turns its own policy check off.
const INSECURE_POLICY: &str = "--insecure-policy";

/// How the importer's skopeo starts, and where it finds the staging layout.
#[derive(Debug)]
pub struct ImportProxy {
    /// The command that starts skopeo.
    pub command: std::process::Command,
    /// The layout's path as skopeo sees it.
    pub layout: PathBuf,
    /// The transient unit, if any.
    pub unit: Option<String>,
}

/// The command ostree-ext's proxy runs instead of plain `skopeo` (the crate
/// appends `experimental-image-proxy --no-creds`). skopeo only reads the
/// local, verified layout. It gets `--insecure-policy`: containers-image-proxy
/// 0.7 (ostree-ext 0.15) has no option for it, and from protocol 0.2.6 on
/// (skopeo 1.18) OpenImage would apply the host's policy.json, which root has
/// enforced already ([`crate::plan::policy`]). It gets no network:
/// - with `--sandbox systemd`, a transient unit as the worker's, with
///   `PrivateNetwork=yes` and the layout bound read-only
///   ([`crate::sandbox::unit::offline_systemd_run`]): PID 1 makes the
///   namespace, so hostpull needs no capability for it;
/// - without systemd, `unshare --net` as root, stopped if hostpull dies, as
///   with ostree-ext's default.
pub fn import_proxy(worker: &WorkerSpec, layout: &Path) -> ImportProxy {
    proxy_for(
        worker.isolation,
        &worker.limits,
        worker.selinux_context.is_some(),
        &worker.skopeo,
        layout,
    )
}

/// [`import_proxy`] from the parts of the worker's spec it uses.
fn proxy_for(
    isolation: Isolation,
    limits: &crate::plan::worker::Limits,
    selinux: bool,
    skopeo: &Path,
    layout: &Path,
) -> ImportProxy {
    match isolation {
        Isolation::Systemd => {
            let unit = unit::unit_name(&unit::run_id(), "import");
            let mut command = unit::offline_systemd_run(
                &unit,
                limits,
                (layout, Path::new(LAYOUT_IN_UNIT)),
                selinux.then_some(IMPORT_SELINUX_CONTEXT),
                skopeo,
            );
            command.arg(INSECURE_POLICY);
            ImportProxy {
                command,
                layout: LAYOUT_IN_UNIT.into(),
                unit: Some(unit),
            }
        }
        Isolation::None => {
            let mut c = std::process::Command::new("setpriv");
            c.args(["--pdeathsig", "TERM", "--", "unshare", "--net", "--"])
                .arg(skopeo)
                .arg(INSECURE_POLICY);
            ImportProxy {
                command: c,
                layout: layout.to_owned(),
                unit: None,
            }
        }
    }
}

/// Import the staged layout `layout:tag` (manifest `digest`) into the
/// repository, recorded as `image`, and point `dest`'s ref at the result.
/// Without the `ostree` feature, planning refuses an ostree destination already.
#[fn_error_context::context("Importing into ostree repository {}", dest.repo.display())]
pub async fn import(
    dest: &OstreeDest,
    staging: &Staging,
    tag: &str,
    image: &ImageRef,
    digest: &Sha256Digest,
    worker: &WorkerSpec,
) -> anyhow::Result<Imported> {
    #[cfg(not(feature = "ostree"))]
    {
        let _ = (staging, tag, image, digest, worker);
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
        // skopeo to start (the pull fetched nothing either).
        let stored = ostree_ext::container::store::query_image(&repo, &target.imgref)
            .ok()
            .flatten()
            .filter(|s| s.manifest_digest.to_string() == digest.as_str());
        let state = match stored {
            Some(s) => s,
            None => import_layout(&repo, &target, staging, tag, worker).await?,
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

/// Read the staged layout `layout:tag` with skopeo, isolated as
/// [`import_proxy`] says, and import it into `repo` as `target`.
#[cfg(feature = "ostree")]
async fn import_layout(
    repo: &ostree_ext::ostree::Repo,
    target: &ostree_ext::container::OstreeImageReference,
    staging: &Staging,
    tag: &str,
    worker: &WorkerSpec,
) -> anyhow::Result<Box<ostree_ext::container::store::LayeredImageState>> {
    use ostree_ext::container::store::{ImageImporter, ImageProxyConfig, PrepareResult};
    use ostree_ext::container::{ImageReference, OstreeImageReference, SignatureSource, Transport};

    let proxy = import_proxy(worker, &staging.layout());
    if let Some(unit) = &proxy.unit {
        tracing::debug!("the import's skopeo runs as {unit}");
    }
    // Unverified: hostpull checked every digest and the signature
    // policy already, before anything was written.
    let source = OstreeImageReference {
        sigverify: SignatureSource::ContainerPolicyAllowInsecure,
        imgref: ImageReference {
            transport: Transport::OciDir,
            name: format!("{}:{tag}", proxy.layout.display()),
        },
    };
    let config = ImageProxyConfig {
        // A local layout needs no credential: give skopeo none.
        auth_anonymous: true,
        skopeo_cmd: Some(proxy.command),
        ..Default::default()
    };
    let mut importer = ImageImporter::new(repo, &source, config)
        .await
        .map_err(with_proxy_detail)?;
    importer.set_target(target);
    Ok(match importer.prepare().await.map_err(with_proxy_detail)? {
        PrepareResult::AlreadyPresent(s) => s,
        PrepareResult::Ready(p) => {
            let needed = p
                .all_layers()
                .filter(|l| l.commit.is_none())
                .map(|l| l.layer().digest().to_string());
            check_staged(&staging.layout(), needed)?;
            importer.import(p).await.map_err(with_proxy_detail)?
        }
    })
}

/// containers-image-proxy 0.7 shows its `Other` errors as just "error": why
/// skopeo failed (its exit status and stderr) is only in the variant. Put it
/// in the message.
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

/// Every layer `prepare()` says the import will read (it has no commit for
/// it) must be in the staging layout: a layer ref removed between the pull's
/// decision and the import (another tool's prune) would otherwise make skopeo
/// fail on a missing file.
pub fn check_staged(layout: &Path, needed: impl IntoIterator<Item = String>) -> anyhow::Result<()> {
    for d in needed {
        let hex = d.strip_prefix("sha256:").unwrap_or(&d);
        if !layout.join("blobs/sha256").join(hex).is_file() {
            anyhow::bail!(
                "layer {d} is neither in the repository nor staged \
                 (its ref went away during the pull?); pull again"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Descriptor;

    fn argv(c: &std::process::Command) -> Vec<String> {
        std::iter::once(c.get_program())
            .chain(c.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    fn proxy(mode: Isolation, selinux: bool, layout: &Path) -> ImportProxy {
        proxy_for(
            mode,
            &Default::default(),
            selinux,
            Path::new("skopeo"),
            layout,
        )
    }

    #[test]
    fn import_proxy_has_no_network_either_way() {
        let layout = Path::new("/repo/tmp/hostpull-staging-x/layout");
        let p = proxy(Isolation::None, false, layout);
        assert_eq!(
            argv(&p.command).join(" "),
            "setpriv --pdeathsig TERM -- unshare --net -- skopeo --insecure-policy"
        );
        assert_eq!((p.layout.as_path(), p.unit), (layout, None));

        let p = proxy(Isolation::Systemd, true, layout);
        let args = argv(&p.command);
        let unit = p.unit.unwrap();
        // Named as a worker's, so that a leftover is stopped as one is.
        assert!(unit.ends_with("-import.service"), "{unit}");
        assert_eq!(
            crate::sandbox::monitor::unit_owner(&unit),
            Some(std::process::id())
        );
        assert_eq!(p.layout, Path::new(LAYOUT_IN_UNIT));
        for want in [
            format!("--unit={unit}"),
            "--collect".into(),
            "PrivateNetwork=yes".into(),
            "RestrictAddressFamilies=AF_UNIX".into(),
            format!("BindReadOnlyPaths={}:{LAYOUT_IN_UNIT}", layout.display()),
            format!("SELinuxContext={IMPORT_SELINUX_CONTEXT}"),
            "DynamicUser=yes".into(),
        ] {
            assert!(args.contains(&want), "{want} missing from {args:?}");
        }
        assert!(!args.iter().any(|a| a.contains("AF_INET")), "{args:?}");
        assert_eq!(
            args[args.len() - 3..],
            ["--", "skopeo", "--insecure-policy"]
        );
        let p = proxy(Isolation::Systemd, false, layout);
        assert!(
            !argv(&p.command)
                .iter()
                .any(|a| a.starts_with("SELinuxContext="))
        );
    }

    #[test]
    fn target_is_the_registry_image() {
        let image = ImageRef::parse("quay.io/fedora/fcos:stable").unwrap();
        assert_eq!(
            target_imgref(&image),
            "ostree-unverified-registry:quay.io/fedora/fcos:stable"
        );
    }

    fn desc(c: char) -> Descriptor {
        Descriptor {
            media_type: "application/vnd.oci.image.layer.v1.tar+gzip".into(),
            digest: Sha256Digest::parse(&format!("sha256:{}", c.to_string().repeat(64))).unwrap(),
            size: 1,
            urls: vec![],
            platform: None,
            annotations: Default::default(),
        }
    }

    /// (what the image ref records, layers with a layer ref, what is held)
    #[test]
    fn held_is_what_prepare_would_skip() {
        let manifest = Manifest {
            schema_version: 2,
            media_type: None,
            config: desc('c'),
            layers: vec![desc('a'), desc('b'), desc('d')],
        };
        let digest = Sha256Digest::parse(&format!("sha256:{}", "e".repeat(64))).unwrap();
        let other = format!("sha256:{}", "f".repeat(64));
        let cases: [(Option<&str>, &str, &str); 5] = [
            (None, "", ""),
            (None, "ab", "ab"),
            // Another image under the same name: only its layers count.
            (Some(&other), "abd", "abd"),
            // The config is never a layer ref, so a new image's is fetched.
            (None, "abcd", "abd"),
            // This very manifest: everything, config included.
            (Some(digest.as_str()), "", "abcd"),
        ];
        for (stored, refs, want) in cases {
            let got = held_of(stored, &digest, &manifest, |d| {
                Ok(refs.chars().any(|c| d.hex().starts_with(c)))
            })
            .unwrap();
            let mut got: Vec<char> = got
                .iter()
                .map(|d| d.hex().chars().next().unwrap())
                .collect();
            got.sort();
            assert_eq!(
                got.into_iter().collect::<String>(),
                want,
                "{stored:?} {refs}"
            );
        }
        let e = held_of(None, &digest, &manifest, |_| anyhow::bail!("no repo")).unwrap_err();
        assert_eq!(e.to_string(), "no repo");
    }

    #[test]
    fn check_staged_needs_every_layer_the_import_reads() {
        let td = tempfile::tempdir().unwrap();
        let blobs = td.path().join("blobs/sha256");
        std::fs::create_dir_all(&blobs).unwrap();
        let a = format!("sha256:{}", "a".repeat(64));
        let b = format!("sha256:{}", "b".repeat(64));
        std::fs::write(blobs.join("a".repeat(64)), b"x").unwrap();
        check_staged(td.path(), [a.clone()]).unwrap();
        check_staged(td.path(), []).unwrap();
        let e = check_staged(td.path(), [a, b.clone()]).unwrap_err();
        assert!(e.to_string().contains(&b), "{e}");
    }

    #[test]
    fn staging_is_private_and_removed() {
        use std::os::unix::fs::PermissionsExt;
        let repo = tempfile::tempdir().unwrap();
        assert!(
            Staging::new(repo.path(), None).is_err(),
            "no tmp/: not a repository"
        );
        std::fs::create_dir(repo.path().join("tmp")).unwrap();
        let s = Staging::new(repo.path(), None).unwrap();
        let path = s.path().to_owned();
        assert_eq!(path.parent(), Some(repo.path().join("tmp").as_path()));
        assert_eq!(path.metadata().unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(s.layout(), path.join("layout"));
        drop(s);
        assert!(!path.exists());
    }
}
