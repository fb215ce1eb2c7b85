//! Where the pull goes, decided before the network: the destination parsed
//! ([`Dest::parse`]), and what the host can tell of it now checked now (a
//! file where the layout goes, a directory that is not a layout, a parent
//! that cannot be written, a repository that is not one), so that a pull
//! never fetches for minutes into a destination it cannot write.

use std::io::ErrorKind;
use std::path::Path;

use super::Request;
use super::host::{FileKind, Host, env_dirs, on_path};
use crate::error::{Kind, fail};
use crate::imgref::cstorage::{KEPT_ENV, Writer};
use crate::imgref::{Dest, ImageRef, OstreeDest, Target};

/// Whether `bytes` are an `oci-layout` file of the version the writer
/// writes and reads (image-spec's `imageLayoutVersion` 1.0.0), as
/// `store::Layout` checks it.
fn valid_oci_layout(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(bytes)
        .is_ok_and(|v| v["imageLayoutVersion"] == "1.0.0")
}

/// A pull's error without a destination.
pub(crate) const NO_DEST: &str = "--dest oci:DIR[:TAG] is required (or --profile NAME)";

/// The image, where it goes, and the tag it is written under; none only in
/// a dry run given no destination.
pub(super) fn destination(
    req: &Request,
    host: &dyn Host,
    dry_run: bool,
) -> anyhow::Result<(ImageRef, Option<Target>)> {
    let image = ImageRef::parse(req.options.image.as_deref().unwrap_or_default())?;
    // Only a plan may go without a destination.
    let dest = match &req.options.dest {
        Some(d) => d.clone(),
        None if dry_run => return Ok((image, None)),
        None => return fail(Kind::Usage, NO_DEST),
    };
    let target = match dest {
        Dest::Storage(dest) => Target::Storage {
            dest: dest.resolve(&image),
            tag: image.tag.clone().unwrap_or_else(|| "latest".to_owned()),
            writer: storage_writer(host)?,
        },
        Dest::Ostree(dest) => {
            check_ostree(host, &dest, cfg!(feature = "ostree"))?;
            let tag = image.tag.clone().unwrap_or_else(|| "latest".to_owned());
            Target::Ostree { dest, tag }
        }
        Dest::Oci { dir, tag } => {
            let Some(tag) = tag.or_else(|| image.tag.clone()) else {
                return fail(
                    Kind::Usage,
                    "the image is pinned by digest: name the tag to write with --dest oci:DIR:TAG",
                );
            };
            let dir = match req.absolute_dest {
                // `absolute` of an absolute path only tidies it (no current
                // directory read): as `std::path::absolute(dir)` would.
                true if dir.is_relative() => std::path::absolute(host.current_dir()?.join(dir))?,
                true => std::path::absolute(dir)?,
                false => dir,
            };
            check_oci(host, &dir)?;
            Target::Oci { dir, tag }
        }
    };
    Ok((image, Some(target)))
}

/// How root writes containers-storage: its own skopeo, the first on `PATH`
/// (without one the pull fails now, exit 10, before it fetches), with the
/// environment it keeps, in [`storage_domain`].
fn storage_writer(host: &dyn Host) -> anyhow::Result<Writer> {
    let Some(skopeo) = on_path(host, "skopeo") else {
        return fail(
            Kind::Handoff,
            "skopeo, which writes into containers-storage, is not on PATH",
        );
    };
    let env = KEPT_ENV
        .iter()
        .filter_map(|k| Some(((*k).to_owned(), host.env(k)?)))
        .collect();
    Ok(Writer {
        skopeo,
        env,
        domain: storage_domain(host),
        state: env_dirs(host, "STATE_DIRECTORY").into_iter().next(),
    })
}

/// The domain in which root's skopeo writes containers-storage: with SELinux
/// on, in `hostpull_t`, that is `hostpull_storage_t` (selinux/hostpull.te),
/// which may mount and unpack layers as containers/storage does, as
/// `hostpull_t` may not; nothing enters it but a `setexeccon` of
/// `hostpull_t`. Run from any other domain (an admin's shell), skopeo keeps
/// the caller's, as it would run by hand. The user, role and level are the
/// caller's.
pub(super) fn storage_domain(host: &dyn Host) -> Option<String> {
    if !host.selinux_enabled() {
        return None;
    }
    let current = host.read_text(Path::new("/proc/self/attr/current")).ok()?;
    let mut parts = current.trim_end_matches(['\0', '\n']).splitn(4, ':');
    let (user, role, kind, level) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    (kind == "hostpull_t").then(|| format!("{user}:{role}:hostpull_storage_t:{level}"))
}

