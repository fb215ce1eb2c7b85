//! Room on the destination, decided before the first blob is fetched: what a
//! pull will write (the blobs the destination lacks, the manifest, the
//! index) against the free space of the destination's filesystem, less what
//! an ostree repository keeps free (`min-free-space-size` /
//! `min-free-space-percent` in its `config`, as libostree reads and applies
//! them: `reload_core_config` and `min_free_space_calculate_reserved_bytes`
//! in src/libostree/ostree-repo.c, `_ostree_repo_prepare_transaction` and
//! `write_content_object` in ostree-repo-commit.c).
//!
//! The planner reads the rule and the filesystem as they are when it plans
//! (`hostpull plan` shows both); the pull measures the filesystem again once
//! the manifest says what it lacks, and [`check`] decides.

use std::path::{Path, PathBuf};

use crate::error::{Failure, Kind};
use crate::imgref::Target;
use crate::plan::host::{Fs, Host};

/// What an ostree repository keeps free, as its `config` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserve {
    /// Nothing (an OCI layout, or an ostree repository with `min-free-space-size = 0MB`).
    Nothing,
    /// `min-free-space-size`, in MiB (libostree's "MB").
    Mib(u64),
    /// `min-free-space-percent` of the filesystem's size (3 if neither key is set).
    Percent(u64),
}

impl Reserve {
    /// The bytes kept free on `fs`, as `min_free_space_calculate_reserved_bytes`.
    pub fn bytes(self, fs: &Fs) -> u64 {
        match self {
            Self::Nothing => 0,
            Self::Mib(mb) => mb.saturating_mul(1 << 20),
            Self::Percent(p) => {
                let total = fs.frsize.saturating_mul(fs.blocks);
                (total as f64 * (p as f64 / 100.0)) as u64
            }
        }
    }

    /// How the repository's config says it, for messages.
    pub fn describe(self) -> String {
        match self {
            Self::Nothing => "nothing".into(),
            Self::Mib(mb) => format!("min-free-space-size {mb}MB"),
            Self::Percent(p) => format!("min-free-space-percent {p}%"),
        }
    }
}

/// Where a pull's bytes land and what it must leave free there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The directory whose filesystem is measured: the layout (or the nearest
    /// directory above it that exists), or the ostree repository.
    pub path: PathBuf,
    /// What must stay free.
    pub reserve: Reserve,
    /// libostree counts `f_bfree` for root and `f_bavail` for anyone else; an
    /// OCI layout always counts `f_bavail`, leaving root's reserve alone.
    pub ostree: bool,
    /// The filesystem when the plan was made, if it could be measured.
    pub fs: Option<Fs>,
}

impl Rule {
    /// The bytes a pull may write on `fs` (as root when `root`).
    pub fn allowed(&self, fs: &Fs, root: bool) -> u64 {
        let free = if self.ostree && root {
            fs.bfree
        } else {
            fs.bavail
        };
        let bsize = fs.bsize.max(1);
        let reserved = self.reserve.bytes(fs) / bsize;
        free.saturating_sub(reserved).saturating_mul(bsize)
    }
}

/// Space for `index.json` on top of the blobs: it is rewritten next to the
/// old one (temp + rename).
pub const INDEX_ALLOWANCE: u64 = 4096;

/// The bytes `files` take on `fs`: libostree's count for a content object,
/// `size / bsize + 1` blocks each.
pub fn needed(files: &[u64], fs: &Fs) -> u64 {
    let bsize = fs.bsize.max(1);
    files.iter().map(|s| (s / bsize + 1) * bsize).sum()
}

/// Whether `blobs` (the sizes of those the destination lacks), the manifest
/// and the index fit under `rule` on `fs`; if not, exit 11, naming both figures.
pub fn check(
    rule: &Rule,
    fs: &Fs,
    root: bool,
    blobs: &[u64],
    manifest: u64,
) -> Result<(), Failure> {
    let mut files = blobs.to_vec();
    files.extend([manifest, INDEX_ALLOWANCE]);
    let need = needed(&files, fs);
    let allowed = rule.allowed(fs, root);
    if need <= allowed {
        return Ok(());
    }
    let kept = match rule.reserve {
        Reserve::Nothing => String::new(),
        r => format!(
            " after the {} bytes the repository keeps free ({})",
            r.bytes(fs),
            r.describe()
        ),
    };
    Err(Failure::new(
        Kind::NoSpace,
        format!(
            "not enough space on the filesystem of {}: this pull writes {need} bytes ({} blobs the destination lacks, the manifest and index.json), and {allowed} bytes are free{kept}; nothing was fetched",
            rule.path.display(),
            blobs.len()
        ),
    ))
}

