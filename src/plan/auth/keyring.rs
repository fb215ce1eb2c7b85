//! kubelet's keyring and its URL globs (`pkg/credentialprovider/keyring.go`):
//! how pull secrets' keys and credential providers' `matchImages` match an
//! image.

use std::collections::BTreeMap;

/// kubelet's keyring (`pkg/credentialprovider/keyring.go`): keys normalized as
/// its `Add` does (no scheme; a leading `/v1/` or `/v2/` dropped), every key
/// that matches in reverse lexical order of the normalized key (so
/// `host/a/b` before `host/a` before `host`), and several values of one key
/// in the order they were added.
#[derive(Debug)]
pub struct Keyring<T> {
    creds: BTreeMap<String, Vec<(String, T)>>,
}

impl<T> Default for Keyring<T> {
    fn default() -> Self {
        Self {
            creds: BTreeMap::new(),
        }
    }
}

/// kubelet's fallback key for Docker Hub, as `Add` stores
/// `https://index.docker.io/v1/`.
const DEFAULT_REGISTRY_KEY: &str = "index.docker.io";

impl<T> Keyring<T> {
    /// Add `value` under `key`, normalized as kubelet's `Add` does.
    pub fn add(&mut self, key: &str, value: T) {
        let rest = key
            .strip_prefix("https://")
            .or_else(|| key.strip_prefix("http://"))
            .unwrap_or(key);
        let (host, path) = split_host_path(rest);
        let path = if path.starts_with("/v2/") || path.starts_with("/v1/") {
            &path[3..]
        } else {
            path
        };
        let normalized = if path.is_empty() || path == "/" {
            host.to_owned()
        } else {
            format!("{host}{path}")
        };
        self.creds
            .entry(normalized)
            .or_default()
            .push((key.to_owned(), value));
    }

    /// Every `(key, value)` for `target`, a normalized repository such as
    /// `docker.io/library/nginx`, in kubelet's order. With no match, Docker
    /// Hub's images take the exact key `index.docker.io`'s values.
    pub fn lookup(&self, target: &str) -> Vec<(&str, &T)> {
        let hits: Vec<(&str, &T)> = self
            .creds
            .iter()
            .rev()
            .filter(|(k, _)| urls_match(k, target))
            .flat_map(|(_, v)| entries(v))
            .collect();
        match self.creds.get(DEFAULT_REGISTRY_KEY) {
            Some(v) if hits.is_empty() && is_default_registry(target) => entries(v).collect(),
            _ => hits,
        }
    }
}

fn entries<T>(v: &[(String, T)]) -> impl Iterator<Item = (&str, &T)> {
    v.iter().map(|(k, t)| (k.as_str(), t))
}

/// Whether `target` is on Docker Hub. kubelet also counts a first component
/// without `.` or `:` (`localhost/x`); hostpull's references are normalized,
/// so only `docker.io` is, and `localhost` never gets a Docker Hub credential.
pub(super) fn is_default_registry(target: &str) -> bool {
    matches!(
        target.split('/').next(),
        Some("docker.io" | DEFAULT_REGISTRY_KEY)
    )
}

/// `host[:port]` and `/path` of a schemeless URL; a query or fragment is not
/// part of either, as in Go's `url.Parse`.
fn split_host_path(s: &str) -> (&str, &str) {
    let s = s.split(['?', '#']).next().unwrap_or_default();
    match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    }
}

/// kubelet's `URLsMatchStr`: equal ports, as many host labels, each label
/// matched by a glob (`filepath.Match`), and the glob's path a string prefix
/// of the target's. Used for keyring keys and for a provider's `matchImages`.
pub fn urls_match(glob_url: &str, target: &str) -> bool {
    let (ghost, gpath) = split_host_path(glob_url);
    let (thost, tpath) = split_host_path(target);
    let (ghost, gport) = split_port(ghost);
    let (thost, tport) = split_port(thost);
    let glabels: Vec<&str> = ghost.split('.').collect();
    let tlabels: Vec<&str> = thost.split('.').collect();
    gport == tport
        && glabels.len() == tlabels.len()
        && tpath.starts_with(gpath)
        && glabels.iter().zip(&tlabels).all(|(g, t)| glob(g, t))
}

