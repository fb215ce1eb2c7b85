//! What a pull reports: the final JSON object on stdout (`--json`) and the
//! human summary on stderr.

use serde::Serialize;

use crate::plan::imgref::Sha256Digest;
use crate::sandbox::WorkerReport;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub image: String,
    /// The digest of the manifest in the layout.
    pub manifest_digest: Sha256Digest,
    /// The digest of the manifest the registry served; it differs from
    /// `manifest_digest` only for a Docker schema2 image, stored in OCI form.
    pub source_digest: Sha256Digest,
    pub platform: String,
    pub dest: String,
    pub tag: String,
    pub layers_total: usize,
    pub layers_fetched: usize,
    pub layers_reused: usize,
    pub bytes_fetched: u64,
    pub elapsed_ms: u128,
    /// For each host, where its credential came from (never the secret).
    pub credentials: Vec<CredentialReport>,
    pub worker: WorkerReport,
}

#[derive(Debug, Clone, Serialize)]
pub struct CredentialReport {
    pub host: String,
    pub source: String,
    pub key: String,
}

impl Report {
    pub fn summary(&self) -> String {
        format!(
            "Pulled {} ({}) into oci:{}:{}: {} layers, {} fetched, {} reused, {:.1} MiB in {:.2} s",
            self.image,
            self.manifest_digest,
            self.dest,
            self.tag,
            self.layers_total,
            self.layers_fetched,
            self.layers_reused,
            self.bytes_fetched as f64 / (1 << 20) as f64,
            self.elapsed_ms as f64 / 1000.0
        )
    }
}