/// The destination's [`Rule`], its filesystem measured now: an OCI
/// layout (or the nearest directory above it that exists), or an ostree
/// repository with what its `config` keeps free.
pub(super) fn rule(host: &dyn Host, dest: &Target) -> anyhow::Result<Rule> {
    let (path, reserve, ostree) = match dest {
        Target::Oci { dir, .. } => (dir.clone(), Reserve::Nothing, false),
        // The staging layout's: the store's own growth is its driver's.
        Target::Storage { .. } => (
            crate::imgref::cstorage::STAGING_DIR.into(),
            Reserve::Nothing,
            false,
        ),
        Target::Ostree { dest, .. } => {
            let config = dest.repo.join("config");
            let bad = |e: String| Failure::new(Kind::Usage, format!("{}: {e}", config.display()));
            let text = host.read_text(&config).map_err(|e| bad(e.to_string()))?;
            (dest.repo.clone(), ostree_reserve(&text).map_err(bad)?, true)
        }
    };
    let fs = path
        .ancestors()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .find(|p| host.directory(p))
        .and_then(|p| host.free_space(p).ok());
    Ok(Rule {
        path,
        reserve,
        ostree,
        fs,
    })
}

/// An ostree repository's `config` (a GKeyFile): its `[core]`
/// `min-free-space-size` (`^[0-9]+(M|G|T)B$`, in MiB) and
/// `min-free-space-percent` (0 to 99), as `reload_core_config` reads them:
/// the size wins when both are set and not zero, 3% when neither is set.
/// A value libostree refuses makes the repository unusable, so the pull is
/// refused too (exit 2).
pub fn ostree_reserve(config: &str) -> Result<Reserve, String> {
    let (mut size, mut percent) = (None, None);
    let mut core = false;
    for line in config.lines().map(str::trim) {
        if line.starts_with('[') {
            core = line == "[core]";
        } else if let Some((k, v)) = line.split_once('=').filter(|_| core) {
            match k.trim() {
                "min-free-space-size" => size = Some(v.trim().to_owned()),
                "min-free-space-percent" => percent = Some(v.trim().to_owned()),
                _ => {}
            }
        }
    }
    let mb = match &size {
        Some(s) => {
            Some(parse_size(s).map_err(|e| format!("Invalid min-free-space-size '{s}': {e}"))?)
        }
        None => None,
    };
    let pc = match &percent {
        Some(p) => {
            if !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "Invalid min-free-space-percent '{p}': must be a number"
                ));
            }
            // g_ascii_strtoull of "" is 0.
            let n: u64 = if p.is_empty() {
                0
            } else {
                p.parse().unwrap_or(u64::MAX)
            };
            if n > 99 {
                return Err(format!("Invalid min-free-space-percent '{p}'"));
            }
            Some(n)
        }
        None => None,
    };
    Ok(match (mb, pc) {
        (Some(mb), _) if mb > 0 => Reserve::Mib(mb),
        (_, Some(p)) if p > 0 => Reserve::Percent(p),
        (None, None) => Reserve::Percent(3),
        _ => Reserve::Nothing,
    })
}

