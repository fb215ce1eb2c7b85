//! The ostree import's protocol, between root (`store::import`, the pull's
//! side) and `hostpull-ostree-import` ([`crate::confined::import`]) with the
//! layout proxy it starts ([`crate::confined::layout_proxy`]):
//! - the command line, `PROXY REPO IMAGE [REF]` ([`Start`]), given as the pull
//!   starts;
//! - the import's first stdout line, what the repository holds ([`Holdings`]);
//! - the rest of the request on its stdin, once the image is accepted
//!   ([`Start::rest`]): LAYOUT, TAG and DIGEST, each ended by a NUL;
//! - the rest of its stdin, the pull's control pipe ([`Control`]), which says
//!   [`DONE`] once every blob is staged, or ends without it;
//! - its last stdout line, what it imported ([`Imported`]), or one `error:`
//!   line on stderr.
#![cfg_attr(not(feature = "ostree"), allow(dead_code))]

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use crate::digest::Sha256Digest;
use crate::imgref::{ImageRef, OstreeDest};
use crate::manifest::Manifest;

/// The program's name, in `PREFIX/libexec` or, in a build tree, beside hostpull.
pub const PROGRAM: &str = "hostpull-ostree-import";

/// What the import is started with, as the pull starts: its command line,
/// `PROXY REPO IMAGE [REF]`. The rest of its [`Request`] comes on its stdin
/// once the image is accepted ([`Running::begin`]).
#[derive(Debug, Clone)]
pub struct Start {
    /// The layout proxy's program ([`Request::proxy`]).
    pub proxy: PathBuf,
    /// The repository, and the ref to point at the import.
    pub dest: OstreeDest,
    /// The registry image.
    pub image: ImageRef,
}

/// The most bytes of one field of the request's rest: a path.
const FIELD_MAX: usize = 4096;
const USAGE: &str =
    "usage: hostpull-ostree-import PROXY REPO IMAGE [REF], then LAYOUT TAG DIGEST on stdin";

impl Start {
    pub fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            self.proxy.clone().into(),
            self.dest.repo.clone().into(),
            self.image.to_string().into(),
        ];
        a.extend(self.dest.ostree_ref.clone().map(OsString::from));
        a
    }

    pub fn parse(args: Vec<OsString>) -> anyhow::Result<Self> {
        let (proxy, repo, image, ostree_ref) = match args.as_slice() {
            [p, r, i] => (p, r, i, None),
            [p, r, i, f] => (p, r, i, Some(text(f)?)),
            _ => anyhow::bail!("{USAGE}"),
        };
        // Root gives its own program's path (`current_exe()`).
        anyhow::ensure!(
            Path::new(proxy).is_absolute(),
            "the layout proxy is not an absolute path: {}; {USAGE}",
            proxy.to_string_lossy()
        );
        Ok(Self {
            proxy: proxy.into(),
            dest: OstreeDest {
                repo: repo.into(),
                ostree_ref,
            },
            image: ImageRef::parse(&text(image)?)?,
        })
    }

    /// The rest of the request, as it crosses the import's stdin: the staging
    /// layout, its tag and the manifest's digest, each ended by a NUL (which
    /// no path holds).
    pub fn rest(layout: &Path, tag: &str, digest: &Sha256Digest) -> Vec<u8> {
        let mut b = Vec::new();
        for f in [
            layout.as_os_str().as_bytes(),
            tag.as_bytes(),
            digest.as_str().as_bytes(),
        ] {
            b.extend_from_slice(f);
            b.push(0);
        }
        b
    }

    /// The whole request, its rest read from `input` a byte at a time, so
    /// that nothing after it (the pull's control pipe) is read; none if
    /// `input` ends first (the pull gave up before it began the import).
    pub fn request(self, input: impl std::os::fd::AsFd) -> anyhow::Result<Option<Request>> {
        let mut fields: Vec<Vec<u8>> = vec![Vec::new()];
        let mut byte = [0u8];
        while fields.len() < 4 {
            let n = rustix::io::retry_on_intr(|| rustix::io::read(&input, &mut byte))
                .context("reading the request")?;
            let first = fields.len() == 1;
            let field = fields.last_mut().context("reading the request")?;
            match (n, byte[0]) {
                (0, _) if first && field.is_empty() => return Ok(None),
                (0, _) => anyhow::bail!("the request ended early; {USAGE}"),
                (_, 0) => fields.push(Vec::new()),
                (_, b) if field.len() < FIELD_MAX => field.push(b),
                _ => anyhow::bail!("a field of the request is over {FIELD_MAX} bytes"),
            }
        }
        let [layout, tag, digest, _] =
            <[Vec<u8>; 4]>::try_from(fields).map_err(|_| anyhow::anyhow!("reading the request"))?;
        let utf8 = |b: Vec<u8>| String::from_utf8(b).context("not UTF-8");
        Ok(Some(Request {
            proxy: self.proxy,
            dest: self.dest,
            layout: OsString::from_vec(layout).into(),
            tag: utf8(tag)?,
            image: self.image,
            digest: Sha256Digest::parse(&utf8(digest)?).context("not a sha256 digest")?,
        }))
    }
}

