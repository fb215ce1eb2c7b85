//! Per-host trust for the hosts of one pull: CA certificates from `--ca
//! HOST[:PORT]=FILE` and from the host's certs.d directories, and client
//! certificates (containers-certs.d(5)). Trust applies to exactly its host; it
//! never becomes a global CA the way skopeo's `--cert-dir` would.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::error::{Kind, fail, quoted};
use crate::imgref::valid_domain;
use crate::plan::host::{FileKind, Host};

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

/// How the worker trusts registries: one CA directory for every host, or each
/// host its own CAs and client certificate. `--cert-dir` and `--ca` exclude
/// each other, and so do these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// `--cert-dir`: skopeo's `--cert-dir`, for every host.
    CertDir(PathBuf),
    /// `--ca` and certs.d: only the hosts of this pull that have any.
    PerHost(Vec<HostTrust>),
}

impl Default for Trust {
    fn default() -> Self {
        Self::PerHost(Vec::new())
    }
}

impl Trust {
    /// The per-host entries; none under `--cert-dir`.
    pub fn hosts(&self) -> &[HostTrust] {
        match self {
            Self::PerHost(hosts) => hosts,
            Self::CertDir(_) => &[],
        }
    }

    /// The one directory of `--cert-dir`.
    pub fn cert_dir(&self) -> Option<&Path> {
        match self {
            Self::CertDir(dir) => Some(dir),
            Self::PerHost(_) => None,
        }
    }
}

/// Parse `--ca HOST[:PORT]=FILE`.
pub fn parse_ca(host_fs: &dyn Host, arg: &str) -> anyhow::Result<(String, PathBuf)> {
    let Some((host, file)) = arg.split_once('=') else {
        return fail(
            Kind::Usage,
            format!("invalid --ca: expected HOST[:PORT]=FILE: {}", quoted(arg)),
        );
    };
    if !valid_domain(host) {
        return fail(
            Kind::Usage,
            format!("invalid --ca: not HOST[:PORT]: {}", quoted(host)),
        );
    }
    check_certificate(host_fs, Path::new(file)).with_context(|| format!("--ca {arg}"))?;
    Ok((host.to_owned(), file.into()))
}

/// [`check_file`], and the file holds a certificate: a PEM `CERTIFICATE`
/// block that parses, as Go's `AppendCertsFromPEM` needs one. skopeo skips a
/// CA file without any, and the TLS failure that follows names no file.
fn check_certificate(host: &dyn Host, path: &Path) -> anyhow::Result<()> {
    use x509_cert::der::DecodePem;
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let bytes = check_file(host, path)?;
    let text = String::from_utf8_lossy(&bytes);
    let parses = |block: &str| x509_cert::Certificate::from_pem(block).is_ok();
    let mut rest = text.as_ref();
    while let Some(at) = rest.find(BEGIN) {
        let Some(end) = rest[at..].find(END).map(|e| at + e + END.len()) else {
            break;
        };
        if parses(&rest[at..end]) {
            return Ok(());
        }
        rest = &rest[end..];
    }
    fail(
        Kind::Usage,
        format!(
            "{}: no certificate in it (a PEM CERTIFICATE block)",
            path.display()
        ),
    )
}

/// Check that a trust file (a CA, a client certificate or key) can be read,
/// or fail with a usage error naming it: a directory, a dangling link or a
/// file that cannot be read is configuration to fix. Anything but a regular
/// file is refused before it is read (reading a FIFO would block). Gives its
/// bytes.
fn check_file(host: &dyn Host, path: &Path) -> anyhow::Result<Vec<u8>> {
    match host.kind(path) {
        Ok(FileKind::File) => {}
        Ok(_) => {
            return fail(
                Kind::Usage,
                format!("{}: not a regular file", path.display()),
            );
        }
        Err(e) => return fail(Kind::Usage, format!("reading {}: {e}", path.display())),
    }
    match host.read(path) {
        Ok(bytes) => Ok(bytes),
        Err(e) => fail(Kind::Usage, format!("reading {}: {e}", path.display())),
    }
}

