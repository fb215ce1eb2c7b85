//! Which source of an image (its mirrors, then the primary) answered what, as
//! skopeo says it, and how hostpull says it: by host, and for a refusal, the
//! credential by source and key, or that the pull had none for that host.
//!
//! skopeo says it only under `--debug`, one line per source that failed
//! (containers/image's `newImageSource`, every version the suite runs:
//! `Accessing "REF" failed: ERR`), so `inspect --raw` runs with `--debug` when
//! the image has mirrors. The fatal error joins the same texts into one
//! (`(Mirrors also failed: [REF: ERR]…): REF: ERR`), which a mirror's answer
//! could decide were it read as a whole.

use crate::error::{Failure, Kind};
use crate::plan::auth::Chosen;
use crate::plan::worker::WorkerSpec;
use crate::sandbox::classify::classify_with_cause;

use super::{because, logrus_msg, transient_if_network, what, worker_failure};

/// What one source answered: its host, and the kind and cause of its failure.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    host: String,
    kind: Kind,
    cause: Option<String>,
}

/// skopeo's arguments for `inspect --raw`: with `--debug` when the image has
/// mirrors, so that it says what each source answered.
pub fn inspect_raw_args(spec: &WorkerSpec) -> Vec<String> {
    let debug = (spec.sources.len() > 1).then(|| "--debug".to_owned());
    debug
        .into_iter()
        .chain(["inspect".into(), "--raw".into()])
        .collect()
}

/// The sources that failed, in the order skopeo tried them, from its
/// `--debug` lines. logrus quotes each message on a line of its own, so what a
/// registry answered never starts a line; the reference is the worker's
/// registries.conf's, root's own.
fn failed(stderr: &str) -> Vec<Answer> {
    stderr
        .lines()
        .filter_map(|line| {
            let (_, rest) = line.split_once(" level=debug msg=\"")?;
            let msg = logrus_msg(rest);
            let (reference, text) = msg
                .strip_prefix("Accessing \"")?
                .split_once("\" failed: ")?;
            let host = reference.split('/').next()?.to_owned();
            let (kind, cause) = classify_with_cause(text);
            Some(Answer { host, kind, cause })
        })
        .collect()
}

/// `host`'s answer, said for a human: a refusal names the credential the
/// worker had for it by source and key, or says it had none.
fn said(mirror: bool, a: &Answer, credentials: &[Chosen]) -> String {
    let host = match mirror {
        true => format!("mirror {}", a.host),
        false => a.host.clone(),
    };
    let credential = credentials.iter().find(|c| c.host == a.host);
    let said = match (a.kind, credential) {
        (Kind::Auth, Some(c)) => format!(
            "{host} refused the credential from {} (key {})",
            c.source, c.key
        ),
        (Kind::Auth, None) => format!("no credential for {host}, which asks for one"),
        // The primary's kind is the failure's, said first.
        (_, _) if !mirror && a.cause.is_some() => host,
        (kind, _) => format!("{host}: {}", what(kind)),
    };
    because(said, a.cause.clone())
}

/// The failure of an `inspect --raw` that `doing` names, from skopeo's
/// `stderr`. With mirrors, the primary's answer decides the kind, as
/// containers/image wraps the primary's error (`%w`) and only notes the
/// mirrors'; the message says each host's. A refusal names the credential.
fn inspect_failure(
    doing: &str,
    stderr: &str,
    spec: &WorkerSpec,
    credentials: &[Chosen],
) -> Failure {
    let f = worker_failure(doing, stderr);
    // The proxy's answer, whichever source was asked: it names the proxy.
    if f.via_proxy {
        return f;
    }
    let answers = failed(stderr);
    let primary = match (answers.split_last(), spec.sources.as_slice()) {
        // Every source, the primary last: each one's answer.
        (Some((p, mirrors)), [.., last]) if p.host == *last && !mirrors.is_empty() => {
            let mut message = format!(
                "{} while {doing}: {}",
                what(p.kind),
                said(false, p, credentials)
            );
            for m in mirrors {
                message = format!("{message}; {}", said(true, m, credentials));
            }
            return Failure::new(p.kind, message)
                .with_detail(f.detail.unwrap_or_default())
                .with_retry(transient_if_network(p.kind))
                .with_host(&p.host);
        }
        (_, [only]) => only,
        _ => return f,
    };
    let f = f.with_host(primary);
    if f.kind != Kind::Auth {
        return f;
    }
    // One source, whose refusal the fatal text says: name the credential.
    let (_, cause) = classify_with_cause(f.detail.as_deref().unwrap_or_default());
    let a = Answer {
        host: primary.clone(),
        kind: Kind::Auth,
        cause,
    };
    Failure {
        message: format!(
            "{} while {doing}: {}",
            what(Kind::Auth),
            said(false, &a, credentials)
        ),
        ..f
    }
}