/// A command-line argument that must be text.
fn text(a: &OsString) -> anyhow::Result<String> {
    a.to_str()
        .map(str::to_owned)
        .with_context(|| format!("not UTF-8: {}", a.to_string_lossy()))
}

/// What an import did, for the `--json` result.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Imported {
    /// The repository.
    pub repo: PathBuf,
    /// The merge commit of the image (what REF and the image ref point at).
    pub commit: String,
    /// REF, if given, then the image ref.
    pub refs: Vec<String>,
}

/// What to import: the staged layout `layout:tag` (manifest `digest`), into
/// `dest`, recorded as `image`. `hostpull-ostree-import` gets the proxy, the
/// destination and the image on its command line as the pull starts, and the
/// rest on its stdin ([`Start`]).
#[derive(Debug)]
pub struct Request {
    /// The layout proxy's program: hostpull itself, which does not load
    /// libostree (the import's own program would, a second time).
    pub proxy: PathBuf,
    /// The repository, and the ref to point at the import.
    pub dest: OstreeDest,
    /// The verified staging layout.
    pub layout: PathBuf,
    /// Its tag.
    pub tag: String,
    /// The registry image it was pulled as.
    pub image: ImageRef,
    /// Its manifest's digest.
    pub digest: Sha256Digest,
}

/// What an ostree repository holds that a pull of one image may leave out:
/// read by `hostpull-ostree-import` ([`holdings_here`]) as it starts with the
/// pull, beside the worker, so that hostpull itself never loads libostree.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Holdings {
    /// The manifest digest the image's image ref records, if it has the image.
    pub manifest: Option<String>,
    /// The digest of each layer it has a layer ref for.
    pub layers: HashSet<String>,
}

impl Holdings {
    /// The blobs of the verified image (`digest`, `manifest`) the repository
    /// has already, as ostree-ext would decide it: the whole image when its
    /// image ref records this very manifest (`prepare()` says
    /// `AlreadyPresent`), else each layer it has a layer ref for (`prepare()`
    /// gives such a layer a commit and `import()` skips it). The config of an
    /// image not yet there is always needed: `prepare()` reads it.
    pub fn held(&self, digest: &Sha256Digest, manifest: &Manifest) -> HashSet<Sha256Digest> {
        if self.manifest.as_deref() == Some(digest.as_str()) {
            return manifest.blobs().map(|d| d.digest.clone()).collect();
        }
        (manifest.layers.iter())
            .filter(|l| self.layers.contains(l.digest.as_str()))
            .map(|l| l.digest.clone())
            .collect()
    }
}

/// How the import fails when the pull did.
pub const FAILED: &str = "the pull failed, so the import stops";

/// What the pull said of itself ([`Control`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Word {
    /// Nothing yet: the pull goes on.
    Pending,
    /// `done`: every blob is staged, the staging layout published.
    Done,
    /// The pipe ended without `done`: the pull failed or was stopped.
    Failed,
}

/// The pull's word to its import: the read end of a pipe from hostpull, which
/// writes [`DONE`] once every blob of the image is staged and the staging
/// layout is published, then closes it. If it closes it without (a failed
/// pull, or hostpull killed), the import must not go on: nothing of a failed
/// pull may be referenced.
#[derive(Debug)]
pub struct Control {
    fd: OwnedFd,
    said: Vec<u8>,
    ended: bool,
}

/// What hostpull writes on the control pipe when the pull is done.
pub const DONE: &[u8] = b"done\n";

impl Control {
    /// The pipe's read end.
    pub fn new(fd: OwnedFd) -> Self {
        Self {
            fd,
            said: Vec::new(),
            ended: false,
        }
    }

    pub fn word(&self) -> Word {
        match (self.ended, self.said == DONE) {
            (false, _) => Word::Pending,
            (true, true) => Word::Done,
            (true, false) => Word::Failed,
        }
    }

