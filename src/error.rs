//! The typed error at the edge: every failure maps to one documented exit code.
//!
//! Library code returns `anyhow::Error`. Where a failure has a meaning for the
//! caller (auth refused, image not found, ...) it carries a [`Failure`] somewhere
//! in its chain; [`exit_code`] finds it. Anything else is an internal error.

use std::fmt;

pub mod located;

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
    /// The destination's filesystem has not the room this pull needs.
    NoSpace = 11,
    /// Deferred: a pull that waits out metered links found one.
    Deferred = 12,
    /// The image is for another platform than the one asked for (or this host's).
    Platform = 13,
    /// Stopped by SIGINT (128 + 2).
    Interrupted = 130,
    /// Stopped by SIGTERM (128 + 15).
    Terminated = 143,
}

/// The exit codes and what each means, a public contract: `--help`, the man
/// page and README's table show this table, and [`Kind::exit_code`] gives
/// its numbers (cli.rs tests both).
#[rustfmt::skip]
pub const EXIT_CODES: &[(i32, &str)] = &[
    (0, "success"),
    (1, "internal error"),
    (2, "usage, config or bad input"),
    (3, "authentication refused"),
    (4, "image, tag or platform not found"),
    (5, "TLS or trust error"),
    (6, "network or transient error, after retries; a stalled registry; `--timeout`"),
    (7, "verification failed (digest, size, malformed manifest or config, foreign layers)"),
    (8, "worker or sandbox failure (out of memory, killed, cannot start, no systemd)"),
    (9, "the signature policy rejected the image; `--require-signature` under a policy that accepts it unsigned"),
    (10, "`rebase`: the consumer (rpm-ostree, bootc) failed after a good pull; with `--dest ostree:`, the import into the repository failed (e.g. not an ostree-encapsulated image: the fetch stops then)"),
    (11, "not enough space on the destination's filesystem: what the destination lacks, less what an ostree repository keeps free (`min-free-space-*`), does not fit, checked before the first blob is fetched (or a write ran out of space); nothing is published"),
    (12, "deferred: `--defer-if-metered` (the installed timer's unit) and NetworkManager says the connection is metered, without `--allow-metered`; nothing was fetched"),
    (13, "the image is for another platform (os/architecture/variant of its config) than the one asked for, or this host's"),
    (130, "stopped by SIGINT"),
    (143, "stopped by SIGTERM"),
];

impl Kind {
    /// The process's exit code for this kind.
    pub fn exit_code(self) -> i32 {
        self as i32
    }

    /// The kind's name, as `--json` gives it with a failure
    /// (docs/failure-v0.schema.json): a public contract, as the code is.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Internal => "internal",
            Kind::Usage => "usage",
            Kind::Auth => "auth",
            Kind::NotFound => "not_found",
            Kind::Tls => "tls",
            Kind::Network => "network",
            Kind::Verify => "verify",
            Kind::Worker => "worker",
            Kind::Signature => "signature",
            Kind::Handoff => "handoff",
            Kind::NoSpace => "no_space",
            Kind::Deferred => "deferred",
            Kind::Platform => "platform",
            Kind::Interrupted => "interrupted",
            Kind::Terminated => "terminated",
        }
    }
}

/// Whether a pull that failed so may succeed when tried again, decided where
/// the failure is made (not read back from its kind or words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Retry {
    /// Trying again would fail the same way.
    #[default]
    Never,
    /// A network error or a registry's transient answer: try again.
    Transient,
    /// No data came for too long: try again, but only a few times.
    Stalled,
}

/// A failure with a meaning for the caller. `detail` is an optional second line,
/// typically skopeo's own text.
#[derive(Debug)]
pub struct Failure {
    /// What the exit code says.
    pub kind: Kind,
    /// The first line of the error.
    pub message: String,
    /// The second line, if any.
    pub detail: Option<String>,
    /// Whether the pull tries again after it.
    pub retry: Retry,
    /// The worker's HTTP(S) proxy failed it (refused its credentials, or could
    /// not be reached), not the registry: `sandbox::naming_proxy`
    /// names the proxy, and no other registry credential is tried.
    pub via_proxy: bool,
    /// The registry host (`HOST[:PORT]`) whose answer it is, if one's is.
    pub host: Option<String>,
}

impl Failure {
    /// A final failure (not retried) of `kind`.
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            detail: None,
            retry: Retry::Never,
            via_proxy: false,
            host: None,
        }
    }

    /// The registry refused the credential: the pull tries the next one. A
    /// proxy that refuses its own refuses whichever is sent.
    pub fn registry_refused(&self) -> bool {
        self.kind == Kind::Auth && !self.via_proxy
    }

    /// A failure of `kind` that says `e` in one line, with the detail and
    /// host of the failure in it.
    pub fn restating(e: &anyhow::Error, kind: Kind) -> Self {
        let of = failure(e);
        Self {
            detail: of.and_then(|f| f.detail.clone()),
            host: of.and_then(|f| f.host.clone()),
            ..Self::new(kind, one_line(&format!("{e:#}")))
        }
    }

    /// The same failure, as `host`'s answer.
    pub fn with_host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

    /// The same failure, retried as `retry` says.
    pub fn with_retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// The same failure with a second line, folded into one line.
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

/// The first [`Failure`] in an error chain.
pub fn failure(err: &anyhow::Error) -> Option<&Failure> {
    err.chain().find_map(|e| e.downcast_ref::<Failure>())
}

/// How an error quotes what the user typed, after its reason: `{:?}`, cut
/// after [`QUOTED_MAX`] characters and then saying how long it was, so that a
/// 10 kB argument is never echoed whole.
pub fn quoted(s: &str) -> String {
    match s.char_indices().nth(QUOTED_MAX) {
        None => format!("{s:?}"),
        Some((i, _)) => format!("{:?}… ({} bytes)", &s[..i], s.len()),
    }
}

/// The characters of user input an error quotes, at most.
pub const QUOTED_MAX: usize = 64;

/// Fold a multi-line text into one line, so that an error is always one line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The one `error:` line a failure ends with, on stderr, from every hostpull
/// program: `error: MESSAGE`, or `error: PROGRAM: MESSAGE` from one that root
/// starts (`confined`) where it says which. One line whatever
/// `message` holds; a closed stderr is no reason to panic.
pub fn print(program: Option<&str>, message: impl fmt::Display) {
    use std::io::Write;
    let line = one_line(&message.to_string());
    let mut err = std::io::stderr().lock();
    let _ = match program {
        Some(p) => writeln!(err, "error: {p}: {line}"),
        None => writeln!(err, "error: {line}"),
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_code_finds_failure_in_chain() {
        let e = anyhow::Error::from(Failure::new(Kind::Auth, "refused")).context("pulling x");
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
