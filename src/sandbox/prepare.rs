//! Staging a worker's files for its isolation: root-only copies of what the
//! plan allows, and where each mode makes them appear to skopeo.

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use anyhow::Context;

use super::staging::Staging;
use super::{AUTHFILE, CA_BUNDLE, Mode, REGISTRIES_CONF, unit};
use crate::error::{Kind, fail};
use crate::plan::auth::{self, Chosen};
use crate::plan::trust::HostTrust;
use crate::plan::worker::{self, WorkerSpec};

/// Stage the files of a worker unit: secrets as credentials, generated
/// configuration as read-only binds.
pub(super) fn systemd(
    spec: &WorkerSpec,
    credentials: &[Chosen],
    staging: &Staging,
) -> anyhow::Result<unit::Mounts> {
    let mut mounts = unit::Mounts::default();
    worker_root(staging, &mut mounts).context("making the worker's root directory")?;
    if !credentials.is_empty() {
        let staged = staging.write(AUTHFILE, &auth::minimal_authfile(credentials))?;
        mounts.credentials.push((AUTHFILE.into(), staged));
    }
    let staged = staging.write(REGISTRIES_CONF, spec.registries_conf.as_bytes())?;
    mounts.credentials.push((REGISTRIES_CONF.into(), staged));
    mounts.credentials.extend(stage_proxy(spec, staging)?);
    // --registries-conf does not stop skopeo from reading the host's
    // drop-ins: hide them behind an empty directory.
    let host_dropins = Path::new("/etc/containers/registries.conf.d");
    if host_dropins.is_dir() {
        let empty = staging.path().join("registries.conf.d");
        std::fs::DirBuilder::new().mode(0o755).create(&empty)?;
        mounts.binds.push((empty, host_dropins.into()));
    }
    if let Some(dir) = spec.trust.cert_dir() {
        for name in cert_files(dir)? {
            let staged = staging.copy(&name, &dir.join(&name))?;
            mounts.credentials.push((name, staged));
        }
    }
    for (i, t) in spec.trust.hosts().iter().enumerate() {
        if let Some((_, key)) = &t.client {
            // The key stays root-only; the unit gets it as a credential.
            let name = client_key_name(i);
            let staged = staging.copy(&name, key)?;
            mounts.credentials.push((name, staged));
        }
    }
    let host_file = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let host_resolv = host_file("/etc/resolv.conf");
    mounts.resolvers = spec.dns.name_servers(&host_resolv);
    mounts.resolvers.retain(|ip| worker::ip_denied(*ip));
    if let Some(conf) = spec.dns.resolv_conf(&host_resolv) {
        let staged = staging.write_public("resolv.conf", conf.as_bytes())?;
        mounts.binds.push((staged, "/etc/resolv.conf".into()));
    }
    if let Some(hosts) = spec.dns.hosts_file(&host_file("/etc/hosts")) {
        let staged = staging.write_public("hosts", hosts.as_bytes())?;
        mounts.binds.push((staged, "/etc/hosts".into()));
    }
    Ok(mounts)
}

/// The worker unit's root directory (`RootDirectory=`), `root` in the staging
/// directory: mount points, and of the host's top-level programs, libraries,
/// configuration and add-on packages (/usr, /etc, /opt, /bin, /lib64, …)
/// each symlink as it is (`/bin` → `usr/bin` where /usr is merged) and each
/// directory bound read-only. Nothing else of the host's tree is there: not
/// /var, /srv, /home, /root, /boot, /sysroot, /ostree or the host's /run. The
/// worker's program directory, if it is elsewhere, is bound by
/// [`unit::systemd_run`].
fn worker_root(staging: &Staging, mounts: &mut unit::Mounts) -> anyhow::Result<()> {
    let root = staging.path().join("root");
    let dir = |p: &Path| std::fs::DirBuilder::new().mode(0o755).create(p);
    dir(&root)?;
    // Mount points: systemd makes what it mounts there (/proc, /dev, the
    // private /tmp and /var/tmp, /run's tmpfs), but not where they go.
    for d in ["tmp", "var", "var/tmp", "run", "dev", "proc", "sys"] {
        dir(&root.join(d))?;
    }
    let tops = [
        "usr", "etc", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
    ];
    for name in tops {
        let host = Path::new("/").join(name);
        match std::fs::symlink_metadata(&host) {
            Ok(m) if m.file_type().is_symlink() => {
                std::os::unix::fs::symlink(std::fs::read_link(&host)?, root.join(name))?;
            }
            Ok(m) if m.is_dir() => {
                dir(&root.join(name))?;
                mounts.binds.push((host.clone(), host));
            }
            _ => {}
        }
    }
    mounts.root = Some(root);
    Ok(())
}

