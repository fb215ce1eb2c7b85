//! `--dest containers-storage:[STORE]NAME[:TAG]`, in containers-transports(5)'s
//! own syntax: the store where podman, CRI-O and bootc's unified storage keep
//! images, written by containers/storage's own code (`store::cstorage`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::ImageRef;
use crate::digest::Sha256Digest;
use crate::error::{Kind, fail, quoted};

/// The transport's prefix.
pub const PREFIX: &str = "containers-storage:";
/// containers-storage.conf(5)'s `graphroot` for root, which a destination
/// without a store uses (unless the host's storage.conf moves it).
pub const DEFAULT_GRAPH_ROOT: &str = "/var/lib/containers/storage";
/// Where a pull into the store is staged: containers.conf(5)'s
/// `image_copy_tmp_dir`, where containers/image itself stages one.
pub const STAGING_DIR: &str = "/var/tmp";

/// The environment root's skopeo keeps: where storage.conf and
/// containers.conf are, as podman reads them.
pub const KEPT_ENV: [&str; 2] = ["CONTAINERS_STORAGE_CONF", "CONTAINERS_CONF"];

/// How root writes the store, as the plan decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer {
    /// Root's own skopeo, the first on `PATH`.
    pub skopeo: PathBuf,
    /// What it keeps of the environment ([`KEPT_ENV`], where set).
    pub env: Vec<(String, OsString)>,
    /// The SELinux context it runs in, if any (selinux/hostpull.te's
    /// `hostpull_storage_t`).
    pub domain: Option<String>,
    /// hostpull's state directory (the service's `$STATE_DIRECTORY`), where
    /// it remembers what each repository last got in a store.
    pub state: Option<PathBuf>,
}

/// Where a `containers-storage:` pull goes, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageDest {
    /// `driver@graphroot+runroot:options`, the brackets' inside as given;
    /// none: the host's storage.conf.
    pub store: Option<String>,
    /// The name the image gets: the pulled image's (as `podman pull` names it)
    /// when none is given, `:latest` when a name has no tag.
    pub name: Option<ImageRef>,
}

impl StorageDest {
    /// Parse what follows `containers-storage:`.
    pub fn parse(rest: &str, input: &str) -> anyhow::Result<Self> {
        let bad = |why: &str| {
            fail(
                Kind::Usage,
                format!("invalid destination: {why}: {}", quoted(input)),
            )
        };
        let (store, name) = match rest.strip_prefix('[') {
            Some(inner) => match inner.split_once(']') {
                Some((store, name)) => (Some(store), name),
                None => return bad("the store's [ has no ]"),
            },
            None => (None, rest),
        };
        if let Some(s) = store
            && let Err(why) = check_store(s)
        {
            return bad(&why);
        }
        let name = match name {
            "" => None,
            n if n.contains('@') => {
                return bad("NAME takes a tag, not a digest: the digest is the registry's");
            }
            n => Some(ImageRef::parse(n).map_err(|_| {
                crate::error::Failure::new(
                    Kind::Usage,
                    format!(
                        "invalid destination: NAME[:TAG] must be an image name: {}",
                        quoted(input)
                    ),
                )
            })?),
        };
        Ok(Self {
            store: store.map(str::to_owned),
            name,
        })
    }

    /// The name in the store for a pull of `image`: `NAME[:TAG]` as given, else
    /// the image's own name and tag (none when it is pinned: it is then
    /// stored under NAME@DIGEST alone, as `podman pull NAME@DIGEST` does).
    pub fn resolve(&self, image: &ImageRef) -> StorageRef {
        let name = match &self.name {
            Some(n) => n.clone(),
            None => ImageRef {
                digest: None,
                ..image.clone()
            },
        };
        StorageRef {
            store: self.store.clone(),
            name,
        }
    }
}

/// A resolved `containers-storage:` destination: the store, and the name
/// (with its tag, or none: NAME@DIGEST) the image is written under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageRef {
    /// The brackets' inside, if given.
    pub store: Option<String>,
    /// The name; its tag, if any, is the one written.
    pub name: ImageRef,
}

impl StorageRef {
    fn prefix(&self) -> String {
        match &self.store {
            Some(s) => format!("[{s}]"),
            None => String::new(),
        }
    }

    /// The reference the image is written under (and found by before the
    /// pull): `[STORE]NAME:TAG`, or `[STORE]NAME@DIGEST` without a tag.
    /// Without a tag and a digest there is nothing to write under: `None`.
    pub fn written(&self, digest: Option<&Sha256Digest>) -> Option<String> {
        match (&self.name.tag, digest) {
            (None, None) => None,
            (_, d) => Some(self.shown(&d.map(ToString::to_string).unwrap_or_default())),
        }
    }

    /// [`Self::written`], with `digest` standing for the pulled digest.
    pub fn shown(&self, digest: &str) -> String {
        let repo = self.name.repository();
        match &self.name.tag {
            Some(t) => format!("{}{repo}:{t}", self.prefix()),
            None => format!("{}{repo}@{digest}", self.prefix()),
        }
    }

