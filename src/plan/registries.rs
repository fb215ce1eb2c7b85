//! containers-registries.conf(5): which table covers an image (the longest
//! `prefix`, `*.example.com` matching any depth of subdomains), its `location`
//! rewrite, its mirrors in order with `pull-from-mirror`, and `blocked`. The
//! worker gets a registries.conf holding this image's table only.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Failure, Kind, fail};
use crate::plan::imgref::ImageRef;

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Table {
    pub prefix: Option<String>,
    pub location: Option<String>,
    #[serde(default)]
    pub insecure: bool,
    #[serde(default)]
    pub blocked: bool,
    #[serde(default)]
    pub mirror_by_digest_only: bool,
    #[serde(default)]
    pub mirror: Vec<Mirror>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Mirror {
    pub location: String,
    #[serde(default)]
    pub insecure: bool,
    /// `all` (the default), `digest-only` or `tag-only`.
    #[serde(default)]
    pub pull_from_mirror: Option<String>,
}

impl Table {
    /// The prefix this table answers for: `prefix`, else `location`.
    fn key(&self) -> &str {
        self.prefix
            .as_deref()
            .or(self.location.as_deref())
            .unwrap_or_default()
    }
}

#[derive(Debug, Deserialize)]
struct File {
    #[serde(default)]
    registry: Vec<Table>,
}

fn parse(name: &Path, text: &str) -> anyhow::Result<Vec<Table>> {
    let f: File = toml::from_str(text).map_err(|e| {
        Failure::new(
            Kind::Usage,
            format!(
                "invalid registries configuration {}: {}",
                name.display(),
                crate::error::one_line(e.message())
            ),
        )
    })?;
    Ok(f.registry)
}

/// `/etc/containers/registries.conf` and `registries.conf.d/*.conf` below
/// `root` in name order (a table with an earlier table's prefix replaces it),
/// or only `explicit`.
pub fn load(root: &Path, explicit: Option<&Path>) -> anyhow::Result<Vec<Table>> {
    let mut files: Vec<PathBuf> = Vec::new();
    match explicit {
        Some(f) => files.push(f.to_owned()),
        None => {
            files.push(root.join("etc/containers/registries.conf"));
            if let Ok(rd) = std::fs::read_dir(root.join("etc/containers/registries.conf.d")) {
                let mut d: Vec<PathBuf> = rd
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "conf"))
                    .collect();
                d.sort();
                files.extend(d);
            }
        }
    }
    let mut tables: Vec<Table> = Vec::new();
    for f in files {
        let text = match std::fs::read_to_string(&f) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => continue,
            Err(e) => return fail(Kind::Usage, format!("reading {}: {e}", f.display())),
        };
        for t in parse(&f, &text)? {
            tables.retain(|old| old.key() != t.key());
            tables.push(t);
        }
    }
    Ok(tables)
}

/// Does `prefix` cover `reference` (`host[:port]/path…`)?
fn covers(prefix: &str, image: &ImageRef) -> bool {
    if let Some(domain) = prefix.strip_prefix("*.") {
        let host = image.domain.split(':').next().unwrap_or_default();
        return host.ends_with(&format!(".{domain}"));
    }
    let r = image.repository();
    r == prefix
        || r.strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Where one pull may go: mirrors first, in order, then the primary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    pub mirrors: Vec<ImageRef>,
    pub primary: Option<ImageRef>,
    /// The table that covers the image, for the worker's registries.conf.
    pub table: Option<Table>,
}

impl Route {
    /// The hosts this pull may contact, in the order they are tried.
    pub fn hosts(&self, image: &ImageRef) -> Vec<ImageRef> {
        let mut refs = self.mirrors.clone();
        refs.push(self.primary.clone().unwrap_or_else(|| image.clone()));
        refs
    }
}

/// The table for `image`, applied.
pub fn route(tables: &[Table], image: &ImageRef) -> anyhow::Result<Route> {
    let Some(t) = tables
        .iter()
        .filter(|t| covers(t.key(), image))
        .max_by_key(|t| t.key().len())
    else {
        return Ok(Route::default());
    };
    if t.blocked {
        return fail(
            Kind::Usage,
            format!(
                "{} is blocked by registries.conf (prefix {})",
                image.repository(),
                t.key()
            ),
        );
    }
    let wildcard = t.key().starts_with("*.");
    let rest = if wildcard {
        String::new()
    } else {
        image.repository()[t.key().len()..].to_owned()
    };
    let at = |location: &str| -> anyhow::Result<ImageRef> {
        let mut r = ImageRef::parse(&format!("{location}{rest}"))?;
        r.tag = image.tag.clone();
        r.digest = image.digest.clone();
        Ok(r)
    };
    let primary = match (&t.location, wildcard) {
        (Some(l), false) => Some(at(l)?),
        _ => None,
    };
    let by_digest = image.digest.is_some();
    let mut mirrors = Vec::new();
    for m in &t.mirror {
        let mode = m
            .pull_from_mirror
            .as_deref()
            .unwrap_or(if t.mirror_by_digest_only {
                "digest-only"
            } else {
                "all"
            });
        let eligible = match mode {
            "all" => true,
            "digest-only" => by_digest,
            "tag-only" => !by_digest,
            other => {
                return fail(
                    Kind::Usage,
                    format!("registries.conf: unknown pull-from-mirror {other:?}"),
                );
            }
        };
        if eligible && !wildcard {
            mirrors.push(at(&m.location)?);
        }
    }
    Ok(Route {
        mirrors,
        primary,
        table: Some(t.clone()),
    })
}

