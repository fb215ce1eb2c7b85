//! The HTTP(S) proxy a pull's worker goes through: `HTTPS_PROXY`, `HTTP_PROXY`
//! and `NO_PROXY` (or their lower-case forms) as skopeo reads them, or the
//! `http-proxy`, `https-proxy` and `no-proxy` keys of hostpull.d's `[cluster]`
//! and of a pull profile. Pure: strings in, the decision per URL and the files
//! the worker gets out.
//!
//! The rules are Go's (`golang.org/x/net/http/httpproxy`, which skopeo's
//! `net/http` applies): HTTPS_PROXY for an `https` URL, HTTP_PROXY for `http`;
//! upper case first, then lower case, the first that is not empty; a proxy
//! without a scheme is `http://`; a loopback host (`localhost`, 127.0.0.0/8,
//! `::1`) never goes through a proxy; `NO_PROXY` is a comma list of `*`, IPs,
//! CIDRs, `[IPv6]:port`, `host`, `host:port` (the host and its subdomains),
//! `.domain` and `*.domain` (its subdomains only). Unlike Go, a name is not
//! turned into punycode first: an internationalised name must be written in
//! its `xn--` form in `NO_PROXY` and in the image reference alike.
//!
//! A proxy URL may carry a password (`http://user:pass@proxy:3128`): it is a
//! [`Secret`]. [`ProxyUrl`]'s `Display` shows `user:***`; only
//! [`Proxy::env_file`] and [`Proxy::curl_config`], which the worker reads as a
//! credential, hold it whole.

use std::net::IpAddr;

use crate::error::{Kind, fail};
use crate::options::Options;
use crate::plan::auth::Secret;
use crate::plan::host::Host;

/// Where the proxy settings came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxySource {
    /// hostpull's own environment (`HTTPS_PROXY`, …).
    Environment,
    /// hostpull.d's `[cluster]` or the pull profile (`https-proxy`, …).
    Config,
}

/// A proxy's URL. Its password stays a [`Secret`]; `Display` prints
/// `scheme://user:***@host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyUrl {
    /// The URL as given, with `http://` before it if it had no scheme: what
    /// the worker gets.
    whole: Secret,
    /// `http`, `https`, `socks5` or `socks5h`.
    pub scheme: String,
    /// The user name, if any (percent-encoded as given).
    pub user: Option<String>,
    /// Whether a password follows the user name.
    pub has_password: bool,
    /// `host[:port]`, an IPv6 address in brackets.
    pub authority: String,
}

impl std::fmt::Display for ProxyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://", self.scheme)?;
        match (&self.user, self.has_password) {
            (Some(u), true) => write!(f, "{u}:***@")?,
            (Some(u), false) => write!(f, "{u}@")?,
            (None, _) => {}
        }
        f.write_str(&self.authority)
    }
}

impl ProxyUrl {
    /// Parse `s` as Go's `httpproxy` does (without a scheme or a host, it
    /// is tried again with `http://` before it), and refuse what the worker
    /// could not use. `what` names the setting in the error, which never
    /// quotes the value: it may hold a password.
    pub fn parse(s: &str, what: &str) -> anyhow::Result<Self> {
        let bad = |why: &str| fail(Kind::Usage, format!("invalid proxy {what}: {why}"));
        if s.chars().any(|c| c.is_control() || c == ' ') {
            return bad("it contains a space or a control character");
        }
        let (whole, scheme, rest) = match s.split_once("://") {
            Some((scheme, rest)) if !scheme.is_empty() && !authority_of(rest).is_empty() => {
                (s.to_owned(), scheme.to_ascii_lowercase(), rest)
            }
            _ => (format!("http://{s}"), "http".to_owned(), s),
        };
        if !matches!(scheme.as_str(), "http" | "https" | "socks5" | "socks5h") {
            return bad("the scheme is not http, https, socks5 or socks5h");
        }
        let authority = authority_of(rest);
        let (user, host) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => (Some(userinfo), host),
            None => (None, authority),
        };
        if !valid_host_port(host) {
            return bad("expected [USER[:PASSWORD]@]HOST[:PORT]");
        }
        // RFC 3986's userinfo, as Go's url.Parse takes it: what else a
        // password holds is percent-encoded (nothing curl's config quotes).
        let userinfo_ok = |u: &str| {
            u.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:%".contains(&b))
        };
        if !user.is_none_or(userinfo_ok) {
            return bad("the user name or password holds a character that must be percent-encoded");
        }
        let (user, has_password) = match user.map(|u| u.split_once(':')) {
            Some(Some((name, _))) => (Some(name.to_owned()), true),
            Some(None) => (user.map(str::to_owned), false),
            None => (None, false),
        };
        Ok(Self {
            whole: whole.into(),
            scheme,
            user,
            has_password,
            authority: host.to_owned(),
        })
    }

    /// The URL whole, password included: only for the worker's files.
    pub fn expose(&self) -> &str {
        self.whole.expose()
    }
}

