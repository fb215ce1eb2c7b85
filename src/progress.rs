//! What a pull reports: the final JSON object on stdout (`--json`) and the
//! human summary on stderr.

use serde::Serialize;

use crate::plan::imgref::Sha256Digest;
use crate::sandbox::SandboxMode;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub image: String,
    pub manifest_digest: Sha256Digest,
    pub media_type: String,
    pub platform: String,
    pub dest: String,
    pub tag: String,
    pub layers_total: usize,
    pub layers_fetched: usize,
    pub layers_reused: usize,
    pub bytes_fetched: u64,
    pub elapsed_ms: u128,
    pub sandbox: SandboxMode,
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