    /// `[STORE]NAME@DIGEST`: how consumers name the image stored, as the
    /// machine-config daemon does (`ostree-unverified-image:containers-storage:…`).
    pub fn pinned(&self, digest: &Sha256Digest) -> String {
        format!("{}@{digest}", self.repository())
    }

    /// `[STORE]NAME`: the repository in the store, whatever its tag.
    pub fn repository(&self) -> String {
        format!("{}{}", self.prefix(), self.name.repository())
    }

    /// The store's graph root, if the destination names one.
    pub fn graph_root(&self) -> Option<&Path> {
        let s = self.store.as_deref()?;
        let root = s.split_once('@').map_or(s, |(_, r)| r);
        let root = root.split([':', '+']).next()?;
        (!root.is_empty()).then(|| Path::new(root))
    }
}

/// `driver@graphroot+runroot:options` (containers-transports(5)): each part
/// may be left out, and the paths are absolute.
fn check_store(s: &str) -> Result<(), String> {
    if s.chars().any(|c| c.is_control() || c == '[' || c == ']') {
        return Err("the store holds a control character or a bracket".into());
    }
    let (driver, rest) = match s.split_once('@') {
        Some((d, r)) => (Some(d), r),
        None => (None, s),
    };
    if let Some(d) = driver
        && (d.is_empty() || !d.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
    {
        return Err("the store's driver must be a name such as overlay or vfs".into());
    }
    let paths = rest.split_once(':').map_or(rest, |(p, _)| p);
    let (graph, run) = match paths.split_once('+') {
        Some((g, r)) => (g, Some(r)),
        None => (paths, None),
    };
    let relative = |p: &str| !p.is_empty() && !p.starts_with('/');
    if relative(graph) || run.is_some_and(|r| r.is_empty() || relative(r)) {
        return Err("the store's graph root and run root must be absolute paths".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> anyhow::Result<StorageDest> {
        StorageDest::parse(s.strip_prefix(PREFIX).unwrap(), s)
    }

    /// containers-transports(5), "containers-storage:": the store's parts,
    /// each optional, then the name.
    #[test]
    fn destinations_parse_as_the_transport_writes_them() {
        let image = ImageRef::parse("quay.io/fedora/fedora-bootc:42").unwrap();
        let pinned = ImageRef::parse(&format!("quay.io/a/b@sha256:{}", "a".repeat(64))).unwrap();
        let d = Sha256Digest::parse(&format!("sha256:{}", "b".repeat(64))).unwrap();
        let pinned_to = format!("[overlay@/g:overlay.mount_program=/x]quay.io/a/b@{d}");
        for (dest, of, written, root) in [
            (
                "containers-storage:",
                &image,
                Some("quay.io/fedora/fedora-bootc:42"),
                None,
            ),
            (
                "containers-storage:localhost/os",
                &image,
                Some("localhost/os:latest"),
                None,
            ),
            (
                "containers-storage:[vfs@/var/lib/x+/run/x]localhost/os:v2",
                &image,
                Some("[vfs@/var/lib/x+/run/x]localhost/os:v2"),
                Some("/var/lib/x"),
            ),
            (
                "containers-storage:[/usr/lib/bootc/storage]",
                &image,
                Some("[/usr/lib/bootc/storage]quay.io/fedora/fedora-bootc:42"),
                Some("/usr/lib/bootc/storage"),
            ),
            (
                "containers-storage:[overlay@/g:overlay.mount_program=/x]",
                &pinned,
                Some(pinned_to.as_str()),
                Some("/g"),
            ),
            (
                "containers-storage:[vfs@]x/y:1",
                &pinned,
                Some("[vfs@]docker.io/x/y:1"),
                None,
            ),
        ] {
            let r = parse(dest).unwrap().resolve(of);
            assert_eq!(r.written(Some(&d)).as_deref(), written, "{dest}");
            assert_eq!(r.graph_root(), root.map(Path::new), "{dest}");
        }
        let r = parse("containers-storage:[/g]").unwrap().resolve(&pinned);
        assert_eq!(r.pinned(&d), format!("[/g]quay.io/a/b@{d}"));
        assert_eq!(r.written(None), None);
    }

    #[test]
    fn bad_destinations_are_refused() {
        for bad in [
            "containers-storage:[vfs@/g",
            "containers-storage:[vfs@g]x/y",
            "containers-storage:[vfs@/g+run]x/y",
            "containers-storage:[vfs@/g+]x/y",
            "containers-storage:[@/g]x/y",
            "containers-storage:[v fs@/g]x/y",
            "containers-storage:[/g\n]x/y",
            &format!("containers-storage:x/y@sha256:{}", "a".repeat(64)),
            "containers-storage:UPPER/case",
            "containers-storage:x/y:",
        ] {
            let e = parse(bad).expect_err(bad);
            let e = format!("{e:#}");
            assert!(e.starts_with("invalid destination: "), "{bad}: {e}");
        }
    }
}
