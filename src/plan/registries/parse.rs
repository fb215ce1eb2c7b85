//! One registries.conf file, parsed and checked as containers/image's
//! `loadConfigFile` and `postProcessRegistries` do.

use std::collections::BTreeMap;

use super::{
    File, FileShortNames, Mirror, Table, V1, invalid, parse_location, parse_short_name_mode,
    parse_short_name_value, validate_short_name,
};
use crate::digest::Sha256Digest;
use crate::imgref;

/// `HOST[:PORT][/PATH]` in the reference grammar, with a HOST that names a
/// registry (docker/reference's rule: a `.` or a port, or `localhost`;
/// anything else is a Docker Hub path, so no image name starts with it).
/// containers/image checks this only when a pull rewrites a reference with it.
pub(super) fn valid_location(l: &str) -> bool {
    let (domain, path) = l.split_once('/').unwrap_or((l, ""));
    imgref::valid_domain(domain)
        && (domain.contains(['.', ':']) || domain == "localhost")
        && (path.is_empty() || path.split('/').all(imgref::valid_path_component))
}

/// Why `t` can serve no pull, if it cannot: a prefix that is no image name
/// (`*`, `example.com//foo`, `**.example.com`) matches none, and a location or
/// mirror location that is no `HOST[:PORT][/PATH]` cannot be rewritten to.
/// containers/image loads such tables; hostpull too, and warns.
pub(super) fn defect(t: &Table) -> Option<String> {
    if !valid_prefix(&t.prefix) {
        return Some(format!(
            "registry prefix {:?} is neither *.DOMAIN nor HOST[:PORT][/PATH][:TAG|@DIGEST]: it matches no image",
            t.prefix
        ));
    }
    let bad = std::iter::once(&t.location)
        .filter(|l| !l.is_empty())
        .chain(t.mirror.iter().map(|m| &m.location))
        .find(|l| !valid_location(l))?;
    Some(format!(
        "registry prefix {:?}: location {bad:?} is not HOST[:PORT][/PATH]: every pull it covers is refused",
        t.prefix
    ))
}

/// A prefix: `*.DOMAIN`, or a reference name with an optional tag, digest or
/// both.
pub(super) fn valid_prefix(p: &str) -> bool {
    if let Some(domain) = p.strip_prefix("*.") {
        return imgref::valid_hostname(domain);
    }
    if valid_location(p) {
        return true;
    }
    if let Some((name, d)) = p.split_once('@') {
        return Sha256Digest::parse(d).is_some() && valid_prefix(name);
    }
    match p.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => {
            imgref::valid_docker_tag(tag) && valid_location(name)
        }
        _ => false,
    }
}

/// containers/image's `loadConfigFile` and `postProcessRegistries` for one
/// file: its tables, checked, sorted by prefix, one per prefix (the first in
/// the file wins).
pub(super) fn parse(text: &str, drop_in: bool) -> anyhow::Result<(Vec<Table>, FileShortNames)> {
    crate::plan::nesting::check(text, crate::plan::nesting::TOML_MAX_DEPTH).map_err(invalid)?;
    let f: File = crate::error::located::toml(text).map_err(|e| invalid(e.to_string()))?;
    let v1 = f.registries.as_ref().is_some_and(V1::is_set);
    let mut tables = f.registry.clone().unwrap_or_default();
    let mut search = f.unqualified_search_registries.clone();
    if v1 {
        search = convert_v1(&f, drop_in, &mut tables)?;
    }
    for t in &mut tables {
        check_table(t)?;
    }
    check_conflicts(&tables)?;
    let short = short_names(&f, search)?;
    // The first table with a prefix wins; later ones with the same prefix are ignored.
    let mut unique: BTreeMap<String, Table> = BTreeMap::new();
    for t in tables {
        unique.entry(t.prefix.clone()).or_insert(t);
    }
    Ok((unique.into_values().collect(), short))
}

/// A v1 file (`[registries.search|insecure|block]`) as v2 tables, as
/// containers/image's `ConvertToV2`; its search list.
fn convert_v1(
    f: &File,
    drop_in: bool,
    tables: &mut Vec<Table>,
) -> anyhow::Result<Option<Vec<String>>> {
    if drop_in {
        return Err(invalid(
            "registry must be in v2 format but is in v1 ([registries.*] in a drop-in)".into(),
        ));
    }
    if f.v2_is_set() {
        return Err(invalid(
            "mixing sysregistry v1/v2 is not supported: [registries.*] with [[registry]] or other v2 keys"
                .into(),
        ));
    }
    let v1 = f.registries.as_ref().expect("v1 is set");
    // containers/image's ConvertToV2: one table per location, blocked then
    // insecure, in order of first mention.
    for (list, blocked) in [(V1::list(&v1.block), true), (V1::list(&v1.insecure), false)] {
        for l in list {
            let l = parse_location(l)?;
            let i = match tables.iter().position(|t| t.location == l) {
                Some(i) => i,
                None => {
                    tables.push(Table {
                        prefix: l.clone(),
                        location: l,
                        ..Table::default()
                    });
                    tables.len() - 1
                }
            };
            if blocked {
                tables[i].blocked = true;
            } else {
                tables[i].insecure = true;
            }
        }
    }
    Ok(v1.search.as_ref().and_then(|l| l.registries.clone()))
}

