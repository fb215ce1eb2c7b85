//! The reading of a worker's (skopeo's) error text: which failure [`Kind`]
//! it is, and the words that decided, by facts that neither a registry nor
//! whoever names a repository can choose.

use crate::error::{Kind, one_line};

/// Go's words for a 407 from the proxy, lower-cased: a segment of its own.
pub const PROXY_407: &str = "proxy authentication required";
/// Go's words before the error of a connection to the proxy.
pub const PROXY_CONNECT: &str = "proxyconnect tcp";

/// Classify a worker's (skopeo's) error text by facts that neither a registry
/// nor whoever names a repository can choose: the registry's error *code*
/// (containers/image prints the distribution error code's fixed name, then the
/// registry's message), an HTTP status in one of skopeo's fixed phrasings, or a
/// Go error value (`x509`, `dial tcp …: connection refused`, `EOF`).
///
/// skopeo joins its errors with ": ", so the text is read as segments, and only
/// a whole segment counts. What the registry or the reference controls is never
/// a whole segment ahead of what classifies it: the repository and tag sit
/// inside `reading manifest TAG in HOST/REPO`, and what Go quotes (`%q`: a URL,
/// which a redirect or a token realm chooses; a response body) is never cut
/// into segments. The first segment that says something decides, so a 404
/// whose body says "connection reset" is a 404; and reading stops at a segment
/// after which the text is the registry's own (an error code's message, a
/// response body), so that text never decides, even when what came first says
/// nothing. From protocol 0.2.8 on, the worker's own `retryable` code comes
/// first (`sandbox::proxy_failure`).
pub fn classify_worker_text(text: &str) -> Kind {
    classify_with_cause(text).0
}

/// [`classify_worker_text`], and the words that decided it, which the error's
/// first line and each retry's warning give as its cause: `connection
/// refused`, `HTTP status 503`, `registry error code toomanyrequests`, Go's
/// TLS or x509 text. None when nothing decided (a worker failure). The cause
/// is one of the fixed phrases that classify, or an HTTP status; never the
/// registry's message or the repository's name.
pub fn classify_with_cause(text: &str) -> (Kind, Option<String>) {
    let segments: Vec<&str> = segments(text)
        .into_iter()
        .map(|s| s.trim().trim_end_matches(')'))
        .collect();
    for (i, seg) in segments.iter().enumerate() {
        let next = segments.get(i + 1).copied().unwrap_or_default();
        if let Some(kind) = classify_segment(seg, next) {
            return (kind, Some(one_line(&cause(&segments[i..]))));
        }
        if opens_registry_text(&seg.to_ascii_lowercase()) {
            break;
        }
    }
    (Kind::Worker, None)
}

/// The cause that `segments[0]` decided, said as [`classify_with_cause`] says.
fn cause(segments: &[&str]) -> String {
    let seg = segments[0];
    let next = segments.get(1).copied().unwrap_or_default();
    let mut lower = seg.to_ascii_lowercase();
    let mut seg = seg;
    if let Some(first) = lower.strip_prefix("errors:") {
        lower = first.trim_start().to_owned();
        seg = seg[7..].trim_start();
    }
    if let Some(code) = http_status(&lower, next) {
        return format!("HTTP status {code}");
    }
    if error_code_kind(&lower).is_some() {
        return format!("registry error code {lower}");
    }
    match lower.as_str() {
        // Go's TLS and x509 errors say what failed after their package's name;
        // so does its connection to a proxy.
        "x509" | "tls" | "remote error" | PROXY_CONNECT => segments.join(": "),
        "net/http" => format!("{seg}: {next}"),
        _ => seg.to_owned(),
    }
}

/// The HTTP status in `lower` (a segment, lower-cased) or `next`, where skopeo
/// prints one.
fn http_status(lower: &str, next: &str) -> Option<u16> {
    let status = |s: &str| s.split([' ', ',']).next()?.parse::<u16>().ok();
    match lower {
        "statuscode" | "received unexpected http status" | "unexpected http status" => status(next),
        _ => lower
            .strip_prefix("invalid status code from registry ")
            .or_else(|| lower.strip_prefix("error parsing http "))
            .and_then(status),
    }
}

