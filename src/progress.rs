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
    /// The signature policy's verdict.
    pub signature: crate::signature::Verdict,
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

/// `--progress-fd N`: bootc's JSON Lines progress protocol (docs/progress-v0.schema.json).
/// The first line is `Start`; then `ProgressSteps` at each stage and
/// `ProgressBytes` at most 5 times a second while blobs stream. A write error
/// (the reader went away) stops the events, never the pull.
#[derive(Debug, Default)]
pub struct ProgressFd {
    out: std::sync::Mutex<Option<std::fs::File>>,
}

/// The protocol version in `Start`.
pub const PROGRESS_VERSION: &str = "0.1.0";

impl ProgressFd {
    /// Open fd `n` for writing (through /proc/self/fd, so no unsafe is needed).
    /// Standard input, output and error are refused: they carry other things.
    pub fn open(fd: Option<i32>) -> anyhow::Result<Self> {
        let Some(n) = fd else {
            return Ok(Self::default());
        };
        if (0..=2).contains(&n) {
            return crate::error::fail(
                crate::error::Kind::Usage,
                format!("--progress-fd {n}: fds 0, 1 and 2 are not for progress"),
            );
        }
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(format!("/proc/self/fd/{n}"))
            .map_err(|e| {
                crate::error::Failure::new(
                    crate::error::Kind::Usage,
                    format!("--progress-fd {n}: {e}"),
                )
            })?;
        let p = Self {
            out: std::sync::Mutex::new(Some(f)),
        };
        p.emit(&serde_json::json!({"type": "Start", "version": PROGRESS_VERSION}));
        Ok(p)
    }

    pub fn enabled(&self) -> bool {
        self.out.lock().unwrap().is_some()
    }

    fn emit(&self, event: &serde_json::Value) {
        use std::io::Write as _;
        let mut out = self.out.lock().unwrap();
        if let Some(f) = out.as_mut() {
            let mut line = event.to_string();
            line.push('\n');
            if f.write_all(line.as_bytes()).is_err() {
                *out = None;
            }
        }
    }

    /// A stage of the pull: `step` of `total`.
    pub fn steps(&self, description: &str, step: u64, total: u64) {
        self.emit(&serde_json::json!({
            "type": "ProgressSteps", "task": "pull", "description": description, "id": "pull",
            "stepsCached": 0, "steps": step, "stepsTotal": total, "subtasks": [],
        }));
    }

    /// Bytes of the blobs being fetched; `blobs` is (digest, bytes, total).
    pub fn bytes(&self, description: &str, blobs: &[(String, u64, u64)], done: u64) {
        let subtasks: Vec<_> = blobs
            .iter()
            .map(|(id, bytes, total)| {
                serde_json::json!({"subtask": "blob", "description": id, "id": id,
                                   "bytesCached": 0, "bytes": bytes, "bytesTotal": total})
            })
            .collect();
        self.emit(&serde_json::json!({
            "type": "ProgressBytes", "task": "fetch", "description": description, "id": "fetch",
            "bytesCached": 0,
            "bytes": blobs.iter().map(|b| b.1).sum::<u64>(),
            "bytesTotal": blobs.iter().map(|b| b.2).sum::<u64>(),
            "stepsCached": 0, "steps": done, "stepsTotal": blobs.len(),
            "subtasks": subtasks,
        }));
    }
}
