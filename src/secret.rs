//! [`Secret`]: a credential value that no `Debug`, `Display`, log line or
//! error can print.

use serde::Deserialize;

/// A secret: a credential's `auth`, a password, a token, a plugin's answer.
/// Its `Debug` and `Display` print `<redacted>`, so no derived `Debug`, log
/// line or error can show it; [`Secret::expose`] is the one way to the value.
#[derive(Clone, PartialEq, Eq, Hash, Default, serde::Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The secret value, for the one place that must write it (the worker's
    /// authfile) or compare or decode it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}