    /// Read what there is within `timeout` (without one, until the pipe
    /// ends), and say where the pull stands.
    pub fn wait(&mut self, timeout: Option<Duration>) -> anyhow::Result<Word> {
        use rustix::event::{PollFd, PollFlags, Timespec};
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        while !self.ended {
            let left = match deadline {
                Some(d) => match d.checked_duration_since(std::time::Instant::now()) {
                    Some(left) => Some(Timespec::try_from(left)?),
                    None => break,
                },
                None => None,
            };
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            match rustix::event::poll(&mut fds, left.as_ref()) {
                Ok(0) => break,
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e).context("waiting for the pull"),
            }
            let mut buf = [0u8; 16];
            match rustix::io::read(&self.fd, &mut buf) {
                Ok(0) => self.ended = true,
                // More than `done` is not `done`.
                Ok(n) if self.said.len() + n <= DONE.len() => {
                    self.said.extend_from_slice(&buf[..n])
                }
                Ok(_) => self.said = b"?".repeat(DONE.len() + 1),
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                Err(e) => return Err(e).context("reading the pull's control pipe"),
            }
        }
        Ok(self.word())
    }

    /// Wait until the pipe ends: `Ok` if the pull said `done`.
    pub fn wait_done(&mut self) -> anyhow::Result<()> {
        match self.wait(None)? {
            Word::Done => Ok(()),
            _ => anyhow::bail!("{FAILED}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::manifest::Descriptor;

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
            let holdings = Holdings {
                manifest: stored.map(str::to_owned),
                layers: (refs.chars())
                    .map(|c| format!("sha256:{}", c.to_string().repeat(64)))
                    .collect(),
            };
            let mut got: Vec<char> = (holdings.held(&digest, &manifest).iter())
                .map(|d| d.hex().chars().next().unwrap())
                .collect();
            got.sort();
            assert_eq!(
                got.into_iter().collect::<String>(),
                want,
                "{stored:?} {refs}"
            );
        }
    }

    #[test]
    fn the_request_crosses_the_command_line_then_stdin() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let digest = Sha256Digest::parse(&digest).unwrap();
        // A path need not be UTF-8, nor free of newlines.
        let layout = PathBuf::from(OsString::from_vec(
            b"/ostree/repo/tmp/h\xff\nx/layout".to_vec(),
        ));
        for r in [None, Some("exampleos/x86_64/stable".to_owned())] {
            let start = Start {
                proxy: "/usr/bin/hostpull".into(),
                dest: OstreeDest {
                    repo: "/ostree/repo".into(),
                    ostree_ref: r,
                },
                image: ImageRef::parse("quay.io/fedora/fcos:stable").unwrap(),
            };
            let (rx, mut tx) = std::io::pipe().unwrap();
            let rest = Start::rest(&layout, "latest", &digest);
            tx.write_all(&rest).unwrap();
            tx.write_all(b"done\n").unwrap();
            let back = Start::parse(start.args())
                .unwrap()
                .request(&rx)
                .unwrap()
                .unwrap();
            let want = Request {
                proxy: start.proxy.clone(),
                dest: start.dest.clone(),
                layout: layout.clone(),
                tag: "latest".into(),
                image: start.image.clone(),
                digest: digest.clone(),
            };
            assert_eq!(format!("{back:?}"), format!("{want:?}"));
            // Not a byte more: what follows is the pull's control pipe.
            let mut after = [0u8; 5];
            std::io::Read::read_exact(&mut &rx, &mut after).unwrap();
            assert_eq!(&after, b"done\n");
            // The pull ended before it began the import: nothing to do.
            drop(tx);
            assert!(
                Start::parse(start.args())
                    .unwrap()
                    .request(&rx)
                    .unwrap()
                    .is_none()
            );
            // Ended inside the request, or not a digest: an error.
            for cut in [1, rest.len() - 1] {
                let (rx, mut tx) = std::io::pipe().unwrap();
                tx.write_all(&rest[..cut]).unwrap();
                drop(tx);
                assert!(
                    Start::parse(start.args()).unwrap().request(&rx).is_err(),
                    "{cut}"
                );
            }
            let (rx, mut tx) = std::io::pipe().unwrap();
            tx.write_all(b"/l\0t\0sha256:x\0").unwrap();
            assert!(Start::parse(start.args()).unwrap().request(&rx).is_err());
        }
        // A field without its end is refused once it is longer than a path.
        let (rx, mut tx) = std::io::pipe().unwrap();
        tx.write_all(&vec![b'x'; FIELD_MAX + 1]).unwrap();
        let start = Start::parse(["/p", "/r", "quay.io/a:b"].map(OsString::from).to_vec()).unwrap();
        assert!(start.request(&rx).is_err());
        for bad in [
            &["/p", "/r", "quay.io/a:b", "ref", "extra"][..],
            &["/p", "/r", "Not An Image"],
            &["hostpull", "/r", "quay.io/a:b"],
            &["/p", "/r"],
            &[],
        ] {
            let args = bad.iter().map(OsString::from).collect();
            assert!(Start::parse(args).is_err(), "{bad:?}");
        }
    }
}