/// The trust of each host in `hosts` that has any: `--ca` files first, then the
/// certs.d directory found below the host's root.
pub fn resolve(
    host_fs: &dyn Host,
    hosts: &[String],
    cas: &[(String, PathBuf)],
) -> anyhow::Result<Vec<HostTrust>> {
    let root = host_fs.root();
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
            .find(|d| host_fs.directory(d))
        {
            let entries = host_fs
                .list(&dir)
                .or_else(|e| fail(Kind::Usage, format!("reading {}: {e}", dir.display())))?;
            let mut names: Vec<String> = entries
                .into_iter()
                .filter_map(|e| e.into_string().ok())
                .collect();
            names.sort();
            // Each file this pull will read, checked now: the plan either
            // holds or names the file that is wrong.
            for n in &names {
                if n.ends_with(".crt") {
                    check_certificate(host_fs, &dir.join(n))?;
                    t.cas.push(dir.join(n));
                } else if let Some(base) = n.strip_suffix(".cert") {
                    let key = format!("{base}.key");
                    if !names.contains(&key) {
                        return fail(Kind::Usage, format!("{}: {n} has no {key}", dir.display()));
                    }
                    if t.client.is_none() {
                        check_certificate(host_fs, &dir.join(n))?;
                        check_file(host_fs, &dir.join(&key))?;
                        t.client = Some((dir.join(n), dir.join(key)));
                    }
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
    use crate::plan::testing::MemHost;

    const CERT: &str = include_str!("../signature/testdata/fulcio_v1.crt.pem");

    #[test]
    fn ca_flags() {
        let h = MemHost::new("/r").file("ca.crt", CERT);
        let ok = parse_ca(&h, "reg.svc:5000=/r/ca.crt").unwrap();
        assert_eq!(ok, ("reg.svc:5000".to_owned(), PathBuf::from("/r/ca.crt")));
        for bad in ["reg.svc", "bad host=/x", "reg.svc=/r/nope"] {
            assert_eq!(
                crate::error::exit_code(&parse_ca(&h, bad).unwrap_err()),
                2,
                "{bad}"
            );
        }
    }

    #[test]
    fn per_host_from_flags_and_certs_d() {
        let root = Path::new("/r");
        // The certs.d files, the client key only if `key`.
        let host = |key: bool| {
            let h = MemHost::new(root)
                .file("flags/svc-ca.crt", CERT)
                // containers' certs.d wins over docker's for the same host.
                .file("etc/containers/certs.d/a.example:5000/ca.crt", CERT)
                .file("etc/docker/certs.d/a.example:5000/other.crt", CERT)
                .file("etc/docker/certs.d/b.example/ca.crt", CERT)
                .file("etc/docker/certs.d/b.example/client.cert", CERT)
                .file("etc/docker/certs.d/unrelated.example/ca.crt", CERT);
            if key {
                h.file("etc/docker/certs.d/b.example/client.key", CERT)
            } else {
                h
            }
        };
        let hosts = [
            "a.example:5000".to_owned(),
            "b.example".to_owned(),
            "c.example".to_owned(),
        ];
        let flag_ca = root.join("flags/svc-ca.crt");
        let cas = vec![("a.example:5000".to_owned(), flag_ca.clone())];
        let t = resolve(&host(true), &hosts, &cas).unwrap();
        assert_eq!(
            t.len(),
            2,
            "c has nothing, unrelated is not a host of this pull"
        );
        let b = root.join("etc/docker/certs.d/b.example");
        assert_eq!(
            t[0].cas,
            [
                flag_ca,
                root.join("etc/containers/certs.d/a.example:5000/ca.crt")
            ]
        );
        assert_eq!(t[1].cas, [b.join("ca.crt")]);
        assert_eq!(
            t[1].client,
            Some((b.join("client.cert"), b.join("client.key")))
        );
        // A certificate without its key is a usage error.
        assert_eq!(
            crate::error::exit_code(&resolve(&host(false), &hosts, &[]).unwrap_err()),
            2
        );
    }

    /// A file of certs.d that this pull would read and cannot (a directory, a
    /// dangling link, a FIFO) is a usage error naming it, at plan time.
    // On the real filesystem: a dangling link and a FIFO, which MemHost cannot model.
    #[test]
    fn unreadable_trust_files_are_usage_errors_naming_them() {
        let hosts = ["r.example:5000".to_owned()];
        type Make = fn(&Path);
        let cases: [(&str, Make); 5] = [
            ("ca.crt", |p| std::fs::create_dir(p).unwrap()),
            ("ca.crt", |p| {
                std::os::unix::fs::symlink("/nonexistent", p).unwrap()
            }),
            ("ca.crt", |p| {
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    p,
                    rustix::fs::FileType::Fifo,
                    rustix::fs::Mode::RUSR,
                    0,
                )
                .unwrap()
            }),
            ("client.key", |p| std::fs::create_dir(p).unwrap()),
            ("client.cert", |p| std::fs::create_dir(p).unwrap()),
        ];
        for (name, make) in cases {
            let td = tempfile::tempdir().unwrap();
            let dir = td.path().join("etc/containers/certs.d/r.example:5000");
            std::fs::create_dir_all(&dir).unwrap();
            for n in ["client.cert", "client.key"] {
                std::fs::write(dir.join(n), CERT).unwrap();
            }
            let bad = dir.join(name);
            let _ = std::fs::remove_file(&bad);
            make(&bad);
            let h = crate::host::System::open(td.path()).unwrap();
            let e = resolve(&h, &hosts, &[]).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{name}: {e:#}");
            assert!(format!("{e:#}").contains(bad.to_str().unwrap()), "{e:#}");
            // And the same file given with --ca.
            if name == "ca.crt" {
                let e = parse_ca(&h, &format!("r.example:5000={}", bad.display())).unwrap_err();
                assert_eq!(crate::error::exit_code(&e), 2, "{e:#}");
                assert!(format!("{e:#}").contains(bad.to_str().unwrap()), "{e:#}");
            }
        }
    }

    /// A CA or client certificate file without a certificate in it is a usage
    /// error naming it, at plan time (skopeo would skip it, and the TLS
    /// failure would name nothing); one is enough, among anything else.
    #[test]
    fn trust_files_without_a_certificate_are_usage_errors_naming_them() {
        let garbled = CERT.replacen("MII", "AAA", 1);
        let key =
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n";
        // (contents, has a certificate)
        let cases = [
            (String::new(), false),
            ("not pem\n".to_owned(), false),
            (key.to_owned(), false),
            (garbled.clone(), false),
            (format!("# a bundle\n{key}{garbled}\n{CERT}"), true),
            (CERT.to_owned(), true),
        ];
        for (text, ok) in cases {
            for name in ["ca.crt", "client.cert"] {
                let dir = Path::new("/r/etc/containers/certs.d/r.example");
                let h = ["ca.crt", "client.cert", "client.key"]
                    .iter()
                    .fold(MemHost::new("/r"), |h, n| h.file(dir.join(n), CERT))
                    .file(dir.join(name), &text);
                let r = resolve(&h, &["r.example".to_owned()], &[]);
                let bad = dir.join(name);
                let flag = parse_ca(&h, &format!("r.example={}", bad.display()));
                for r in [r.map(drop), flag.map(drop)] {
                    match r {
                        Ok(()) => assert!(ok, "{name}: {text:?}"),
                        Err(e) => {
                            assert!(!ok, "{name}: {text:?}: {e:#}");
                            assert_eq!(crate::error::exit_code(&e), 2, "{e:#}");
                            let want = format!("{}: no certificate in it", bad.display());
                            assert!(format!("{e:#}").contains(&want), "{e:#}");
                        }
                    }
                }
            }
        }
    }
}
