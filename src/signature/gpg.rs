//! GPG simple signing: lookaside signatures, checked with gpgv.

use std::path::Path;
use std::process::Stdio;

use crate::digest::Sha256Digest;
use crate::error::{Failure, Kind, fail};
use crate::imgref::ImageRef;
use crate::manifest::MANIFEST_MAX;
use crate::sandbox::Worker;

/// The most signatures read per digest, from a lookaside or an attachment.
pub(super) const MAX_SIGNATURES: usize = 64;

/// Signatures from a lookaside (containers-registries.d(5)):
/// `BASE/PATH@sha256=HEX/signature-N` for N = 1, 2, … until one is missing.
/// A `file://` lookaside is read here; an http(s) one is fetched by the worker.
pub(super) async fn lookaside(
    worker: &Worker,
    base: &str,
    image: &ImageRef,
    digests: &[Sha256Digest],
) -> anyhow::Result<Vec<(Sha256Digest, Vec<u8>)>> {
    let base = base.trim_end_matches('/');
    let mut out = Vec::new();
    for d in digests {
        for n in 1..=MAX_SIGNATURES {
            let url = format!("{base}/{}@sha256={}/signature-{n}", image.path, d.hex());
            let sig = match url.strip_prefix("file://") {
                Some(path) => read_limited(Path::new(path))?,
                None => worker.fetch_url(&url, MANIFEST_MAX).await?,
            };
            let Some(sig) = sig else { break };
            out.push((d.clone(), sig));
        }
    }
    Ok(out)
}

fn read_limited(path: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    use std::io::Read as _;
    let f = match crate::open::regular(path, crate::open::Links::Follow) {
        Ok((f, _)) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return fail(
                Kind::Signature,
                format!("reading signature {}: {e}", path.display()),
            );
        }
    };
    let mut buf = Vec::new();
    f.take(MANIFEST_MAX + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MANIFEST_MAX {
        return fail(
            Kind::Signature,
            format!("signature {} is larger than 4 MiB", path.display()),
        );
    }
    Ok(Some(buf))
}

/// Check one GPG signature with gpgv against the policy's keyring only. The
/// outer error is hostpull's own trouble (no gpgv); the inner one is why this
/// signature is not acceptable.
pub(super) async fn gpg_verify(
    scratch: &Path,
    keyring: &[u8],
    sig: &[u8],
) -> anyhow::Result<Result<(String, Vec<u8>), String>> {
    let dir = tempfile::Builder::new()
        .prefix("gpgv-")
        .tempdir_in(scratch)?;
    let (ring, sig_file, out) = (
        dir.path().join("keyring.gpg"),
        dir.path().join("signature"),
        dir.path().join("payload"),
    );
    std::fs::write(&ring, keyring)?;
    std::fs::write(&sig_file, sig)?;
    let output = tokio::process::Command::new("gpgv")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .arg("--homedir")
        .arg(dir.path())
        .args(["--status-fd", "1", "--keyring"])
        .arg(&ring)
        .arg("--output")
        .arg(&out)
        .arg(&sig_file)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| {
            Failure::new(
                Kind::Internal,
                format!("running gpgv: {e} (is gpgv installed?)"),
            )
        })?;
    let status = String::from_utf8_lossy(&output.stdout);
    let field = |tag: &str| {
        status.lines().find_map(|l| {
            let mut w = l.strip_prefix("[GNUPG:] ")?.split(' ');
            (w.next()? == tag).then(|| w.collect::<Vec<_>>())
        })
    };
    if output.status.success()
        && let Some(valid) = field("VALIDSIG")
    {
        // VALIDSIG <signing key fpr> … <primary key fpr>
        let fpr = valid.get(9).or(valid.first()).copied().unwrap_or_default();
        let payload = std::fs::read(&out)?;
        return Ok(Ok((fpr.to_owned(), payload)));
    }
    let why = if let Some(k) = field("NO_PUBKEY") {
        format!(
            "signed by key {}, which the policy does not trust",
            k.join(" ")
        )
    } else if field("BADSIG").is_some() {
        "bad signature".to_owned()
    } else {
        let err = String::from_utf8_lossy(&output.stderr);
        format!(
            "not a valid signature (gpgv: {})",
            err.lines().last().unwrap_or("failed")
        )
    };
    Ok(Err(why))
}