/// The authority of `rest`, what follows `scheme://`: up to a path, query
/// or fragment.
fn authority_of(rest: &str) -> &str {
    rest.split(['/', '?', '#']).next().unwrap_or_default()
}

/// `host[:port]` with a host name, an IPv4 address or a bracketed IPv6
/// address, and a port of digits.
fn valid_host_port(s: &str) -> bool {
    let (host, port) = split_host_port(s);
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.parse::<u16>().is_ok());
    let host_ok = if let Some(v6) = host.strip_prefix('[') {
        v6.strip_suffix(']')
            .is_some_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok())
    } else {
        !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b))
    };
    port_ok && host_ok
}

/// `host[:port]` apart; an IPv6 host keeps its brackets.
pub fn split_host_port(s: &str) -> (&str, Option<&str>) {
    if s.starts_with('[') {
        return match s.split_once("]:") {
            Some((h, p)) => (&s[..h.len() + 1], Some(p)),
            None => (s, None),
        };
    }
    match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, Some(p)),
        _ => (s, None),
    }
}

/// One entry of `NO_PROXY`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NoProxy {
    /// `*`: nothing goes through the proxy.
    All,
    /// An address, and a port if one was given.
    Ip(IpAddr, Option<String>),
    /// A network (`10.0.0.0/8`), any port.
    Cidr(IpAddr, u8),
    /// `.domain` (its subdomains) or, with `exact`, `domain` (itself too); a
    /// port if one was given.
    Domain {
        suffix: String,
        exact: bool,
        port: Option<String>,
    },
}

/// Parse `NO_PROXY` as Go does; an entry it cannot read is left out, as Go
/// leaves it.
fn no_proxy_entries(list: &str) -> Vec<NoProxy> {
    let mut out = Vec::new();
    for p in list.split(',') {
        let p = p.trim().to_ascii_lowercase();
        if p.is_empty() {
            continue;
        }
        if p == "*" {
            return vec![NoProxy::All];
        }
        if let Some((net, len)) = p.split_once('/')
            && let (Ok(net), Ok(len)) = (net.parse::<IpAddr>(), len.parse::<u8>())
            && len <= if net.is_ipv4() { 32 } else { 128 }
        {
            out.push(NoProxy::Cidr(net, len));
            continue;
        }
        let (host, port) = match split_host_port(&p) {
            // `:1`: no host, which Go leaves out.
            ("", Some(_)) => continue,
            (h, port) => (h.trim_start_matches('[').trim_end_matches(']'), port),
        };
        let port = port.map(str::to_owned);
        if let Ok(ip) = host.parse::<IpAddr>() {
            out.push(NoProxy::Ip(ip, port));
            continue;
        }
        let host = host.strip_prefix('*').unwrap_or(host);
        if host.is_empty() {
            continue;
        }
        let exact = !host.starts_with('.');
        let suffix = if exact {
            format!(".{host}")
        } else {
            host.to_owned()
        };
        out.push(NoProxy::Domain {
            suffix,
            exact,
            port,
        });
    }
    out
}