/// Stage the files of a worker that runs as a plain child: its HOME, and
/// what its command line names.
pub(super) fn plain(
    spec: &WorkerSpec,
    credentials: &[Chosen],
    staging: &Staging,
) -> anyhow::Result<Mode> {
    let home = staging.path().join("home");
    std::fs::create_dir(&home).context("creating the worker's HOME")?;
    let authfile = if credentials.is_empty() {
        None
    } else {
        Some(staging.write(AUTHFILE, &auth::minimal_authfile(credentials))?)
    };
    let registries = staging.write(REGISTRIES_CONF, spec.registries_conf.as_bytes())?;
    stage_proxy(spec, staging)?;
    // Without mounts, trust can only be given as one --cert-dir; the
    // plan allows that only for the image's own host.
    let mut host_cert_dir = None;
    if let Some(t) = spec.trust.hosts().iter().find(|t| !t.lookaside_only) {
        let dir = format!("certs.d/{}", t.host);
        stage_certs(staging, &dir, t)?;
        if let Some((_, key)) = &t.client {
            staging.copy(&format!("{dir}/client.key"), key)?;
        }
        host_cert_dir = Some(staging.path().join(dir));
    }
    for t in spec.trust.hosts() {
        stage_ca_bundle(staging, &format!("certs.d/{}", t.host), t)?;
    }
    Ok(Mode::None {
        home,
        host_cert_dir,
        authfile,
        registries,
        children: Default::default(),
    })
}

/// Stage the proxy settings, which may hold a password, root-only as the
/// authfile is: the worker agent's environment file ([`PROXY_ENV`]) and
/// curl's `--config` per scheme ([`curl_proxy`]). Their names and paths.
fn stage_proxy(
    spec: &WorkerSpec,
    staging: &Staging,
) -> anyhow::Result<Vec<(String, std::path::PathBuf)>> {
    let mut staged = Vec::new();
    if let Some(env) = spec.proxy.env_file() {
        staged.push((PROXY_ENV.into(), staging.write(PROXY_ENV, env.as_bytes())?));
    }
    for scheme in ["http", "https"] {
        if let Some(conf) = spec.proxy.curl_config(scheme) {
            let name = curl_proxy(scheme);
            staged.push((name.clone(), staging.write(&name, conf.as_bytes())?));
        }
    }
    Ok(staged)
}

/// The proxy settings' name among the worker's credentials: the agent's
/// environment file (`plan::proxy::Proxy::env_file`).
pub(super) const PROXY_ENV: &str = "proxy.env";

impl super::Worker {
    /// A staged file of the proxy settings, `name`, as a worker running as
    /// `unit` sees it (its credentials directory), if it was staged.
    pub(super) fn proxy_file_for(
        &self,
        name: &str,
        unit: Option<&str>,
    ) -> Option<std::path::PathBuf> {
        let staged = match unit {
            Some(u) => unit::credentials_dir(u).join(name),
            None => self.staging.as_ref()?.path().join(name),
        };
        let wanted = match name {
            PROXY_ENV => self.spec.proxy.env_file().is_some(),
            _ => ["http", "https"]
                .iter()
                .any(|s| curl_proxy(s) == name && self.spec.proxy.curl_config(s).is_some()),
        };
        wanted.then_some(staged)
    }
}

/// The name of curl's proxy configuration for `scheme` URLs.
pub(super) fn curl_proxy(scheme: &str) -> String {
    format!("curl-proxy-{scheme}.conf")
}

/// The files of a `--cert-dir` that skopeo reads: CA certificates and client
/// certificate/key pairs.
pub(super) fn cert_files(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    let entries = std::fs::read_dir(dir)
        .or_else(|e| fail(Kind::Usage, format!("--cert-dir {}: {e}", dir.display())))?;
    for e in entries {
        let name = e?.file_name().into_string().unwrap_or_default();
        if [".crt", ".cert", ".key"].iter().any(|s| name.ends_with(s)) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// `DIR/ca-N.crt` and `DIR/client.cert` in the staging dir, as certs.d
/// names them: a host's public files. Its client key is the caller's, which
/// either copies it (a plain child) or links it to the unit's credentials.
pub(super) fn stage_certs(staging: &Staging, dir: &str, t: &HostTrust) -> anyhow::Result<()> {
    for (j, ca) in t.cas.iter().enumerate() {
        let pem = crate::host::read_trust_file(ca)?;
        staging.write_public(&format!("{dir}/ca-{j}.crt"), &pem)?;
    }
    if let Some((cert, _)) = &t.client {
        let pem = crate::host::read_trust_file(cert)?;
        staging.write_public(&format!("{dir}/client.cert"), &pem)?;
    }
    Ok(())
}

/// A client key's name among a unit's credentials.
pub(super) fn client_key_name(host_index: usize) -> String {
    format!("client-{host_index}.key")
}

/// `DIR/bundle.pem` in the staging dir: the system's CAs, then the host's.
pub(super) fn stage_ca_bundle(staging: &Staging, dir: &str, t: &HostTrust) -> anyhow::Result<()> {
    if t.cas.is_empty() {
        return Ok(());
    }
    let mut bundle = std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    for ca in &t.cas {
        bundle.push(b'\n');
        bundle.extend(crate::host::read_trust_file(ca)?);
    }
    staging.write_public(&format!("{dir}/{CA_BUNDLE}"), &bundle)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cert_dir_files() {
        let td = tempfile::tempdir().unwrap();
        for n in ["ca.crt", "client.cert", "client.key", "README", "auth.json"] {
            std::fs::write(td.path().join(n), "x").unwrap();
        }
        assert_eq!(
            cert_files(td.path()).unwrap(),
            ["ca.crt", "client.cert", "client.key"]
        );
    }
}
