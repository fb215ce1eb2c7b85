//! What a finished pull reports: the JSON object of `--json`, the one-line
//! summary, and what they say about credentials and the worker; and what a
//! failed one says: whose answer it was, and which credentials come next.

use serde::Serialize;

use crate::digest::Sha256Digest;
use crate::error::{Failure, Kind};
use crate::imgref::ImageRef;
use crate::plan::auth::HostCredentials;
use crate::sandbox::WorkerReport;

/// The final report of a pull: `--json` on stdout, the summary on stderr,
/// and the journal.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The image reference as given.
    pub image: String,
    /// The digest of the manifest in the layout.
    pub manifest_digest: Sha256Digest,
    /// The digest of the manifest the registry served; it differs from
    /// `manifest_digest` only for a Docker schema2 image, stored in OCI form.
    pub source_digest: Sha256Digest,
    /// The platform the image's config declares (the one asked for, where it
    /// names none), `OS/ARCH[/VARIANT]`.
    pub platform: String,
    /// The layout directory, or the ostree repository.
    pub dest: String,
    /// The tag in the layout.
    pub tag: String,
    /// Layers of the manifest.
    pub layers_total: usize,
    /// Layers this pull fetched.
    pub layers_fetched: usize,
    /// Layers that were there already.
    pub layers_reused: usize,
    /// Bytes this pull fetched (config included).
    pub bytes_fetched: u64,
    /// How long the pull took, in milliseconds.
    pub elapsed_ms: u128,
    /// `--max-rate`, bytes a second; null: no limit.
    pub max_rate: Option<u64>,
    /// The signature policy's verdict.
    pub signature: crate::signature::Verdict,
    /// For each host, where the credential that was used came from (never
    /// the secret).
    pub credentials: Vec<CredentialReport>,
    /// What the worker was and did.
    pub worker: WorkerReport,
    /// With `--dest ostree:`, what the import did (`dest` is then the repository).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ostree: Option<crate::wire::import::Imported>,
    /// With `--dest containers-storage:`, how consumers name the image in the
    /// store: `containers-storage:[STORE]NAME@DIGEST`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored: Option<String>,
}

/// Where the credential for one host came from (never the secret).
#[derive(Debug, Clone, Serialize)]
pub struct CredentialReport {
    /// The registry host.
    pub host: String,
    /// The file or plugin it came from.
    pub source: String,
    /// Its key in that source (a host or a repository path).
    pub key: String,
    /// Which of the host's candidates it was (1 is the first), of how many:
    /// the pull moves on to the next one when the registry refuses one.
    pub candidate: usize,
    /// How many candidates the host had.
    pub candidates: usize,
}

impl CredentialReport {
    /// The credentials of try `n` (`plan::auth::attempt`), among all candidates.
    pub fn of_attempt(all: &[crate::plan::auth::HostCredentials], n: usize) -> Vec<Self> {
        all.iter()
            .map(|h| {
                let (i, c) = h.for_try(n);
                Self {
                    candidate: 1 + i,
                    candidates: h.candidates().len(),
                    host: c.host.clone(),
                    source: c.source.clone(),
                    key: c.key.clone(),
                }
            })
            .collect()
    }
}

impl Report {
    /// The one line a person reads when the pull is done.
    pub fn summary(&self) -> String {
        let into = match (&self.ostree, &self.stored) {
            (Some(o), _) => format!("ostree:{} (commit {})", self.dest, o.commit),
            (None, Some(s)) => s.clone(),
            (None, None) => format!("oci:{}:{}", self.dest, self.tag),
        };
        format!(
            "Pulled {} ({}) into {into}: {} layers, {} fetched, {} reused, {:.1} MiB in {:.2} s",
            self.image,
            self.manifest_digest,
            self.layers_total,
            self.layers_fetched,
            self.layers_reused,
            self.bytes_fetched as f64 / (1 << 20) as f64,
            self.elapsed_ms as f64 / 1000.0
        )
    }
}

/// A failed pull's error as its one source's answer (`--json`'s `host`) when
/// the pull had one source and the failure is a registry's answer that names
/// no host yet: a blob's, a timeout's. With mirrors, only the manifest's
/// failure can tell which source answered (`sandbox::skopeo::sources`).
pub fn on_host(mut e: anyhow::Error, sources: &[ImageRef]) -> anyhow::Error {
    use Kind::*;
    if let ([only], Some(f)) = (sources, e.downcast_mut::<Failure>())
        && f.host.is_none()
        && matches!(f.kind, Auth | NotFound | Tls | Network | Verify)
    {
        f.host = Some(only.domain.clone());
    }
    e
}

/// The warning before try `n + 1`, after try `n` was refused with `e`: the
/// refusal as its error says it (which host refused which credential), then
/// the credentials that change, by host, source and key.
pub fn next_credentials(e: &anyhow::Error, all: &[HostCredentials], n: usize) -> String {
    let refused = crate::error::failure(e).map_or_else(|| e.to_string(), |f| f.message.clone());
    let next: Vec<String> = all
        .iter()
        .filter(|h| h.for_try(n + 1).0 != h.for_try(n).0)
        .map(|h| {
            let c = h.for_try(n + 1).1;
            format!("{}: {} (key {})", c.host, c.source, c.key)
        })
        .collect();
    let tries = crate::plan::auth::attempts(all);
    format!(
        "{refused}; trying credentials {} of {tries}: {}",
        n + 2,
        next.join(", ")
    )
}
