//! What a worker's skopeo is told, as the worker sees it: the authfile, the
//! CAs, the certs.d tree of a unit and the registries.conf, at the paths of
//! the unit's credentials under systemd and of the staging directory without.

use std::ffi::OsString;
use std::path::PathBuf;

use super::{AUTHFILE, Mode, REGISTRIES_CONF, Worker, prepare, unit};

impl Worker {
    /// The authfile as skopeo sees it: ours without systemd, the unit's
    /// credential with it.
    pub(super) fn authfile_for(&self, unit: Option<&str>) -> Option<PathBuf> {
        if self.credentials.is_empty() {
            return None;
        }
        match unit {
            Some(u) => Some(unit::credentials_dir(u).join(AUTHFILE)),
            None => match &self.mode {
                Mode::None { authfile, .. } => authfile.clone(),
                Mode::Systemd { .. } => None,
            },
        }
    }

    /// The CA directory as skopeo sees it; in a unit, its credentials directory.
    pub(super) fn cert_dir_for(&self, unit: Option<&str>) -> Option<PathBuf> {
        let Some(d) = self.spec.trust.cert_dir() else {
            return match &self.mode {
                Mode::None { host_cert_dir, .. } => host_cert_dir.clone(),
                Mode::Systemd { .. } => None,
            };
        };
        Some(unit.map_or_else(|| d.to_owned(), unit::credentials_dir))
    }

    /// A unit's certs.d tree, bound over /etc/containers/certs.d: each host's
    /// CAs and client certificate, and its client key as a link into the unit's
    /// credentials, so that the key itself never leaves root-only storage.
    pub(super) fn stage_certs_d(&self, n: u32, unit: &str) -> anyhow::Result<Option<PathBuf>> {
        let Some(staging) = &self.staging else {
            return Ok(None);
        };
        if self.spec.trust.hosts().is_empty() {
            return Ok(None);
        }
        let tree = format!("certs.d-{n}");
        for (i, t) in self.spec.trust.hosts().iter().enumerate() {
            let dir = format!("{tree}/{}", t.host);
            prepare::stage_certs(staging, &dir, t)?;
            prepare::stage_ca_bundle(staging, &dir, t)?;
            if t.client.is_some() {
                let key = unit::credentials_dir(unit).join(prepare::client_key_name(i));
                staging.symlink(&format!("{dir}/client.key"), &key)?;
            }
        }
        Ok(Some(staging.path().join(tree)))
    }

    /// The options skopeo's image commands share, after the subcommand. Never
    /// without a credentials option: without an authfile, `--no-creds` keeps
    /// skopeo from falling back to ambient files.
    pub(super) fn client_args(&self, unit: Option<&str>) -> Vec<OsString> {
        // Root alone enforces the signature policy, never the host's policy.json.
        let mut a: Vec<OsString> = vec!["--insecure-policy".into()];
        match self.authfile_for(unit) {
            Some(f) => a.extend(["--authfile".into(), f.into()]),
            None => a.push("--no-creds".into()),
        }
        if let Some(d) = self.cert_dir_for(unit) {
            a.extend(["--cert-dir".into(), d.into()]);
        }
        if !self.spec.tls_verify {
            a.push("--tls-verify=false".into());
        }
        a
    }

    /// skopeo's global option that gives it this pull's registries.conf,
    /// as a worker running as `unit` sees it.
    pub(super) fn registries_args(&self, unit: Option<&str>) -> Vec<String> {
        let conf = match (&self.mode, unit) {
            (_, Some(unit)) => Some(unit::credentials_dir(unit).join(REGISTRIES_CONF)),
            (Mode::None { registries, .. }, None) => Some(registries.clone()),
            (Mode::Systemd { .. }, None) => None,
        };
        conf.map(|c| vec!["--registries-conf".into(), c.to_string_lossy().into_owned()])
            .unwrap_or_default()
    }
}