/// One `[[registry.mirror]]` of the table for `prefix`, post-processed and checked.
fn check_mirror(prefix: &str, by_digest_only: bool, m: &mut Mirror) -> anyhow::Result<()> {
    m.location = parse_location(&m.location)?;
    if m.location.is_empty() {
        return Err(invalid(format!(
            "invalid condition: mirror location is unset (registry {:?})",
            prefix
        )));
    }
    if by_digest_only && m.pull_from_mirror.is_some() {
        return Err(invalid(format!(
            "cannot set mirror usage mirror-by-digest-only for the registry ({:?}) and pull-from-mirror for per-mirror ({:?}) at the same time",
            prefix, m.location
        )));
    }
    if let Some(p) = &m.pull_from_mirror
        && !matches!(p.as_str(), "all" | "digest-only" | "tag-only")
    {
        return Err(invalid(format!(
            "unsupported pull-from-mirror value {p:?} for mirror {:?}",
            m.location
        )));
    }
    Ok(())
}

/// One table post-processed (`prefix` defaults to `location`) and checked.
fn check_table(t: &mut Table) -> anyhow::Result<()> {
    t.location = parse_location(&t.location)?;
    if t.prefix.is_empty() {
        if t.location.is_empty() {
            return Err(invalid(
                "invalid condition: both location and prefix are unset".into(),
            ));
        }
        t.prefix = t.location.clone();
    } else {
        t.prefix = parse_location(&t.prefix)?;
        if !t.prefix.starts_with("*.") && t.location.is_empty() {
            return Err(invalid(format!(
                "invalid condition: location is unset and prefix {:?} is not in the format: *.example.com",
                t.prefix
            )));
        }
    }
    if t.pull_from_mirror.is_some() {
        return Err(invalid(format!(
            "pull-from-mirror must not be set for a non-mirror registry {:?}",
            t.prefix
        )));
    }
    for m in &mut t.mirror {
        check_mirror(&t.prefix, t.mirror_by_digest_only, m)?;
    }
    if t.prefix.starts_with("*.") && t.prefix.contains(['/', '@', ':']) {
        return Err(invalid(format!(
            "Wildcarded prefix should be in the format: *.example.com. Current prefix {:?} is incorrectly formatted",
            t.prefix
        )));
    }
    Ok(())
}

/// One registry may be named by several tables, but with one `insecure` and
/// one `blocked`.
fn check_conflicts(tables: &[Table]) -> anyhow::Result<()> {
    let key = |t: &Table| {
        if t.location.is_empty() {
            t.prefix.clone()
        } else {
            t.location.clone()
        }
    };
    for (i, a) in tables.iter().enumerate() {
        for b in &tables[..i] {
            if key(a) != key(b) {
                continue;
            }
            for (what, differ) in [
                ("insecure", a.insecure != b.insecure),
                ("blocked", a.blocked != b.blocked),
            ] {
                if differ {
                    return Err(invalid(format!(
                        "registry '{}' is defined multiple times with conflicting '{what}' setting",
                        key(a)
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The file's short-name settings, checked.
fn short_names(f: &File, search: Option<Vec<String>>) -> anyhow::Result<FileShortNames> {
    let mut short = FileShortNames::default();
    if let Some(search) = search {
        let mut list = Vec::new();
        for s in &search {
            let s = parse_location(s)?;
            if !imgref::valid_domain(&s) {
                return Err(invalid(format!(
                    "Invalid unqualified-search-registries entry {s:?}"
                )));
            }
            list.push(s);
        }
        short.search = Some(list);
    }
    short.mode = match f.short_name_mode.as_deref() {
        None | Some("") => None,
        Some(m) => Some(parse_short_name_mode(m).map_err(invalid)?),
    };
    for (name, value) in f.aliases.iter().flatten() {
        let to = validate_short_name(name).and_then(|()| match value.as_str() {
            "" => Ok(None),
            v => parse_short_name_value(v).map(Some),
        });
        let to = to.map_err(|e| invalid(format!("validating short-name aliases: {e}")))?;
        short.aliases.insert(name.clone(), to);
    }
    Ok(short)
}