/// How an `inspect --raw` that `doing` names ended, by its exit and its
/// stderr: its failure ([`inspect_failure`]), or, when it succeeded, a
/// warning for each mirror that failed before a later source answered,
/// naming what it answered.
pub fn inspected(
    doing: &str,
    success: bool,
    stderr: &[u8],
    spec: &WorkerSpec,
    credentials: &[Chosen],
) -> Result<(), Failure> {
    let stderr = String::from_utf8_lossy(stderr);
    if !success {
        return Err(inspect_failure(doing, &stderr, spec, credentials));
    }
    let answers = failed(&stderr);
    if let Some(served) = spec.sources.get(answers.len()) {
        for a in &answers {
            tracing::warn!(
                "{}; the image came from {served}",
                said(true, a, credentials)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::auth::Chosen;
    use crate::plan::worker::{Isolation, WorkerSpec};

    fn spec(sources: &[&str]) -> WorkerSpec {
        WorkerSpec {
            sources: sources.iter().map(|s| s.to_string()).collect(),
            ..WorkerSpec::for_tests(Isolation::None)
        }
    }

    /// `inspect_failure` of a worker with `sources`, and a credential for
    /// each host of `credentials`.
    fn fails(doing: &str, text: &str, sources: &[&str], credentials: &[&str]) -> Failure {
        let spec = spec(sources);
        let credentials: Vec<Chosen> = (credentials.iter())
            .map(|h| Chosen {
                host: h.to_string(),
                auth: "dTpw".into(),
                source: "/a.json".into(),
                key: format!("{h}/ns"),
            })
            .collect();
        inspect_failure(doing, text, &spec, &credentials)
    }

    /// skopeo 1.22's `--debug` lines and fatal error for a mirror that
    /// refuses and a primary that is down (1.9.3 says `unauthorized:
    /// authentication required`).
    const MIRROR_REFUSED_PRIMARY_DOWN: &str = r#"time="t" level=debug msg="Trying to access \"m.io:5000/ns/a:v1\""
time="t" level=debug msg="Accessing \"m.io:5000/ns/a:v1\" failed: reading manifest v1 in m.io:5000/ns/a: authentication required"
time="t" level=debug msg="Trying to access \"p.io/ns/a:v1\""
time="t" level=debug msg="Accessing \"p.io/ns/a:v1\" failed: pinging container registry p.io: Get \"https://p.io/v2/\": dial tcp 127.0.0.1:1: connect: connection refused"
time="t" level=fatal msg="Error parsing image name \"docker://p.io/ns/a:v1\": (Mirrors also failed: [m.io:5000/ns/a:v1: reading manifest v1 in m.io:5000/ns/a: authentication required]): p.io/ns/a:v1: pinging container registry p.io: Get \"https://p.io/v2/\": dial tcp 127.0.0.1:1: connect: connection refused"
"#;

    #[test]
    fn the_primary_decides_and_each_host_is_named() {
        let s = (&["m.io:5000", "p.io"][..], &["m.io:5000"][..]);
        let f = fails(
            "inspecting p.io/ns/a:v1",
            MIRROR_REFUSED_PRIMARY_DOWN,
            s.0,
            s.1,
        );
        assert_eq!((f.kind, f.host.as_deref()), (Kind::Network, Some("p.io")));
        assert_eq!(
            f.message,
            "network error while inspecting p.io/ns/a:v1: p.io: connection refused; \
             mirror m.io:5000 refused the credential from /a.json (key m.io:5000/ns): authentication required"
        );
        // Without a credential for the mirror, it says so.
        let f = fails(
            "inspecting x",
            MIRROR_REFUSED_PRIMARY_DOWN,
            &["m.io:5000", "p.io"],
            &[],
        );
        assert!(
            f.message.ends_with(
                "; no credential for mirror m.io:5000, which asks for one: authentication required"
            ),
            "{}",
            f.message
        );
        // A text whose last source is not the primary (cut short) says no more than skopeo's.
        let cut = MIRROR_REFUSED_PRIMARY_DOWN
            .lines()
            .take(2)
            .collect::<Vec<_>>()
            .join("\n");
        let f = fails("inspecting x", &cut, s.0, s.1);
        assert_eq!(f.host, None);
    }

    /// One source: its refusal names the credential, or that there was none.
    #[test]
    fn a_refusal_names_the_credential_or_its_absence() {
        let text = r#"time="t" level=fatal msg="reading manifest v1 in p.io/ns/a: unauthorized: authentication required""#;
        let f = fails("inspecting x", text, &["p.io"], &["p.io"]);
        assert_eq!((f.kind, f.host.as_deref()), (Kind::Auth, Some("p.io")));
        assert_eq!(
            f.message,
            "authentication refused while inspecting x: p.io refused the credential from /a.json (key p.io/ns): registry error code unauthorized"
        );
        let f = fails("inspecting x", text, &["p.io"], &[]);
        assert_eq!(
            f.message,
            "authentication refused while inspecting x: no credential for p.io, which asks for one: registry error code unauthorized"
        );
        // Other kinds keep skopeo's words, with the host.
        let text =
            r#"time="t" level=fatal msg="reading manifest v1 in p.io/ns/a: manifest unknown""#;
        let f = fails("inspecting x", text, &["p.io"], &["p.io"]);
        assert_eq!(
            f.message,
            "image not found while inspecting x: registry error code manifest unknown"
        );
        assert_eq!(f.host.as_deref(), Some("p.io"));
    }

    /// A registry's text cannot make a line of its own: only skopeo's lines count.
    #[test]
    fn only_skopeo_lines_name_sources() {
        let text = r#"time="t" level=debug msg="GET x: \ntime=\"t\" level=debug msg=\"Accessing \\\"q.io/a\\\" failed: eof\"""#;
        assert_eq!(failed(text), []);
        assert_eq!(failed(MIRROR_REFUSED_PRIMARY_DOWN).len(), 2);
        assert_eq!(
            inspect_raw_args(&spec(&["m.io", "p.io"])),
            ["--debug", "inspect", "--raw"]
        );
        assert_eq!(inspect_raw_args(&spec(&["p.io"])), ["inspect", "--raw"]);
    }
}