impl NoProxy {
    /// Whether this entry sends `host` (lower case, no brackets) on `port`
    /// direct.
    fn matches(&self, host: &str, port: &str, ip: Option<IpAddr>) -> bool {
        let port_ok = |p: &Option<String>| p.as_deref().is_none_or(|p| p == port);
        match self {
            Self::All => true,
            Self::Ip(want, p) => ip == Some(*want) && port_ok(p),
            Self::Cidr(net, len) => ip.is_some_and(|ip| in_network(ip, *net, *len)),
            Self::Domain {
                suffix,
                exact,
                port: p,
            } => {
                (host.ends_with(suffix.as_str()) || (*exact && host == &suffix[1..])) && port_ok(p)
            }
        }
    }
}

/// Whether `ip` is in `net/len`; never across families, as Go's
/// `IPNet.Contains` (an IPv4-mapped address counts as IPv4).
fn in_network(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip.to_canonical(), net.to_canonical()) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// The proxy settings of one pull.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Proxy {
    /// For `http` URLs (`HTTP_PROXY`).
    pub http: Option<ProxyUrl>,
    /// For `https` URLs (`HTTPS_PROXY`).
    pub https: Option<ProxyUrl>,
    /// `NO_PROXY` as the worker gets it.
    pub no_proxy: String,
    /// Where they came from; none when nothing is set.
    pub source: Option<ProxySource>,
}

/// The three settings as given, before they are checked.
#[derive(Debug, Clone, Default)]
pub struct ProxySettings {
    /// `HTTP_PROXY` or `http-proxy`.
    pub http: Option<Secret>,
    /// `HTTPS_PROXY` or `https-proxy`.
    pub https: Option<Secret>,
    /// `NO_PROXY` or `no-proxy`.
    pub no_proxy: Vec<String>,
}

impl Proxy {
    /// Check the settings of `source`; an empty one is unset.
    pub fn parse(given: &ProxySettings, source: ProxySource) -> anyhow::Result<Self> {
        let name = |env: &str, key: &str| match source {
            ProxySource::Environment => env.to_owned(),
            ProxySource::Config => key.to_owned(),
        };
        let url = |v: &Option<Secret>, what: String| {
            v.as_ref()
                .map(Secret::expose)
                .filter(|s| !s.trim().is_empty())
                .map(|s| ProxyUrl::parse(s.trim(), &what))
                .transpose()
        };
        let http = url(&given.http, name("HTTP_PROXY", "http-proxy"))?;
        let https = url(&given.https, name("HTTPS_PROXY", "https-proxy"))?;
        let no_proxy = given.no_proxy.join(",");
        if no_proxy.chars().any(char::is_control) {
            return fail(
                Kind::Usage,
                format!(
                    "invalid {}: it contains a control character",
                    name("NO_PROXY", "no-proxy")
                ),
            );
        }
        let set = http.is_some() || https.is_some();
        Ok(Self {
            http,
            https,
            no_proxy,
            source: set.then_some(source),
        })
    }

    /// The proxy a request to `scheme://authority` goes through, or none
    /// (direct). `authority` is `host[:port]`, an IPv6 host in brackets.
    pub fn for_url(&self, scheme: &str, authority: &str) -> Option<&ProxyUrl> {
        let (proxy, default_port) = match scheme {
            "https" => (self.https.as_ref()?, "443"),
            "http" => (self.http.as_ref()?, "80"),
            _ => return None,
        };
        let (host, port) = split_host_port(authority);
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let port = port.unwrap_or(default_port);
        let ip = host.parse::<IpAddr>().ok();
        if host == "localhost" || ip.is_some_and(|ip| ip.to_canonical().is_loopback()) {
            return None;
        }
        let direct = no_proxy_entries(&self.no_proxy)
            .iter()
            .any(|e| e.matches(&host, port, ip));
        (!direct).then_some(proxy)
    }

