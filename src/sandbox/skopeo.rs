//! What skopeo says: its version, and its fatal errors as typed failures.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::classify::{PROXY_407, PROXY_CONNECT, classify_with_cause};
use crate::error::{Failure, Kind, Retry};
use crate::plan::proxy::{Proxy, ProxySource};

mod sources;
pub use sources::{inspect_raw_args, inspected};

/// A failure reported by skopeo, classified by its text, with the raw text kept
/// as the second line.
/// The first line says what failed and why, in the words that classified it
/// (`network error while reading the manifest: connection refused`), so that
/// a retry's warning, which gives only that line, names its cause too.
pub fn worker_failure(doing: &str, text: &str) -> Failure {
    let message = skopeo_message(text);
    // systemd-run's own error: the bus daemon or PID 1 would not start the worker's
    // unit. An SELinux denial of the fds it passes (rpm-ostree#3239) reads
    // `Connection reset by peer` here (the enforcing guest, tests/vm.sh mutants): the
    // sandbox failed, not the registry, and a retry cannot help.
    let unit_failed = message
        .lines()
        .find_map(|l| l.strip_prefix("Failed to start transient service unit: "));
    if let Some(why) = unit_failed {
        let first = format!(
            "worker failed while {doing}: systemd-run could not start the worker unit: {why}"
        );
        return Failure::new(Kind::Worker, first)
            .with_detail(message.clone())
            .with_retry(Retry::Never);
    }
    let (kind, cause) = classify_with_cause(&message);
    let lower = cause.as_deref().unwrap_or_default().to_ascii_lowercase();
    let proxy = match lower.as_str() {
        PROXY_407 => Some("the proxy refused its credentials (HTTP 407)"),
        c if c.starts_with(PROXY_CONNECT) => Some("the proxy could not be reached"),
        _ => None,
    };
    if let Some(what) = proxy {
        let cause = cause.filter(|_| lower != PROXY_407);
        let mut f = Failure::new(kind, because(format!("{what} while {doing}"), cause))
            .with_detail(message)
            .with_retry(transient_if_network(kind));
        f.via_proxy = true;
        return f;
    }
    Failure::new(
        kind,
        because(format!("{} while {doing}", what(kind)), cause),
    )
    .with_detail(message)
    .with_retry(transient_if_network(kind))
}

/// What failed, as a worker failure's first line says it for `kind`.
pub(super) fn what(kind: Kind) -> &'static str {
    match kind {
        Kind::Auth => "authentication refused",
        Kind::NotFound => "image not found",
        Kind::Tls => "TLS or certificate trust failed",
        Kind::Network => "network error",
        Kind::Verify => "verification failed",
        _ => "worker failed",
    }
}

/// A failure the worker marked retryable (protocol 0.2.8's `error_code`),
/// whatever its words say: a transient error, with the cause its words give
/// if they give one.
pub(super) fn transient_failure(doing: &str, text: &str) -> Failure {
    let message = skopeo_message(text);
    let cause = classify_with_cause(&message)
        .1
        .unwrap_or_else(|| "the worker marks it retryable".to_owned());
    Failure::new(
        Kind::Network,
        because(format!("transient error while {doing}"), Some(cause)),
    )
    .with_detail(message)
    .with_retry(Retry::Transient)
}

/// `what: cause`, or `what` alone.
pub(super) fn because(what: String, cause: Option<String>) -> String {
    match cause {
        Some(c) => format!("{what}: {c}"),
        None => what,
    }
}

/// `e`, with the worker's proxy named (`user:***`) and where it was set, if
/// the proxy failed it ([`Failure::via_proxy`]).
pub fn naming_proxy(mut e: anyhow::Error, proxy: &Proxy) -> anyhow::Error {
    let named = [("HTTPS_PROXY", &proxy.https), ("HTTP_PROXY", &proxy.http)]
        .into_iter()
        .find_map(|(name, url)| Some((name, url.as_ref()?)));
    if let (Some(f), Some((name, url))) = (e.downcast_mut::<Failure>(), named)
        && f.via_proxy
    {
        let from = match proxy.source {
            Some(ProxySource::Config) => name.to_ascii_lowercase().replace('_', "-"),
            _ => name.to_owned(),
        };
        f.message = format!("{} (proxy {url}, from {from})", f.message);
    }
    e
}

/// A network error, by skopeo's or curl's account, may pass: try again.
pub(super) fn transient_if_network(kind: Kind) -> Retry {
    match kind {
        Kind::Network => Retry::Transient,
        _ => Retry::Never,
    }
}

