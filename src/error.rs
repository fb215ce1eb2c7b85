//! The typed error at the edge: every failure maps to one documented exit code.
//!
//! Library code returns `anyhow::Error`. Where a failure has a meaning for the
//! caller (auth refused, image not found, ...) it carries a [`Failure`] somewhere
//! in its chain; [`exit_code`] finds it. Anything else is an internal error.

use std::fmt;

/// Why a pull failed, as the exit code tells it. The numbers are a public contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A bug or an unexpected local condition.
    Internal = 1,
    /// Usage, configuration or bad input given to hostpull.
    Usage = 2,
    /// The registry refused our credentials (or their absence).
    Auth = 3,
    /// The image or tag does not exist.
    NotFound = 4,
    /// TLS handshake or certificate trust failed.
    Tls = 5,
    /// Network or transient registry error.
    Network = 6,
    /// Bytes did not match their digest or size, or the registry sent something malformed.
    Verify = 7,
    /// The worker or its sandbox failed.
    Worker = 8,
    /// The signature policy rejected the image (or, with `--require-signature`,
    /// would have accepted it unsigned).
    Signature = 9,
    /// The host-update consumer (rpm-ostree, bootc) failed after a good pull.
    Handoff = 10,
    /// Stopped by SIGINT (128 + 2).
    Interrupted = 130,
    /// Stopped by SIGTERM (128 + 15).
    Terminated = 143,
}

impl Kind {
    pub fn exit_code(self) -> i32 {
        self as i32
    }
}

/// A failure with a meaning for the caller. `detail` is an optional second line,
/// typically skopeo's own text.
#[derive(Debug)]
pub struct Failure {
    pub kind: Kind,
    pub message: String,
    pub detail: Option<String>,
}

impl Failure {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            detail: None,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        let detail = one_line(&detail.into());
        if !detail.is_empty() {
            self.detail = Some(detail);
        }
        self
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// Shorthand for `Err(Failure::new(kind, message).into())`.
pub fn fail<T>(kind: Kind, message: impl Into<String>) -> anyhow::Result<T> {
    Err(Failure::new(kind, message).into())
}

/// The exit code for an error chain: the first [`Failure`] in it, else internal.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    failure(err).map_or(Kind::Internal, |f| f.kind).exit_code()
}

pub fn failure(err: &anyhow::Error) -> Option<&Failure> {
    err.chain().find_map(|e| e.downcast_ref::<Failure>())
}

