//! Root-side verification: every byte the worker hands over is hashed here and
//! checked against its descriptor's digest and size. The worker is untrusted.

use sha2::{Digest as _, Sha256};

use crate::digest::Sha256Digest;
use crate::error::{Kind, fail};

/// Check a whole buffer against its expected digest and size.
pub fn check_bytes(
    what: &str,
    bytes: &[u8],
    digest: &Sha256Digest,
    size: u64,
) -> anyhow::Result<()> {
    let mut v = Verifier::new(what, digest.clone(), size);
    v.update(bytes)?;
    v.finish()
}

/// A streaming check of one blob: feed it every chunk, then `finish`.
#[derive(Debug)]
pub struct Verifier {
    what: String,
    digest: Sha256Digest,
    size: u64,
    seen: u64,
    hasher: Sha256,
}

impl Verifier {
    /// A check of `size` bytes against `digest`; `what` names it in errors.
    pub fn new(what: &str, digest: Sha256Digest, size: u64) -> Self {
        Self {
            what: what.to_owned(),
            digest,
            size,
            seen: 0,
            hasher: Sha256::new(),
        }
    }

    /// Hash a chunk. Fails as soon as more bytes arrive than the descriptor allows,
    /// so an endless stream is cut off early.
    pub fn update(&mut self, chunk: &[u8]) -> anyhow::Result<()> {
        self.seen += chunk.len() as u64;
        if self.seen > self.size {
            return fail(
                Kind::Verify,
                format!(
                    "{} {} is longer than the {} bytes its descriptor states",
                    self.what, self.digest, self.size
                ),
            );
        }
        self.hasher.update(chunk);
        Ok(())
    }

    /// Fail unless exactly `size` bytes came and their digest matches.
    pub fn finish(self) -> anyhow::Result<()> {
        if self.seen != self.size {
            return fail(
                Kind::Verify,
                format!(
                    "{} {} is {} bytes, but its descriptor states {}",
                    self.what, self.digest, self.seen, self.size
                ),
            );
        }
        let got = hex::encode(self.hasher.finalize());
        if got != self.digest.hex() {
            return fail(
                Kind::Verify,
                format!(
                    "{} digest mismatch: expected {}, got sha256:{got}",
                    self.what, self.digest
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::sha256;
    use crate::error::exit_code;

    #[test]
    fn verifier_table() {
        let data = b"hello world";
        let good = sha256(data);
        let other = sha256(b"other");
        let n = data.len() as u64;
        let cases: &[(&[u8], &Sha256Digest, u64, bool)] = &[
            (data, &good, n, true),
            (data, &other, n, false),
            (data, &good, n + 1, false),
            (data, &good, n - 1, false),
            (b"", &sha256(b""), 0, true),
        ];
        for (bytes, digest, size, ok) in cases {
            let r = check_bytes("blob", bytes, digest, *size);
            assert_eq!(r.is_ok(), *ok, "{digest} {size}");
            if let Err(e) = r {
                assert_eq!(exit_code(&e), 7);
            }
        }
        // Chunked feeding gives the same answer as one buffer.
        let mut v = Verifier::new("blob", good.clone(), n);
        for c in data.chunks(3) {
            v.update(c).unwrap();
        }
        v.finish().unwrap();
    }

    #[test]
    fn known_digest() {
        assert_eq!(
            sha256(b"").as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