/// `text` cut where Go joins errors: "outer: inner", and "outer (while …:
/// inner)"; never inside a string Go quoted with `%q` (`Get "URL": …`,
/// `StatusCode: 404, "BODY"`), where an escaped `\"` does not end it.
fn segments(text: &str) -> Vec<&str> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i, mut quoted) = (0, 0, false);
    while i < b.len() {
        match b[i] {
            b'\\' if quoted => i += 1,
            b'"' => quoted = !quoted,
            _ if !quoted && (b[i..].starts_with(b": ") || b[i..].starts_with(b" (")) => {
                out.push(&text[start..i]);
                start = i + 2;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(&text[start..]);
    out
}

/// Segments after which the text is the registry's: the body or message that
/// containers/image renders after `StatusCode: NNN, `, after `error parsing
/// HTTP NNN response body: ` and after the `errors:` list of
/// docker/distribution's `errcode.Errors` (an error code ends reading as well,
/// by deciding). When one of these does not decide, nothing after it may.
fn opens_registry_text(lower: &str) -> bool {
    matches!(
        lower,
        "statuscode" | "received unexpected http status" | "unexpected http status"
    ) || lower.starts_with("error parsing http ")
        || lower.starts_with("errors:")
}

/// What one segment says, if anything; `next` is the segment after it (where
/// an HTTP status follows its phrase).
fn classify_segment(seg: &str, next: &str) -> Option<Kind> {
    let mut lower = seg.to_ascii_lowercase();
    // docker/distribution's `errcode.Errors` with more than one error (skopeo
    // 1.9.3 prints them all; later ones keep the first): `errors:` and a line
    // per error. The first says what happened; the others are the registry's.
    if let Some(first) = lower.strip_prefix("errors:") {
        lower = first.trim_start().to_owned();
    }
    // A distribution error code, as containers/image names it (the registry
    // picks one of these; an unknown one reads as `unknown`).
    if let Some(kind) = error_code_kind(&lower).or_else(|| default_message_kind(&lower)) {
        return Some(kind);
    }
    // containers/image's own errors for what the registry answered: a 401
    // (`ErrUnauthorizedForCredentials`, whatever follows it) and a 429
    // (`ErrTooManyRequests`, after its own retries).
    match lower.as_str() {
        "unable to retrieve auth token" | "invalid username/password" => return Some(Kind::Auth),
        // Go's net/http: the proxy answered CONNECT with a 407, or could not
        // be reached (`proxyconnect tcp: dial tcp …: connection refused`).
        PROXY_407 => return Some(Kind::Auth),
        PROXY_CONNECT => return Some(Kind::Network),
        "too many requests to registry" => return Some(Kind::Network),
        _ => {}
    }
    // An HTTP status where skopeo prints one.
    if let Some(code) = http_status(&lower, next) {
        return Some(status_kind(code));
    }
    // Go's own error values and phrases (net, crypto/tls, net/http).
    const TLS: &[&str] = &[
        "x509",
        "tls",
        "remote error",
        "server gave http response to https client",
    ];
    const NETWORK: &[&str] = &[
        "connection refused",
        "connection reset by peer",
        "broken pipe",
        "eof",
        "unexpected eof",
        "i/o timeout",
        "no such host",
        "network is unreachable",
        "no route to host",
        "context deadline exceeded",
        "net/http",
        "tls handshake timeout",
    ];
    if TLS.contains(&lower.as_str()) {
        return Some(Kind::Tls);
    }
    if NETWORK.contains(&lower.as_str())
        || lower.ends_with("stopped after 10 redirects")
        || lower.starts_with("dial tcp ") && next.is_empty()
    {
        return Some(Kind::Network);
    }
    // The worker's own verification (its digest check in GetBlob, its limit
    // on manifests); worded by skopeo, not by the registry.
    if lower.starts_with("digest did not match")
        || lower.starts_with("corrupted blob")
        || lower.starts_with("exceeded maximum allowed size")
        || lower.starts_with("size mismatch")
    {
        return Some(Kind::Verify);
    }
    None
}

/// The kind of a distribution error code, by containers/image's rendering
/// (`MANIFEST_UNKNOWN` → `manifest unknown`): every code docker/distribution
/// registers (`registry/api/errcode/register.go`, `registry/api/v2/errors.go`
/// of v2.8); a code it does not know reads as `unknown`. Retryable as podman's
/// `IsErrorRetryable()` has it: every code but these four (and the malformed
/// ones, which are verification failures here).
fn error_code_kind(code: &str) -> Option<Kind> {
    Some(match code {
        "unauthorized" | "denied" => Kind::Auth,
        "manifest unknown" | "name unknown" | "blob unknown" | "manifest blob unknown" => {
            Kind::NotFound
        }
        "name invalid" | "tag invalid" => Kind::NotFound,
        "digest invalid" | "size invalid" | "manifest invalid" | "manifest unverified" => {
            Kind::Verify
        }
        "unknown" | "unavailable" | "toomanyrequests" | "unsupported" => Kind::Network,
        // Upload and listing codes, meaningless for a pull: retried all the same.
        "blob upload unknown" | "blob upload invalid" | "pagination number invalid" => {
            Kind::Network
        }
        _ => return None,
    })
}

/// containers/image 5.2x prints an error whose message is its code's default
/// message as that message alone (`authentication required`, not
/// `unauthorized: authentication required`): the same fact as the code.
fn default_message_kind(message: &str) -> Option<Kind> {
    Some(match message {
        "authentication required" | "requested access to the resource is denied" => Kind::Auth,
        "repository name not known to registry" | "blob unknown to registry" => Kind::NotFound,
        "invalid repository name" | "manifest tag did not match uri" => Kind::NotFound,
        "provided digest did not match uploaded content"
        | "provided length did not match content length"
        | "manifest failed signature verification" => Kind::Verify,
        "unknown error" | "service unavailable" | "too many requests" => Kind::Network,
        "the operation is unsupported."
        | "blob upload unknown to registry"
        | "blob upload invalid"
        | "invalid number of results requested" => Kind::Network,
        _ if message.starts_with("manifest does not match provided manifest digest") => {
            Kind::Verify
        }
        _ => return None,
    })
}

/// The kind of an HTTP status from the registry.
fn status_kind(code: u16) -> Kind {
    match code {
        401 | 403 => Kind::Auth,
        // Not there (404), gone (410), or a reference the registry refuses (400).
        400 | 404 | 410 => Kind::NotFound,
        // Too many requests, and the server's own failures: try again.
        _ => Kind::Network,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What skopeo 1.9.3, 1.18.0 and 1.22.0 print for a registry's answers
    /// (measured against a registry that answers with each status, with a JSON
    /// error body or a plain one), and the repository names and bodies that
    /// used to steer the result: the registry's message and the repository's
    /// name never decide.
    #[test]
    fn classify_table() {
        use Kind::*;
        let m = "Error parsing image name \"docker://127.0.0.1:5000/certificate/eof:v1\": reading manifest v1 in 127.0.0.1:5000/certificate/eof";
        let b = "failed to invoke method GetBlob: fetching blob";
        let cases: Vec<(String, Kind)> = vec![
            (format!("{m}: unauthorized: authentication required"), Auth),
            (format!("{m}: Get \"https://h/v2/\": Proxy Authentication Required"), Auth),
            (format!("{m}: Get \"https://h/v2/\": proxyconnect tcp: dial tcp 10.0.0.1:3128: i/o timeout"), Network),
            (format!("{m}: denied: connection reset eof certificate"), Auth),
            (format!("{m}: manifest unknown: connection reset eof certificate"), NotFound),
            (format!("{m}: name unknown: repository name not known to registry"), NotFound),
            (format!("{m}: StatusCode: 404, connection reset by peer; certificate; eof"), NotFound),
            (format!("{m}: StatusCode: 404, \"connection reset by peer\""), NotFound),
            (format!("{m}: StatusCode: 410, \"gone\""), NotFound),
            (format!("{m}: StatusCode: 400, \"x509\""), NotFound),
            (format!("{m}: StatusCode: 403, \"eof\""), Auth),
            (format!("{m}: unknown: connection reset eof certificate"), Network),
            (format!("{m}: toomanyrequests: slow down"), Network),
            (format!("{m}: received unexpected HTTP status: 500 Internal Server Error"), Network),
            (format!("{m}: received unexpected HTTP status: 503 Service Unavailable"), Network),
            (format!("{m}: manifest invalid: whatever"), Verify),
            ("Error parsing image name \"docker://r/s302-m:v1\": Get \"/v2/s302-m/manifests/v1\": stopped after 10 redirects".into(), Network),
            // skopeo 1.9.3's blob errors, then 1.18's and 1.22's.
            ("failed to invoke method GetBlob: Error fetching blob: invalid status code from registry 403 (Forbidden)".into(), Auth),
            ("failed to invoke method GetBlob: Error fetching blob: invalid status code from registry 404 (Not Found)".into(), NotFound),
            ("failed to invoke method GetBlob: Error fetching blob: invalid status code from registry 502 (Bad Gateway)".into(), Network),
            (format!("{b}: denied: connection reset eof certificate"), Auth),
            (format!("{b}: StatusCode: 404, \"connection reset by peer; certificate; eof\""), NotFound),
            (format!("{b}: received unexpected HTTP status: 500 Internal Server Error"), Network),
            ("failed to invoke method GetRawBlob: fetching blob: received unexpected HTTP status: 502 Bad Gateway".into(), Network),
            // Go's errors, from the network and TLS stacks.
            ("pinging container registry 127.0.0.1:5000: Get \"https://127.0.0.1:5000/v2/\": x509: certificate signed by unknown authority".into(), Tls),
            ("pinging container registry 127.0.0.1:5000: Get \"https://127.0.0.1:5000/v2/\": tls: failed to verify certificate: x509: certificate signed by unknown authority".into(), Tls),
            ("pinging container registry 127.0.0.1:5000: Get \"https://127.0.0.1:5000/v2/\": http: server gave HTTP response to HTTPS client".into(), Tls),
            ("pinging container registry 127.0.0.1:1: Get \"https://127.0.0.1:1/v2/\": dial tcp 127.0.0.1:1: connect: connection refused".into(), Network),
            ("reading blob sha256:aa: Get \"https://r/v2/x/blobs/sha256:aa\": read tcp 1.2.3.4:5->6.7.8.9:443: read: connection reset by peer".into(), Network),
            ("FinishPipe: unexpected EOF".into(), Network),
            ("reading blob: unexpected EOF".into(), Network),
            ("pinging container registry reg.example: Get \"https://reg.example/v2/\": dial tcp: lookup reg.example on 10.0.0.1:53: no such host".into(), Network),
            // skopeo 1.18 and 1.22 (containers/image 5.2x): a code's default
            // message alone; an error wrapped in parentheses.
            (format!("{m}: authentication required"), Auth),
            (format!("{m}: requested access to the resource is denied"), Auth),
            ("Error retrieving manifest for image: Manifest does not match provided manifest digest sha256:1d93".into(), Verify),
            ("other error: unexpected EOF (while reconnecting: Get \"https://127.0.0.1:1/v2/x/blobs/sha256:1f\": read tcp 127.0.0.1:5->127.0.0.1:1: read: connection reset by peer)".into(), Network),
            // The worker's own checks.
            ("Digest did not match, expected sha256:aa, got sha256:bb".into(), Verify),
            ("corrupted blob, expecting sha256:aa".into(), Verify),
            ("reading manifest v1 in r/x: exceeded maximum allowed size of 4194304 bytes".into(), Verify),
            ("proxy unexpectedly exited: signal: killed".into(), Worker),
            // Names that once steered the result: a repository or tag that is a
            // keyword, and a registry message full of them.
            ("reading manifest x509 in 127.0.0.1:5000/certificate/geoff: something odd".into(), Worker),
            // A 401 through containers/image's `httpResponseToError` (token
            // requests; 1.9.3's blob GET): `ErrUnauthorizedForCredentials`
            // (docker/errors.go of c/image 5.22.1, 5.34.0, 5.39.1) around
            // docker/distribution's `HandleErrorResponse`, which merges a
            // `WWW-Authenticate: Bearer error=…` challenge with the body into
            // `errcode.Errors` (registry/client/errors.go of v2.8.1); a body
            // that is not JSON comes back quoted, after `error parsing HTTP 401
            // response body` and Go's JSON error.
            ("failed to invoke method GetBlob: unable to retrieve auth token: invalid username/password: errors:\nunauthorized: authentication required\nerror parsing HTTP 401 response body: invalid character 'x' looking for beginning of value: \"x: eof: y\"\n".into(), Auth),
            ("unable to retrieve auth token: invalid username/password: unknown: x: eof: y".into(), Auth),
            (format!("{m}: errors:\nunauthorized: authentication required\nerror parsing HTTP 401 response body: invalid character 'x' looking for beginning of value: \"x: eof: y\"\n"), Auth),
            // Several errors in one body (1.9.3 prints all): the first code.
            (format!("{m}: errors:\ndenied: x: eof: y\nunknown: x509\n"), Auth),
            (format!("{m}: errors:\nmanifest unknown: eof\ndenied: z\n"), NotFound),
            (format!("{m}: errors:\nsomething odd: eof\n"), Worker),
            // A body that is not JSON where nothing reworded it (1.9.3's
            // signature GET): the status in its fixed place.
            ("downloading signatures for sha256:aa in r/x: error parsing HTTP 404 response body: invalid character 'x' looking for beginning of value: \"x: eof: y\"".into(), NotFound),
            ("error parsing HTTP 503 response body: unexpected end of JSON input: \"\"".into(), Network),
            // A 429 after containers/image's own retries: `ErrTooManyRequests`
            // (1.9.3's blob GET), or the code or status (the rest).
            ("failed to invoke method GetBlob: too many requests to registry".into(), Network),
            (format!("{m}: toomanyrequests: denied: x509"), Network),
            (format!("{m}: StatusCode: 429, \"denied: x509\""), Network),
            // Codes a pull never meets, and their default messages alone.
            (format!("{m}: blob upload invalid: denied: x509"), Network),
            (format!("{m}: The operation is unsupported."), Network),
            // What Go quotes is never a segment: a URL a redirect or a token
            // realm chose, a body after the status or the parse error.
            ("pinging container registry r: Get \"https://r/v2/?a: x509: b\": dial tcp 127.0.0.1:1: connect: connection refused".into(), Network),
            ("Get \"https://r/token?a: denied: \\\": x509: b\": EOF".into(), Network),
            (format!("{m}: StatusCode: 403, \"x: eof: y\""), Auth),
            // Nothing after the start of the registry's text decides.
            (format!("{m}: StatusCode: x, eof"), Worker),
            (format!("{m}: error parsing HTTP response body: eof"), Worker),
            ("Error parsing image name \"docker://127.0.0.1:5000/eof:tls\": reading manifest tls in 127.0.0.1:5000/eof: denied: eof".into(), Auth),
        ];
        for (text, want) in cases {
            assert_eq!(classify_worker_text(&text), want, "{text}");
        }
    }

    /// The cause is the words that decided, and never the registry's message
    /// or the repository's name (here full of other keywords).
    #[test]
    fn the_cause_is_what_decided() {
        let m = "reading manifest v1 in 127.0.0.1:5000/eof/x509";
        let cases = [
            (
                "pinging container registry 127.0.0.1:1: Get \"https://127.0.0.1:1/v2/\": dial tcp 127.0.0.1:1: connect: connection refused".to_owned(),
                Some("connection refused"),
            ),
            // Through a proxy (skopeo 1.9.3 to 1.22 alike): its 407, and a
            // proxy that is down, said as Go said it, the address included.
            (
                "pinging container registry r.corp:5000: Get \"https://r.corp:5000/v2/\": Proxy Authentication Required".to_owned(),
                Some("Proxy Authentication Required"),
            ),
            (
                "pinging container registry r.corp:5000: Get \"https://r.corp:5000/v2/\": proxyconnect tcp: dial tcp 127.0.0.1:9: connect: connection refused".to_owned(),
                Some("proxyconnect tcp: dial tcp 127.0.0.1:9: connect: connection refused"),
            ),
            (
                format!("{m}: received unexpected HTTP status: 503 Service Unavailable"),
                Some("HTTP status 503"),
            ),
            (format!("{m}: StatusCode: 502, \"eof: x509\""), Some("HTTP status 502")),
            (
                "failed to invoke method GetBlob: Error fetching blob: invalid status code from registry 500 (Internal Server Error)".to_owned(),
                Some("HTTP status 500"),
            ),
            (
                format!("{m}: toomanyrequests: connection refused"),
                Some("registry error code toomanyrequests"),
            ),
            (
                format!("{m}: errors:\nunauthorized: eof\n"),
                Some("registry error code unauthorized"),
            ),
            (
                format!("{m}: too many requests"),
                Some("too many requests"),
            ),
            ("reading blob: unexpected EOF".to_owned(), Some("unexpected EOF")),
            (
                "pinging container registry r: Get \"https://r/v2/\": tls: failed to verify certificate: x509: certificate signed by unknown authority".to_owned(),
                Some("tls: failed to verify certificate: x509: certificate signed by unknown authority"),
            ),
            (
                "Get \"https://r/v2/\": net/http: TLS handshake timeout".to_owned(),
                Some("net/http: TLS handshake timeout"),
            ),
            (format!("{m}: StatusCode: x, eof"), None),
            ("proxy unexpectedly exited: signal: killed".to_owned(), None),
        ];
        for (text, want) in cases {
            let (kind, cause) = classify_with_cause(&text);
            assert_eq!(cause.as_deref(), want, "{text}");
            assert_eq!(kind, classify_worker_text(&text), "{text}");
        }
    }
}
