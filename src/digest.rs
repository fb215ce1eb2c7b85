//! SHA-256 digests: the one algorithm root verifies with, parsed and computed.

use std::fmt;

use sha2::{Digest as _, Sha256};

/// A validated `sha256:<64 lowercase hex>` digest. Other algorithms are refused:
/// root verifies every byte with SHA-256 and nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256Digest(String);

impl Sha256Digest {
    /// `s` if it is `sha256:` and 64 lowercase hex characters.
    pub fn parse(s: &str) -> Option<Self> {
        let hex = s.strip_prefix("sha256:")?;
        (hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| Self(s.to_owned()))
    }

    /// The digest of these hex characters; the caller vouches for them.
    pub fn from_hex(hex: &str) -> Self {
        Self(format!("sha256:{hex}"))
    }

    /// The 64 hex characters, which are also the blob's file name in a layout.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    /// `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for Sha256Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Sha256Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unsupported digest {s:?}")))
    }
}

/// The digest of `bytes`.
pub fn sha256(bytes: &[u8]) -> Sha256Digest {
    Sha256Digest::from_hex(&hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn digest_parse() {
        assert!(Sha256Digest::parse(D).is_some());
        assert_eq!(Sha256Digest::parse(D).unwrap().hex().len(), 64);
        assert!(Sha256Digest::parse("sha256:abc").is_none());
        assert!(Sha256Digest::parse(&D.replace("sha256", "sha512")).is_none());
        assert_eq!(
            sha256(b"").as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
