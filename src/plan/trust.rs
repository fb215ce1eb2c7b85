//! Per-host trust for the hosts of one pull: CA certificates from `--ca
//! HOST[:PORT]=FILE` and from the host's certs.d directories, and client
//! certificates (containers-certs.d(5)). Trust applies to exactly its host; it
//! never becomes a global CA the way skopeo's `--cert-dir` would.

use std::path::{Path, PathBuf};

use crate::error::{Kind, fail};
use crate::plan::imgref::valid_domain;

/// The certs.d directories read for a host, relative to the root; for each
/// host the first that has a `HOST[:PORT]` directory wins, as in containers/image.
pub const CERTS_D: &[&str] = &["etc/containers/certs.d", "etc/docker/certs.d"];

/// What one host is trusted with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostTrust {
    /// `host[:port]`, as in the image reference.
    pub host: String,
    /// CA certificates (PEM files) for this host only.
    pub cas: Vec<PathBuf>,
    /// A client certificate and its private key.
    pub client: Option<(PathBuf, PathBuf)>,
    /// Only the signature lookaside is on this host, no registry: its CAs are
    /// for curl, never skopeo's `--cert-dir`.
    pub lookaside_only: bool,
}

/// Parse `--ca HOST[:PORT]=FILE`.
pub fn parse_ca(arg: &str) -> anyhow::Result<(String, PathBuf)> {
    let Some((host, file)) = arg.split_once('=') else {
        return fail(
            Kind::Usage,
            format!("invalid --ca {arg:?}: expected HOST[:PORT]=FILE"),
        );
    };
    if !valid_domain(host) {
        return fail(
            Kind::Usage,
            format!("invalid --ca {arg:?}: {host:?} is not HOST[:PORT]"),
        );
    }
    if !Path::new(file).is_file() {
        return fail(Kind::Usage, format!("--ca {arg}: no such file"));
    }
    Ok((host.to_owned(), file.into()))
}

/// The trust of each host in `hosts` that has any: `--ca` files first, then the
/// certs.d directory found below `root`.
pub fn resolve(
    hosts: &[String],
    cas: &[(String, PathBuf)],
    root: &Path,
) -> anyhow::Result<Vec<HostTrust>> {
    let mut out = Vec::new();
    for host in hosts {
        let mut t = HostTrust {
            host: host.clone(),
            cas: cas
                .iter()
                .filter(|(h, _)| h == host)
                .map(|(_, f)| f.clone())
                .collect(),
            client: None,
            lookaside_only: false,
        };
        if let Some(dir) = CERTS_D
            .iter()
            .map(|d| root.join(d).join(host))
            .find(|d| d.is_dir())
        {
            let mut names: Vec<String> = std::fs::read_dir(&dir)?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect();
            names.sort();
            for n in &names {
                if n.ends_with(".crt") {
                    t.cas.push(dir.join(n));
                } else if let Some(base) = n.strip_suffix(".cert") {
                    let key = format!("{base}.key");
                    if !names.contains(&key) {
                        return fail(Kind::Usage, format!("{}: {n} has no {key}", dir.display()));
                    }
                    t.client.get_or_insert((dir.join(n), dir.join(key)));
                }
            }
        }
        if !t.cas.is_empty() || t.client.is_some() {
            out.push(t);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_flags() {
        let td = tempfile::tempdir().unwrap();
        let f = td.path().join("ca.crt");
        std::fs::write(&f, "pem").unwrap();
        let ok = parse_ca(&format!("reg.svc:5000={}", f.display())).unwrap();
        assert_eq!(ok, ("reg.svc:5000".to_owned(), f.clone()));
        for bad in [
            "reg.svc",
            "bad host=/x",
            &format!("reg.svc={}", td.path().join("nope").display()),
        ] {
            assert_eq!(
                crate::error::exit_code(&parse_ca(bad).unwrap_err()),
                2,
                "{bad}"
            );
        }
    }

    #[test]
    fn per_host_from_flags_and_certs_d() {
        let td = tempfile::tempdir().unwrap();
        let root = td.path();
        let w = |p: &str| {
            let p = root.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, "x").unwrap();
            p
        };
        let flag_ca = w("flags/svc-ca.crt");
        // containers' certs.d wins over docker's for the same host.
        let a_ca = w("etc/containers/certs.d/a.example:5000/ca.crt");
        w("etc/docker/certs.d/a.example:5000/other.crt");
        let b_ca = w("etc/docker/certs.d/b.example/ca.crt");
        let b_cert = w("etc/docker/certs.d/b.example/client.cert");
        let b_key = w("etc/docker/certs.d/b.example/client.key");
        w("etc/docker/certs.d/unrelated.example/ca.crt");
        let hosts = [
            "a.example:5000".to_owned(),
            "b.example".to_owned(),
            "c.example".to_owned(),
        ];
        let cas = vec![("a.example:5000".to_owned(), flag_ca.clone())];
        let t = resolve(&hosts, &cas, root).unwrap();
        assert_eq!(
            t.len(),
            2,
            "c has nothing, unrelated is not a host of this pull"
        );
        assert_eq!(t[0].cas, [flag_ca, a_ca]);
        assert_eq!(t[1].cas, [b_ca]);
        assert_eq!(t[1].client, Some((b_cert, b_key)));
        // A certificate without its key is a usage error.
        std::fs::remove_file(root.join("etc/docker/certs.d/b.example/client.key")).unwrap();
        assert_eq!(
            crate::error::exit_code(&resolve(&hosts, &[], root).unwrap_err()),
            2
        );
    }
}