    /// Why a request to `scheme://authority` goes direct although a proxy
    /// is set for its scheme; none when it goes through it or none is set.
    pub fn direct_because(&self, scheme: &str, authority: &str) -> Option<&'static str> {
        let set = match scheme {
            "https" => self.https.is_some(),
            "http" => self.http.is_some(),
            _ => false,
        };
        if !set || self.for_url(scheme, authority).is_some() {
            return None;
        }
        let host = split_host_port(authority).0;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip.to_canonical().is_loopback());
        Some(match (loopback, self.source) {
            (true, _) => "a loopback host never goes through a proxy",
            (false, Some(ProxySource::Config)) => "no-proxy",
            (false, _) => "NO_PROXY",
        })
    }

    /// Whether any proxy is set.
    pub fn is_set(&self) -> bool {
        self.source.is_some()
    }

    /// The worker's environment file: `NAME=VALUE` lines, upper case, as
    /// skopeo reads them; none without a proxy. It holds the password.
    pub fn env_file(&self) -> Option<String> {
        if !self.is_set() {
            return None;
        }
        let mut out = String::new();
        for (name, url) in [("HTTP_PROXY", &self.http), ("HTTPS_PROXY", &self.https)] {
            if let Some(u) = url {
                out.push_str(&format!("{name}={}\n", u.expose()));
            }
        }
        if !self.no_proxy.is_empty() {
            out.push_str(&format!("NO_PROXY={}\n", self.no_proxy));
        }
        Some(out)
    }

    /// curl's `--config` for a GET of a `scheme` URL (a signature
    /// lookaside) that goes through a proxy: its line `proxy = "URL"`. It
    /// holds the password. (Whether a URL goes direct is [`Proxy::for_url`]'s
    /// to say, so that curl's own reading of the environment never decides.)
    pub fn curl_config(&self, scheme: &str) -> Option<String> {
        let url = match scheme {
            "https" => self.https.as_ref()?,
            "http" => self.http.as_ref()?,
            _ => return None,
        };
        Some(format!("proxy = \"{}\"\n", url.expose()))
    }
}

/// The proxy of a pull: the files' `http-proxy`, `https-proxy` and
/// `no-proxy` if any is set, else hostpull's environment as Go reads it
/// (with `REQUEST_METHOD` set, as under CGI, `HTTP_PROXY` is not used).
pub fn decide(options: &Options, host: &dyn Host) -> anyhow::Result<Proxy> {
    let files = options.http_proxy.is_some()
        || options.https_proxy.is_some()
        || !options.no_proxy.is_empty();
    let proxy = if files {
        let given = ProxySettings {
            http: options.http_proxy.clone(),
            https: options.https_proxy.clone(),
            no_proxy: options.no_proxy.clone(),
        };
        Proxy::parse(&given, ProxySource::Config)?
    } else {
        let env = |names: [&str; 2]| {
            names.iter().find_map(|n| {
                host.env(n)
                    .and_then(|v| v.into_string().ok())
                    .filter(|v| !v.is_empty())
            })
        };
        let cgi = host.env("REQUEST_METHOD").is_some_and(|v| !v.is_empty());
        let given = ProxySettings {
            http: env(["HTTP_PROXY", "http_proxy"])
                .filter(|_| !cgi)
                .map(Secret::from),
            https: env(["HTTPS_PROXY", "https_proxy"]).map(Secret::from),
            no_proxy: env(["NO_PROXY", "no_proxy"]).into_iter().collect(),
        };
        Proxy::parse(&given, ProxySource::Environment)?
    };
    Ok(proxy)
}