/// An ostree destination needs a build with the `ostree` feature, and an
/// existing repository: hostpull does not choose a repository's mode for it.
pub(super) fn check_ostree(
    host: &dyn Host,
    d: &OstreeDest,
    built_with_ostree: bool,
) -> anyhow::Result<()> {
    if !built_with_ostree {
        return fail(
            Kind::Usage,
            "this hostpull was built without ostree support (cargo feature `ostree`): \
             --dest ostree: is not available",
        );
    }
    if host.kind(&d.repo.join("config")).ok() != Some(FileKind::File) {
        return fail(
            Kind::Usage,
            format!(
                "{} is not an ostree repository (create it with ostree init)",
                d.repo.display()
            ),
        );
    }
    Ok(())
}

/// What the layout writer (`store::Layout::open_locked`) would refuse, or
/// could not do, refused now (exit 2, naming the path): `dir` is a layout
/// (an `oci-layout` file of version 1.0.0) or an empty directory, and can be
/// written; or it does not exist, and the nearest directory above it, where
/// the writer creates it, can be written.
fn check_oci(host: &dyn Host, dir: &Path) -> anyhow::Result<()> {
    let shown = dir.display();
    match host.kind(dir) {
        Ok(FileKind::Dir) => {}
        Ok(_) => {
            return fail(
                Kind::Usage,
                format!("{shown} exists and is not a directory"),
            );
        }
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            return check_creatable(host, dir);
        }
        Err(e) => return fail(Kind::Usage, format!("{shown}: {e}")),
    }
    let layout = dir.join("oci-layout");
    match host.read(&layout) {
        Ok(bytes) if valid_oci_layout(&bytes) => {}
        Ok(_) => {
            return fail(
                Kind::Usage,
                format!(
                    "{}: not an oci-layout file of imageLayoutVersion 1.0.0",
                    layout.display()
                ),
            );
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let empty = host.list(dir).map(|names| names.is_empty());
            if !empty.or_else(|e| fail(Kind::Usage, format!("reading {shown}: {e}")))? {
                return fail(
                    Kind::Usage,
                    format!(
                        "{shown} exists, is not empty and is not an OCI image layout (no oci-layout file)"
                    ),
                );
            }
        }
        Err(e) => return fail(Kind::Usage, format!("reading {}: {e}", layout.display())),
    }
    if !host.writable(dir) {
        return fail(Kind::Usage, format!("{shown} is not writable"));
    }
    Ok(())
}