/// The worker's registries.conf: this image's table and nothing else.
pub fn worker_conf(route: &Route) -> String {
    let q = |s: &str| format!("{s:?}");
    let mut out =
        String::from("# generated by hostpull for one pull\nunqualified-search-registries = []\n");
    if let Some(t) = &route.table {
        out += &format!("\n[[registry]]\nprefix = {}\n", q(t.key()));
        if let Some(l) = &t.location {
            out += &format!("location = {}\n", q(l));
        }
        out += &format!(
            "insecure = {}\nmirror-by-digest-only = {}\n",
            t.insecure, t.mirror_by_digest_only
        );
        for m in &t.mirror {
            out += &format!(
                "\n[[registry.mirror]]\nlocation = {}\ninsecure = {}\n",
                q(&m.location),
                m.insecure
            );
            if let Some(p) = &m.pull_from_mirror {
                out += &format!("pull-from-mirror = {}\n", q(p));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONF: &str = r#"
unqualified-search-registries = ["quay.io"]
[[registry]]
prefix = "quay.io"
location = "quay.io"
[[registry.mirror]]
location = "mirror.local:5000/quay"
[[registry.mirror]]
location = "digests.local/quay"
pull-from-mirror = "digest-only"

[[registry]]
prefix = "quay.io/org/special"
location = "special.example.com/mirror/special"

[[registry]]
prefix = "*.blocked.example"
blocked = true
"#;

    fn img(s: &str) -> ImageRef {
        ImageRef::parse(s).unwrap()
    }

    #[test]
    fn longest_prefix_location_and_mirrors() {
        let td = tempfile::tempdir().unwrap();
        let f = td.path().join("r.conf");
        std::fs::write(&f, CONF).unwrap();
        let tables = load(td.path(), Some(&f)).unwrap();
        let r = route(&tables, &img("quay.io/org/app:v1")).unwrap();
        assert_eq!(
            r.mirrors.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
            ["mirror.local:5000/quay/org/app:v1"]
        );
        let d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let r = route(&tables, &img(&format!("quay.io/org/app@{d}"))).unwrap();
        assert_eq!(r.mirrors.len(), 2, "digest-only joins for a digest");
        let r = route(&tables, &img("quay.io/org/special:1")).unwrap();
        assert_eq!(
            r.primary.unwrap().to_string(),
            "special.example.com/mirror/special:1"
        );
        assert!(r.mirrors.is_empty());
        assert_eq!(
            route(&tables, &img("quay.io/org/specialty:1"))
                .unwrap()
                .table
                .unwrap()
                .key(),
            "quay.io"
        );
        assert_eq!(
            route(&tables, &img("other.io/x")).unwrap(),
            Route::default()
        );
        let e = route(&tables, &img("a.b.blocked.example/x")).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        let conf = worker_conf(&route(&tables, &img("quay.io/a/b")).unwrap());
        assert_eq!(parse(Path::new("w"), &conf).unwrap().len(), 1, "{conf}");
        assert!(!conf.contains("special"), "only this image's table: {conf}");
    }

    #[test]
    fn drop_ins_replace_by_prefix_and_errors_name_the_file() {
        let td = tempfile::tempdir().unwrap();
        let dir = td.path().join("etc/containers/registries.conf.d");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(td.path().join("etc/containers/registries.conf"), CONF).unwrap();
        std::fs::write(
            dir.join("10-quay.conf"),
            "[[registry]]\nprefix = \"quay.io\"\nblocked = true\n",
        )
        .unwrap();
        let tables = load(td.path(), None).unwrap();
        assert_eq!(
            crate::error::exit_code(&route(&tables, &img("quay.io/a/b")).unwrap_err()),
            2
        );
        std::fs::write(dir.join("20-bad.conf"), "[[registry]\n").unwrap();
        let e = load(td.path(), None).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("20-bad.conf"), "{e}");
        assert_eq!(load(&td.path().join("none"), None).unwrap(), vec![]);
    }
}
