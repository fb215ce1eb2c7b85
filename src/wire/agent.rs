//! The worker agent's protocol ([`crate::confined::agent`]): root's side is
//! `sandbox::session`. The agent's stdout is a stream socket to root, the
//! side channel: the agent writes [`HELLO`], then root sends one JSON
//! [`Request`] a line and, for `run`, reads one JSON [`Reply`] line followed
//! by the bytes it announces.

use serde::{Deserialize, Serialize};

/// The hidden verb that makes `hostpull` the agent.
pub const VERB: &str = "__worker-agent";
/// The agent's first line on the side channel.
pub const HELLO: &str = "hostpull-worker-agent 1";
/// The option before SKOPEO that names the proxy settings' file.
pub const PROXY_ENV_OPTION: &str = "--proxy-env";
/// The most of a command's stderr the agent passes on.
pub const STDERR_MAX: u64 = 64 << 10;
/// The longest line either side sends.
pub const LINE_MAX: u64 = 64 << 10;

/// What root asks the agent, one JSON line each.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// Run skopeo with `args`; answer with a [`Reply`] and its output.
    Run {
        /// skopeo's arguments.
        args: Vec<String>,
        /// The most of its stdout root wants; one byte more says it was more.
        limit: u64,
    },
    /// Start the image proxy on stdin's socketpair; nothing is answered.
    Proxy,
}

/// How a `run` ended, one JSON line, followed by `stdout` then `stderr` bytes.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Reply {
    /// Its exit code; none when a signal ended it or its stdout passed the
    /// limit (it is then killed, not waited for) or it could not start.
    pub code: Option<i32>,
    /// The signal that ended it, if not the agent's own kill; the agent
    /// then dies of it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// The bytes of stdout that follow.
    pub stdout: u64,
    /// The bytes of stderr that follow them.
    pub stderr: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests and replies as the wire carries them.
    #[test]
    fn wire_format() {
        let run = Request::Run {
            args: vec!["inspect".into(), "--raw".into()],
            limit: 9,
        };
        let line = serde_json::to_string(&run).unwrap();
        assert_eq!(line, r#"{"op":"run","args":["inspect","--raw"],"limit":9}"#);
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), run);
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"op":"proxy"}"#).unwrap(),
            Request::Proxy
        );
        assert!(serde_json::from_str::<Request>(r#"{"op":"exec"}"#).is_err());
        let killed = Reply {
            code: None,
            signal: Some(9),
            stdout: 0,
            stderr: 2,
        };
        let line = serde_json::to_string(&killed).unwrap();
        assert_eq!(line, r#"{"code":null,"signal":9,"stdout":0,"stderr":2}"#);
        assert_eq!(serde_json::from_str::<Reply>(&line).unwrap(), killed);
        let ended: Reply = serde_json::from_str(r#"{"code":3,"stdout":1,"stderr":0}"#).unwrap();
        assert_eq!((ended.code, ended.signal), (Some(3), None));
    }
}