/// `min_free_space_size_validate_and_convert`: `123MB`, `123GB` or `123TB`, in MiB.
fn parse_size(s: &str) -> Result<u64, String> {
    let format = || "It should be of the format '123MB', '123GB' or '123TB'".to_owned();
    let digits = s.strip_suffix('B').ok_or_else(format)?;
    let (n, shifts) = match digits.as_bytes().last() {
        Some(b'M') => (&digits[..digits.len() - 1], 0),
        Some(b'G') => (&digits[..digits.len() - 1], 10),
        Some(b'T') => (&digits[..digits.len() - 1], 20),
        _ => return Err(format()),
    };
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format());
    }
    // g_ascii_strtoull saturates.
    let n: u64 = n.parse().unwrap_or(u64::MAX);
    if shifts > 0 && n >> (64 - shifts) != 0 {
        return Err("Value was too high".into());
    }
    if n > (u64::MAX >> 20) {
        return Err(format!(
            "min-free-space value is greater than the maximum allowed value of {} bytes",
            u64::MAX >> 20
        ));
    }
    Ok(n << shifts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs(blocks: u64, bfree: u64, bavail: u64) -> Fs {
        Fs {
            bsize: 4096,
            frsize: 4096,
            blocks,
            bfree,
            bavail,
        }
    }

    /// libostree's rules for the two keys, case by case (reload_core_config,
    /// min_free_space_size_validate_and_convert); ostree's own tests
    /// (tests/test-repo-finder-mount.sh, test-pull-repeated) only check
    /// that a full repository refuses.
    #[test]
    fn ostree_config_as_libostree_reads_it() {
        let core = |body: &str| format!("[core]\nrepo_version=1\nmode=bare-user\n{body}");
        for (body, want) in [
            ("", Ok(Reserve::Percent(3))),
            ("min-free-space-percent=0\n", Ok(Reserve::Nothing)),
            ("min-free-space-percent=10\n", Ok(Reserve::Percent(10))),
            ("min-free-space-percent = 7\n", Ok(Reserve::Percent(7))),
            ("min-free-space-size=500MB\n", Ok(Reserve::Mib(500))),
            ("min-free-space-size=2GB\n", Ok(Reserve::Mib(2048))),
            ("min-free-space-size=1TB\n", Ok(Reserve::Mib(1 << 20))),
            // Only the size is set, to zero: no percent default either.
            ("min-free-space-size=0MB\n", Ok(Reserve::Nothing)),
            // Both set and not zero: the size, unconditionally.
            (
                "min-free-space-percent=50\nmin-free-space-size=1MB\n",
                Ok(Reserve::Mib(1)),
            ),
            (
                "min-free-space-percent=50\nmin-free-space-size=0MB\n",
                Ok(Reserve::Percent(50)),
            ),
            (
                "min-free-space-percent=100\n",
                Err("Invalid min-free-space-percent '100'"),
            ),
            ("min-free-space-percent=-1\n", Err("must be a number")),
            ("min-free-space-percent=3%\n", Err("must be a number")),
            (
                "min-free-space-size=500\n",
                Err("'123MB', '123GB' or '123TB'"),
            ),
            (
                "min-free-space-size=500mb\n",
                Err("'123MB', '123GB' or '123TB'"),
            ),
            (
                "min-free-space-size=MB\n",
                Err("'123MB', '123GB' or '123TB'"),
            ),
            (
                "min-free-space-size=500KB\n",
                Err("'123MB', '123GB' or '123TB'"),
            ),
            (
                "min-free-space-size=9007199254740992TB\n",
                Err("Value was too high"),
            ),
        ] {
            let got = ostree_reserve(&core(body));
            match (got, want) {
                (Ok(r), Ok(w)) => assert_eq!(r, w, "{body}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{body}: {e}"),
                (got, _) => panic!("{body}: {got:?}"),
            }
        }
        // Keys of another group are not the repository's.
        assert_eq!(
            ostree_reserve("[remote \"x\"]\nmin-free-space-size=1MB\n"),
            Ok(Reserve::Percent(3))
        );
    }

    #[test]
    fn allowance_is_free_blocks_less_the_reserve() {
        let f = fs(1000, 600, 550);
        let oci = Rule {
            path: "/l".into(),
            reserve: Reserve::Nothing,
            ostree: false,
            fs: None,
        };
        // An OCI layout leaves root's reserve alone.
        assert_eq!(oci.allowed(&f, true), 550 * 4096);
        let repo = |reserve| Rule {
            path: "/r".into(),
            reserve,
            ostree: true,
            fs: None,
        };
        // libostree: f_bfree as root, f_bavail otherwise.
        assert_eq!(repo(Reserve::Nothing).allowed(&f, true), 600 * 4096);
        assert_eq!(repo(Reserve::Nothing).allowed(&f, false), 550 * 4096);
        // 3% of 1000 blocks: 30 blocks (122880 bytes) kept.
        assert_eq!(repo(Reserve::Percent(3)).allowed(&f, true), 570 * 4096);
        // 1 MiB: 256 blocks.
        assert_eq!(repo(Reserve::Mib(1)).allowed(&f, true), 344 * 4096);
        // More reserved than free: nothing (libostree's max_blocks = 0).
        assert_eq!(repo(Reserve::Mib(10)).allowed(&f, true), 0);
    }

    #[test]
    fn a_file_takes_size_over_bsize_plus_one_blocks() {
        let f = fs(100, 100, 100);
        assert_eq!(needed(&[], &f), 0);
        assert_eq!(needed(&[0], &f), 4096);
        assert_eq!(needed(&[4095], &f), 4096);
        assert_eq!(needed(&[4096], &f), 8192);
        assert_eq!(needed(&[1, 5000], &f), 4096 + 8192);
    }

    /// Just enough passes; one block less is exit 11, naming both figures.
    #[test]
    fn the_boundary_and_the_message() {
        // 1 + 2 blocks of blobs, 1 for the manifest, 2 for index.json.
        let (blobs, manifest) = ([100, 5000], 300);
        let rule = Rule {
            path: "/var/lib/x".into(),
            reserve: Reserve::Nothing,
            ostree: false,
            fs: None,
        };
        assert!(check(&rule, &fs(100, 6, 6), true, &blobs, manifest).is_ok());
        let e = check(&rule, &fs(100, 5, 5), true, &blobs, manifest).unwrap_err();
        assert_eq!(e.kind, Kind::NoSpace);
        assert_eq!(
            e.message,
            "not enough space on the filesystem of /var/lib/x: this pull writes 24576 bytes (2 blobs the destination lacks, the manifest and index.json), and 20480 bytes are free; nothing was fetched"
        );
        let rule = Rule {
            reserve: Reserve::Percent(3),
            ostree: true,
            ..rule
        };
        // 3% of 100 blocks is 12288 bytes, 3 blocks.
        assert!(check(&rule, &fs(100, 9, 0), true, &blobs, manifest).is_ok());
        let e = check(&rule, &fs(100, 8, 0), true, &blobs, manifest).unwrap_err();
        assert!(
            e.message.ends_with("and 20480 bytes are free after the 12288 bytes the repository keeps free (min-free-space-percent 3%); nothing was fetched"),
            "{}",
            e.message
        );
    }
}