/// `dir` does not exist: the nearest path above it that does must be a
/// directory this process can write.
fn check_creatable(host: &dyn Host, dir: &Path) -> anyhow::Result<()> {
    let current;
    let full = if dir.is_relative() {
        current = host.current_dir()?.join(dir);
        &current
    } else {
        dir
    };
    for above in full.ancestors().skip(1) {
        let why = match host.kind(above) {
            Ok(FileKind::Dir) if host.writable(above) => return Ok(()),
            Ok(FileKind::Dir) => " is not writable".to_owned(),
            Ok(_) => " is not a directory".to_owned(),
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                continue;
            }
            Err(e) => format!(": {e}"),
        };
        return fail(
            Kind::Usage,
            format!("cannot create {}: {}{why}", dir.display(), above.display()),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;
    use crate::plan::testing::MemHost;

    fn req(dest: Option<&str>) -> Request {
        Request {
            options: Options {
                image: Some("q.io/a:v1".into()),
                dest: dest.map(|d| d.parse().unwrap()),
                ..Options::default()
            },
            absolute_dest: false,
            cluster_cas: 0,
        }
    }

    /// Issue 26: what the layout writer would refuse after minutes of
    /// network is refused by the planner, naming the path; what it accepts
    /// (a layout, an empty directory, a path it can create) plans.
    #[test]
    fn oci_destinations_are_checked_before_the_network() {
        const LAYOUT: &str = r#"{"imageLayoutVersion":"1.0.0"}"#;
        let h = MemHost::new("/root")
            .file("/file", "x")
            .file("/layout/oci-layout", LAYOUT)
            .file("/layout/index.json", "{}")
            .dir("/empty")
            .file("/full/data", "x")
            .file("/old/oci-layout", r#"{"imageLayoutVersion":"0.9"}"#)
            .dir("/broken/oci-layout")
            .file("/ro/layout/oci-layout", LAYOUT)
            .read_only("/ro/layout")
            .dir("/ro/parent")
            .read_only("/ro/parent");
        // (dest, what the error names, with what)
        let cases: &[(&str, Option<(&str, &str)>)] = &[
            ("oci:/layout", None),
            ("oci:/layout:v2", None),
            ("oci:/empty", None),
            ("oci:/new", None),
            ("oci:/new/deeper/still", None),
            ("oci:rel/new", None),
            (
                "oci:/file",
                Some(("/file", "exists and is not a directory")),
            ),
            ("oci:/file/x", Some(("/file", "is not a directory"))),
            (
                "oci:/full",
                Some(("/full", "is not empty and is not an OCI image layout")),
            ),
            (
                "oci:/old",
                Some(("/old/oci-layout", "not an oci-layout file")),
            ),
            (
                "oci:/broken",
                Some(("/broken/oci-layout", "Is a directory")),
            ),
            ("oci:/ro/layout", Some(("/ro/layout", "is not writable"))),
            (
                "oci:/ro/parent/new",
                Some(("/ro/parent", "is not writable")),
            ),
            (
                "oci:/ro/parent/new/deeper",
                Some(("/ro/parent", "is not writable")),
            ),
            (
                "ostree:/file",
                Some(("/file", "is not an ostree repository")),
            ),
            (
                "ostree:/empty",
                Some(("/empty", "is not an ostree repository")),
            ),
        ];
        for &(dest, want) in cases {
            match (destination(&req(Some(dest)), &h, false), want) {
                (Ok((_, Some(_))), None) => {}
                (Err(e), Some((path, why))) => {
                    assert_eq!(crate::error::exit_code(&e), 2, "{dest}: {e}");
                    let e = e.to_string();
                    assert!(e.contains(path) && e.contains(why), "{dest}: {e}");
                }
                (r, _) => panic!("{dest}: {r:?}"),
            }
        }
    }

    /// Only `hostpull plan` may go without a destination (an empty one is
    /// no destination: `imgref`'s parser refuses it where it is given).
    #[test]
    fn only_a_dry_run_goes_without_a_destination() {
        let h = MemHost::new("/root");
        let (_, dest) = destination(&req(None), &h, true).unwrap();
        assert_eq!(dest, None);
        let e = destination(&req(None), &h, false).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2, "{e}");
        assert_eq!(e.to_string(), NO_DEST);
        let e = Dest::parse("").unwrap_err();
        assert!(e.to_string().starts_with("invalid destination: "), "{e}");
    }

    /// Root's skopeo enters the store's domain from `hostpull_t` alone, and
    /// keeps the caller's user, role and level; without SELinux, from another
    /// domain, or with no readable context, it keeps the caller's domain.
    #[test]
    fn the_store_is_written_in_its_own_domain_from_hostpull_t_alone() {
        let cases: [(bool, Option<&str>, Option<&str>); 6] = [
            (
                true,
                Some("system_u:system_r:hostpull_t:s0\0"),
                Some("system_u:system_r:hostpull_storage_t:s0"),
            ),
            (
                true,
                Some("system_u:system_r:hostpull_t:s0-s0:c0.c1023\n"),
                Some("system_u:system_r:hostpull_storage_t:s0-s0:c0.c1023"),
            ),
            (
                true,
                Some("unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023"),
                None,
            ),
            (true, Some("system_u:system_r:hostpull_worker_t:s0"), None),
            (true, None, None),
            (false, Some("system_u:system_r:hostpull_t:s0"), None),
        ];
        for (selinux, current, want) in cases {
            let mut h = MemHost::new("/root")
                .var("PATH", "/usr/bin")
                .file("/usr/bin/skopeo", "");
            if let Some(c) = current {
                h = h.file("/proc/self/attr/current", c);
            }
            h.selinux = selinux;
            assert_eq!(storage_domain(&h).as_deref(), want, "{current:?}");
            let r = req(Some("containers-storage:x/y:v1"));
            let (_, target) = destination(&r, &h, false).unwrap();
            let Some(Target::Storage { writer, .. }) = target else {
                panic!("{target:?}")
            };
            assert_eq!(writer.domain.as_deref(), want);
        }
    }

    /// Root's skopeo is the first on the host's PATH, with what it keeps of
    /// the environment; without one, the plan fails (exit 10) before any
    /// fetch.
    #[test]
    fn the_store_is_written_by_the_skopeo_on_path_with_its_storage_conf() {
        let h = MemHost::new("/root")
            .var("PATH", "/nowhere:/sbin:/usr/bin")
            .file("/usr/bin/skopeo", "")
            .file("/sbin/skopeo/x", "")
            .var("CONTAINERS_STORAGE_CONF", "/etc/s.conf")
            .var("REGISTRY_AUTH_FILE", "/x");
        let r = req(Some("containers-storage:x/y:v1"));
        let Some(Target::Storage { writer, .. }) = destination(&r, &h, false).unwrap().1 else {
            panic!()
        };
        assert_eq!(writer.skopeo, Path::new("/usr/bin/skopeo"));
        assert_eq!(writer.state, None);
        assert_eq!(
            writer.env,
            [("CONTAINERS_STORAGE_CONF".to_owned(), "/etc/s.conf".into())]
        );
        let none = MemHost::new("/root").var("PATH", "/sbin");
        let e = destination(&r, &none, false).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 10, "{e}");
        assert!(e.to_string().contains("skopeo"), "{e}");
    }
}