/// The worker's environment file back into `(NAME, VALUE)` pairs: only the
/// names [`Proxy::env_file`] writes are taken.
pub fn read_env_file(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| matches!(*k, "HTTP_PROXY" | "HTTPS_PROXY" | "NO_PROXY"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy(http: &str, https: &str, no_proxy: &str) -> Proxy {
        let s = |v: &str| (!v.is_empty()).then(|| Secret::from(v));
        let given = ProxySettings {
            http: s(http),
            https: s(https),
            no_proxy: vec![no_proxy.to_owned()],
        };
        Proxy::parse(&given, ProxySource::Environment).unwrap()
    }

    /// `proxyForURLTests` of golang.org/x/net `http/httpproxy/proxy_test.go`:
    /// the proxy a URL gets (`-` for none), the CGI and punycode cases left
    /// out (see the module's doc), and foo:// refused instead (below).
    #[test]
    fn proxy_for_url_as_go() {
        for (http, https, no_proxy, url, want) in [
            (
                "127.0.0.1:8080",
                "",
                "",
                "http://example.com",
                "http://127.0.0.1:8080",
            ),
            (
                "cache.corp.example.com:1234",
                "",
                "",
                "http://example.com",
                "http://cache.corp.example.com:1234",
            ),
            (
                "cache.corp.example.com",
                "",
                "",
                "http://example.com",
                "http://cache.corp.example.com",
            ),
            (
                "localhost",
                "",
                "",
                "http://example.com",
                "http://localhost",
            ),
            (
                "https://cache.corp.example.com",
                "",
                "",
                "http://example.com",
                "https://cache.corp.example.com",
            ),
            (
                "http://127.0.0.1:8080",
                "",
                "",
                "http://example.com",
                "http://127.0.0.1:8080",
            ),
            (
                "https://127.0.0.1:8080",
                "",
                "",
                "http://example.com",
                "https://127.0.0.1:8080",
            ),
            (
                "socks5://127.0.0.1",
                "",
                "",
                "http://example.com",
                "socks5://127.0.0.1",
            ),
            (
                "http.proxy.tld",
                "secure.proxy.tld",
                "",
                "http://insecure.tld/",
                "http://http.proxy.tld",
            ),
            (
                "http.proxy.tld",
                "secure.proxy.tld",
                "",
                "https://secure.tld/",
                "http://secure.proxy.tld",
            ),
            (
                "http.proxy.tld",
                "https://secure.proxy.tld",
                "",
                "https://secure.tld/",
                "https://secure.proxy.tld",
            ),
            ("http.proxy.tld", "", "", "https://secure.tld/", "-"),
            ("http.proxy.tld", "", "", "ftp://insecure.tld/", "-"),
            ("", "", "", "http://example.com", "-"),
            ("proxy", "", "example.com", "http://example.com/", "-"),
            (
                "proxy",
                "",
                ".example.com",
                "http://example.com/",
                "http://proxy",
            ),
            (
                "proxy",
                "",
                "ample.com",
                "http://example.com/",
                "http://proxy",
            ),
            ("proxy", "", "example.com", "http://foo.example.com/", "-"),
            (
                "proxy",
                "",
                ".foo.com",
                "http://example.com/",
                "http://proxy",
            ),
            (
                "proxy",
                "",
                "xn--fsq092h.com",
                "http://www.xn--fsq092h.com",
                "-",
            ),
            // hostpull's own: a password is kept for the worker and shown as ***.
            (
                "",
                "http://u:p%40ss@proxy:3128",
                "",
                "https://quay.io",
                "http://u:***@proxy:3128",
            ),
        ] {
            let p = proxy(http, https, no_proxy);
            let (scheme, rest) = url.split_once("://").unwrap();
            let got = p
                .for_url(scheme, authority_of(rest))
                .map(ToString::to_string);
            assert_eq!(
                got.as_deref().unwrap_or("-"),
                want,
                "{http} {https} {no_proxy} {url}"
            );
        }
    }

    /// `UseProxyTests` and `TestAllNoProxy` of the same file, with its
    /// `noProxy` list, each host on port 80.
    #[test]
    fn no_proxy_as_go() {
        let list = "foobar.com, .barbaz.net, *.wildcard.io, 192.168.1.1, 192.168.1.2:81, \
                    192.168.1.3:80, 10.0.0.0/30, 2001:db8::52:0:1, [2001:db8::52:0:2]:443, \
                    [2001:db8::52:0:3]:80, 2002:db8:a::45/64";
        let cases = [
            ("localhost", false),
            ("127.0.0.1", false),
            ("127.0.0.2", false),
            ("[::1]", false),
            ("[::2]", true),
            ("192.168.1.1", false),
            ("192.168.1.2", true),
            ("192.168.1.3", false),
            ("192.168.1.4", true),
            ("10.0.0.2", false),
            ("[2001:db8::52:0:1]", false),
            ("[2001:db8::52:0:2]", true),
            ("[2001:db8::52:0:3]", false),
            ("[2002:db8:a::123]", false),
            ("[fe80::424b:c8be:1643:a1b6]", true),
            ("barbaz.net", true),
            ("www.barbaz.net", false),
            ("foobar.com", false),
            ("www.foobar.com", false),
            ("foofoobar.com", true),
            ("baz.com", true),
            ("localhost.net", true),
            ("local.localhost", true),
            ("barbarbaz.net", true),
            ("wildcard.io", true),
            ("nested.wildcard.io", false),
            ("awildcard.io", true),
        ];
        let p = proxy("proxy", "", list);
        let all = proxy("proxy", "", "*");
        for (host, proxied) in cases {
            let at = format!("{host}:80");
            assert_eq!(p.for_url("http", &at).is_some(), proxied, "{host}");
            assert!(all.for_url("http", &at).is_none(), "{host} under *");
        }
        // TestInvalidNoProxy: an entry without a host is left out.
        assert!(
            proxy("proxy", "", ":1")
                .for_url("http", "example.com:80")
                .is_some()
        );
        // The request's port is its scheme's default when it names none.
        let p = proxy("", "proxy", "reg.corp:443, 10.1.0.0/16");
        assert!(p.for_url("https", "reg.corp").is_none());
        assert!(p.for_url("https", "reg.corp:5000").is_some());
        assert!(p.for_url("https", "10.1.2.3:5000").is_none());
        assert!(p.for_url("https", "REG.CORP").is_none());
    }

    /// What a proxy setting may be, and errors that never quote it.
    #[test]
    fn proxy_urls() {
        for (given, shown) in [
            ("http://proxy:3128", "http://proxy:3128"),
            ("proxy:3128", "http://proxy:3128"),
            ("HTTP://user@proxy", "http://user@proxy"),
            (
                "http://user:secret@[fd00::1]:3128/",
                "http://user:***@[fd00::1]:3128",
            ),
            ("socks5h://10.0.0.1:1080", "socks5h://10.0.0.1:1080"),
        ] {
            let u = ProxyUrl::parse(given, "X").unwrap();
            assert_eq!(u.to_string(), shown, "{given}");
            assert!(!format!("{u:?}").contains("secret"), "{given}");
        }
        assert_eq!(
            ProxyUrl::parse("proxy:3128", "X").unwrap().expose(),
            "http://proxy:3128"
        );
        for bad in [
            "foo://host",
            "http://user:secret@",
            "http://pro xy:secret@h",
            "http://[::1:3128",
            "http://h:99999",
            "http://h:port",
            "http://user:secret@h\n",
            "http://user:sec\"ret@h",
            "http://user:sec\\ret@h",
        ] {
            let e = ProxyUrl::parse(bad, "HTTPS_PROXY").unwrap_err().to_string();
            assert!(e.starts_with("invalid proxy HTTPS_PROXY: "), "{bad}: {e}");
            assert!(!e.contains("secret") && !e.contains("host"), "{bad}: {e}");
        }
    }

    /// Where the settings come from: the environment, upper case first, then
    /// lower case (Go's `TestFromEnvironment*`); `REQUEST_METHOD` drops
    /// HTTP_PROXY (`TestFromEnvironmentWithRequestMethod`); any of the files'
    /// keys makes the files decide, whole.
    #[test]
    fn settings_from_the_environment_or_the_files() {
        use crate::plan::testing::MemHost;
        let host = |vars: &[(&str, &str)]| {
            vars.iter()
                .fold(MemHost::new("/"), |h, (k, v)| h.var(k, *v))
        };
        let shown = |p: &Proxy| {
            let u = |u: &Option<ProxyUrl>| u.as_ref().map_or("-".into(), ToString::to_string);
            (u(&p.http), u(&p.https), p.no_proxy.clone(), p.source)
        };
        let env = Some(ProxySource::Environment);
        let none = Options::default();
        for (vars, want) in [
            (
                &[
                    ("HTTP_PROXY", "a:1"),
                    ("HTTPS_PROXY", "b:2"),
                    ("NO_PROXY", "n"),
                ][..],
                ("http://a:1", "http://b:2", "n", env),
            ),
            (
                &[
                    ("http_proxy", "a:1"),
                    ("https_proxy", "b:2"),
                    ("no_proxy", "n"),
                ],
                ("http://a:1", "http://b:2", "n", env),
            ),
            (
                &[
                    ("HTTPS_PROXY", "B:2"),
                    ("https_proxy", "b:2"),
                    ("HTTP_PROXY", ""),
                    ("http_proxy", "a:1"),
                ],
                ("http://a:1", "http://B:2", "", env),
            ),
            (
                &[
                    ("HTTP_PROXY", "a:1"),
                    ("HTTPS_PROXY", "b:2"),
                    ("REQUEST_METHOD", "PUT"),
                ],
                ("-", "http://b:2", "", env),
            ),
            (&[("NO_PROXY", "n")], ("-", "-", "n", None)),
        ] {
            let p = decide(&none, &host(vars)).unwrap();
            let (h, hs, n, src) = shown(&p);
            assert_eq!((h.as_str(), hs.as_str(), n.as_str(), src), want, "{vars:?}");
        }
        let files = Options {
            https_proxy: Some("c:3".into()),
            no_proxy: vec!["x".into(), ".y".into()],
            ..Options::default()
        };
        let p = decide(&files, &host(&[("HTTP_PROXY", "a:1"), ("NO_PROXY", "n")])).unwrap();
        let (h, hs, n, src) = shown(&p);
        assert_eq!(
            (h.as_str(), hs.as_str(), n.as_str(), src),
            ("-", "http://c:3", "x,.y", Some(ProxySource::Config))
        );
        let bad = Options {
            https_proxy: Some("gopher://h".into()),
            ..Options::default()
        };
        let e = decide(&bad, &host(&[])).unwrap_err().to_string();
        assert!(e.starts_with("invalid proxy https-proxy: "), "{e}");
    }

    /// The worker's files hold the password; nothing else does.
    #[test]
    fn worker_files() {
        let p = proxy("", "http://u:pw@proxy:3128", "corp.test");
        let env = p.env_file().unwrap();
        assert_eq!(
            env,
            "HTTPS_PROXY=http://u:pw@proxy:3128\nNO_PROXY=corp.test\n"
        );
        assert_eq!(
            read_env_file(&format!("{env}PATH=/x\n")),
            [
                ("HTTPS_PROXY", "http://u:pw@proxy:3128"),
                ("NO_PROXY", "corp.test")
            ]
        );
        assert_eq!(
            p.curl_config("https").as_deref(),
            Some("proxy = \"http://u:pw@proxy:3128\"\n")
        );
        assert_eq!(p.curl_config("http"), None);
        assert!(!format!("{p:?}").contains("pw"));
        assert_eq!(
            p.direct_because("https", "reg.corp.test:5000"),
            Some("NO_PROXY")
        );
        assert_eq!(
            p.direct_because("https", "[::1]:5000"),
            Some("a loopback host never goes through a proxy")
        );
        assert_eq!(p.direct_because("https", "quay.io"), None);
        assert_eq!(p.direct_because("http", "reg.corp.test"), None);
        assert_eq!(proxy("", "", "corp.test").env_file(), None);
    }
}