fn split_port(hostport: &str) -> (&str, Option<&str>) {
    match hostport.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => (h, Some(p)),
        _ => (hostport, None),
    }
}

/// One element of a `filepath.Match` pattern.
#[derive(Debug, PartialEq)]
enum Glob {
    Star,
    /// `?`: any one character.
    Any,
    Char(char),
    /// `[…]` or `[^…]` (negated): inclusive ranges.
    Class(bool, Vec<(char, char)>),
}

/// Parse a `filepath.Match` pattern; `None` for a malformed one, which
/// matches nothing (kubelet treats Go's `ErrBadPattern` as no match).
fn parse_glob(pattern: &str) -> Option<Vec<Glob>> {
    let p: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while let Some(&c) = p.get(i) {
        i += 1;
        out.push(match c {
            '*' => Glob::Star,
            '?' => Glob::Any,
            '[' => {
                let negated = p.get(i) == Some(&'^');
                i += usize::from(negated);
                let mut ranges = Vec::new();
                while ranges.is_empty() || p.get(i) != Some(&']') {
                    let lo = class_char(&p, &mut i)?;
                    let hi = if p.get(i) == Some(&'-') {
                        i += 1;
                        class_char(&p, &mut i)?
                    } else {
                        lo
                    };
                    ranges.push((lo, hi));
                }
                i += 1;
                Glob::Class(negated, ranges)
            }
            '\\' => {
                i += 1;
                Glob::Char(*p.get(i - 1)?)
            }
            c => Glob::Char(c),
        });
    }
    Some(out)
}

/// Go's `getEsc`: one character of a class, `\`-escaped or not; an
/// unescaped `-` or `]` here is malformed.
fn class_char(p: &[char], i: &mut usize) -> Option<char> {
    let mut c = *p.get(*i)?;
    if c == '-' || c == ']' {
        return None;
    }
    *i += 1;
    if c == '\\' {
        c = *p.get(*i)?;
        *i += 1;
    }
    Some(c)
}

/// A glob of one DNS label (`filepath.Match`: `*`, `?`, `[…]`, `\`), ASCII
/// case-insensitive as DNS is (kubelet compares case-sensitively).
pub(super) fn glob(pattern: &str, label: &str) -> bool {
    glob_steps(pattern, label).0
}

/// The match, and how many steps it took. A `*` only ever backtracks to the
/// last `*` seen, so the steps are at most (pattern + 1) × (label + 1): a key
/// from a Secret cannot make matching exponential.
pub(super) fn glob_steps(pattern: &str, label: &str) -> (bool, usize) {
    let Some(p) = parse_glob(&pattern.to_ascii_lowercase()) else {
        return (false, 0);
    };
    let t: Vec<char> = label.to_ascii_lowercase().chars().collect();
    let one = |g: &Glob, c: char| match g {
        Glob::Any => true,
        Glob::Char(x) => *x == c,
        Glob::Class(negated, r) => r.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negated,
        Glob::Star => false,
    };
    let (mut pi, mut ti, mut steps) = (0, 0, 0);
    let mut last_star: Option<(usize, usize)> = None;
    while ti < t.len() {
        steps += 1;
        match p.get(pi) {
            Some(Glob::Star) => {
                last_star = Some((pi, ti));
                pi += 1;
            }
            Some(g) if one(g, t[ti]) => {
                pi += 1;
                ti += 1;
            }
            _ => match last_star {
                // The last `*` takes one more character; retry after it.
                Some((sp, st)) => {
                    last_star = Some((sp, st + 1));
                    pi = sp + 1;
                    ti = st + 1;
                }
                None => return (false, steps),
            },
        }
    }
    while p.get(pi) == Some(&Glob::Star) {
        pi += 1;
    }
    (pi == p.len(), steps)
}