/// skopeo logs a fatal error as `time="…" level=fatal msg="…"`, the message
/// quoted with Go's `%q` (logrus); keep the message as skopeo wrote it, so that
/// a body skopeo quoted in it reads as quoted, and the lines of a multi-error
/// list as lines.
fn skopeo_message(text: &str) -> String {
    let Some((_, rest)) = text.rsplit_once("level=fatal msg=\"") else {
        return text.trim().to_owned();
    };
    logrus_msg(rest)
}

/// A logrus line's `msg`, from what follows its `msg="`, as it was logged.
pub(super) fn logrus_msg(rest: &str) -> String {
    let msg = rest.trim_end().strip_suffix('"').unwrap_or(rest);
    let mut out = String::with_capacity(msg.len());
    let mut chars = msg.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(e @ ('\\' | '"')) => out.push(e),
            Some(e) => out.extend(['\\', e]),
            None => out.push('\\'),
        }
    }
    out
}

/// `skopeo --version` of the worker's binary, e.g. `1.22.0`: the host's own
/// program, asked nothing from the network, with a clean environment. With a
/// `cache` file (the plan's [`WorkerSpec::version_cache`]), the answer is kept
/// there for as long as the binary is the same file, unchanged (its device,
/// inode, size and times): a timer's pull then starts no process for it.
pub(super) async fn skopeo_version(program: PathBuf, cache: Option<PathBuf>) -> Option<String> {
    let kept = cache.and_then(|c| Some((c, file_key(&program)?)));
    if let Some(version) = kept.as_ref().and_then(|(cache, key)| cached(cache, key)) {
        return Some(version);
    }
    let version = ask_version(program).await?;
    if let Some((cache, key)) = kept {
        remember(&cache, &key, &version);
    }
    Some(version)
}

/// What identifies a binary's content without reading it.
fn file_key(program: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(program).ok()?;
    Some(format!(
        "{}:{}:{}:{}.{}:{}.{}",
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    ))
}

/// The remembered version, if it was remembered for `key`: `KEY VERSION\n`.
fn cached(cache: &Path, key: &str) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(cache)
        .ok()?
        .take(256)
        .read_to_string(&mut text)
        .ok()?;
    let (k, version) = text.strip_suffix('\n')?.split_once(' ')?;
    (k == key && plausible_version(version)).then(|| version.to_owned())
}

/// Keep `version` for `key`, replacing the file whole; best effort (a state
/// directory that cannot be written only means asking again next time).
fn remember(cache: &Path, key: &str, version: &str) {
    let tmp = cache.with_extension(format!("tmp-{}", std::process::id()));
    let written = std::fs::write(&tmp, format!("{key} {version}\n"))
        .and_then(|()| std::fs::rename(&tmp, cache));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

async fn ask_version(skopeo: PathBuf) -> Option<String> {
    let mut c = tokio::process::Command::new(skopeo);
    c.arg("--version")
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(10), c.output())
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .split_whitespace()
        .skip_while(|w| *w != "version")
        .nth(1)?;
    plausible_version(version).then(|| version.to_owned())
}

fn plausible_version(version: &str) -> bool {
    !version.is_empty()
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-+~".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_classified() {
        let f = worker_failure(
            "inspecting x",
            "time=\"…\" level=fatal msg=\"reading \\\"x\\\": manifest unknown\"\n",
        );
        assert_eq!(f.kind, Kind::NotFound);
        assert_eq!(
            f.message,
            "image not found while inspecting x: registry error code manifest unknown"
        );
        assert_eq!(f.detail.as_deref(), Some("reading \"x\": manifest unknown"));
        // skopeo 1.9.3's `inspect` of a 401 with a bearer challenge and a body
        // that is not JSON: logrus quotes the message, and the body in it.
        let f = worker_failure(
            "inspecting x",
            r#"time="…" level=fatal msg="reading manifest v1 in r/x: errors:\nunauthorized: authentication required\nerror parsing HTTP 401 response body: invalid character 'x' looking for beginning of value: \"x: eof: \\\"y\\\"\\n\"\n""#,
        );
        assert_eq!(f.kind, Kind::Auth, "{:?}", f.detail);
        // systemd-run refused by the bus daemon (SELinux: no fd use on the caller's
        // fds): a worker failure, never a network error to retry.
        let f = worker_failure(
            "inspecting x",
            "Failed to start transient service unit: Connection reset by peer\n",
        );
        assert_eq!(f.kind, Kind::Worker);
        assert_eq!(
            f.message,
            "worker failed while inspecting x: systemd-run could not start the worker unit: Connection reset by peer"
        );
        assert!(matches!(f.retry, Retry::Never));
    }
}