/// Fold a multi-line text into one line, so that an error is always one line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// serde's message for `e` without the values it quotes from the input, for
/// files that can hold secrets (a provider's `args`, an authfile): serde writes
/// `invalid type: string "s3cr3t", expected a sequence`, and this keeps
/// `invalid type: string, expected a sequence`. What serde quotes after
/// "expected" comes from our types, and so do the names in `missing field `x``
/// and `duplicate field `x``; any other `"…"` or backticked text (a string, a
/// number, an unknown key or variant) is the input's, and goes.
pub fn serde_redacted(e: &dyn fmt::Display) -> String {
    let msg = one_line(&e.to_string());
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg.as_str();
    let mut ours = false;
    while let Some(i) = rest.find(['"', '`']) {
        let (before, from) = rest.split_at(i);
        ours |= before.contains("expected");
        let quote = from.as_bytes()[0];
        // serde writes strings with Rust's `{:?}`: a quote inside one is escaped.
        let mut end = None;
        let mut escaped = false;
        for (j, b) in from.bytes().enumerate().skip(1) {
            match b {
                b'\\' if quote == b'"' && !escaped => escaped = true,
                b if b == quote && !escaped => {
                    end = Some(j);
                    break;
                }
                _ => escaped = false,
            }
        }
        let Some(end) = end else {
            // An unbalanced quote: what follows may be the value.
            out.push_str(before.trim_end());
            return out;
        };
        let name = quote == b'`'
            && (before.ends_with("missing field ") || before.ends_with("duplicate field "));
        if ours || name {
            out.push_str(&rest[..i + end + 1]);
        } else {
            out.push_str(before.trim_end_matches(' '));
        }
        rest = &from[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Classify a worker's (skopeo's) error text. skopeo 1.9.3 does not classify its
/// errors over the proxy protocol, so this reads containers/image's wording.
/// Order matters: the more specific phrases come first.
pub fn classify_worker_text(text: &str) -> Kind {
    let t = text.to_ascii_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| t.contains(n));
    if has(&[
        "unauthorized",
        "authentication required",
        "invalid username/password",
        "denied: requested access",
    ]) {
        Kind::Auth
    } else if has(&[
        "manifest unknown",
        "name unknown",
        "blob unknown",
        "not found",
        "404 (not found)",
    ]) {
        Kind::NotFound
    } else if has(&[
        "x509:",
        "certificate",
        "tls: ",
        "server gave http response to https client",
    ]) {
        Kind::Tls
    } else if has(&[
        "digest mismatch",
        "corrupted blob",
        "exceeded maximum allowed size",
        "did not match",
        "does not match",
        "size mismatch",
        "unexpected size",
    ]) {
        Kind::Verify
    } else if has(&[
        "connection refused",
        "connection reset",
        "broken pipe",
        "eof",
        "i/o timeout",
        "timeout",
        "no such host",
        "network is unreachable",
        "no route to host",
        "too many requests",
        "500 internal server error",
        "502 bad gateway",
        "503 service unavailable",
        "504 gateway timeout",
    ]) {
        Kind::Network
    } else {
        Kind::Worker
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_table() {
        let cases = [
            (
                "reading manifest v1 in 127.0.0.1:5000/x: unauthorized: authentication required",
                Kind::Auth,
            ),
            (
                "reading manifest nope in 127.0.0.1:5000/x: manifest unknown: manifest unknown",
                Kind::NotFound,
            ),
            (
                "pinging container registry 127.0.0.1:5000: Get \"https://127.0.0.1:5000/v2/\": x509: certificate signed by unknown authority",
                Kind::Tls,
            ),
            (
                "pinging container registry 127.0.0.1:1: Get \"https://127.0.0.1:1/v2/\": dial tcp 127.0.0.1:1: connect: connection refused",
                Kind::Network,
            ),
            ("reading blob: unexpected EOF", Kind::Network),
            (
                "received unexpected HTTP status: 503 Service Unavailable",
                Kind::Network,
            ),
            (
                "Digest did not match, expected sha256:aa, got sha256:bb",
                Kind::Verify,
            ),
            ("corrupted blob, expecting sha256:aa", Kind::Verify),
            (
                "reading manifest v1: exceeded maximum allowed size of 4194304 bytes",
                Kind::Verify,
            ),
            ("proxy unexpectedly exited: signal: killed", Kind::Worker),
        ];
        for (text, want) in cases {
            assert_eq!(classify_worker_text(text), want, "{text}");
        }
    }

    #[test]
    fn exit_code_finds_failure_in_chain() {
        let e = anyhow::Error::from(Failure::new(Kind::Auth, "refused")).context("Pulling x");
        assert_eq!(exit_code(&e), 3);
        assert_eq!(exit_code(&anyhow::anyhow!("boom")), 1);
    }

    #[test]
    fn serde_errors_lose_the_input_values() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct T {
            args: Vec<String>,
            n: Option<u8>,
            mode: Option<Mode>,
        }
        #[derive(Debug, serde::Deserialize)]
        enum Mode {
            Fast,
        }
        let cases = [
            (
                r#"{"args": "--token=s3cr3t \"x\" `y`"}"#,
                "invalid type: string, expected a sequence at line 1 column 35",
            ),
            (
                r#"{"args": [], "n": 99999}"#,
                "invalid value: integer, expected u8",
            ),
            (
                r#"{"args": [], "s3cr3t": 1}"#,
                "unknown field, expected one of `args`, `n`, `mode`",
            ),
            (
                r#"{"args": [], "mode": "s3cr3t"}"#,
                "unknown variant, expected `Fast`",
            ),
            (r#"{"n": 1}"#, "missing field `args`"),
            (r#"{"args": [], "args": []}"#, "duplicate field `args`"),
            (
                r#"{"args": ["a", 5.5]}"#,
                "invalid type: floating point, expected a string",
            ),
        ];
        for (json, want) in cases {
            let e = serde_json::from_str::<T>(json).unwrap_err();
            let got = serde_redacted(&e);
            assert!(got.starts_with(want), "{json}: {got:?} (serde: {e})");
            for secret in ["s3cr3t", "99999", "5.5"] {
                assert!(!got.contains(secret), "{got}");
            }
        }
    }

    #[test]
    fn detail_is_one_line() {
        let f = Failure::new(Kind::Worker, "x").with_detail("a\n  b\n");
        assert_eq!(f.detail.as_deref(), Some("a b"));
    }
}
