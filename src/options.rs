//! What a pull is asked to do: the options of the command line, of a pull
//! profile and of the hostpull.d drop-ins.

use std::path::PathBuf;

/// How the worker is isolated.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// `systemd` when systemd runs the host; otherwise an error naming `none`.
    Auto,
    /// A transient systemd unit with a dynamic user.
    Systemd,
    /// A direct child process of hostpull, for hosts without systemd.
    None,
}

/// What a pull is asked for: the command line's options, which are also the
/// keys of a pull profile (`pulls.d/NAME.toml`) and of the hostpull.d drop-ins
/// (their `[worker]`, `[pull]` and `[cluster]` tables). One struct carries the
/// command line (clap) and the files (serde); [`crate::config`] merges the
/// layers: command line over profile over drop-ins; defaults are the plan's.
///
/// Everything here is a request, unchecked: the plan parses and refuses.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, clap::Args, serde::Deserialize, serde::Serialize,
)]
#[serde(rename_all = "kebab-case")]
#[command(args_override_self = true)]
pub struct Options {
    /// docker://HOST[:PORT]/PATH[:TAG|@sha256:HEX] (docker:// may be left out)
    #[arg(required_unless_present = "profile")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// oci:DIR[:TAG], TAG defaulting to the image's tag; or ostree:REPO[:REF]:
    /// import into the ostree repository REPO as rpm-ostree and bootc store
    /// images, and point REF at the commit (needs the `ostree` build feature)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dest: Option<String>,
    /// containers-auth.json(5) file to take credentials from (repeatable;
    /// REGISTRY_AUTH_FILE is read after them)
    #[arg(long = "authfile", value_name = "AUTHFILE")]
    #[serde(rename = "authfile", default, skip_serializing_if = "Vec::is_empty")]
    pub authfiles: Vec<PathBuf>,
    /// Kubernetes pull secret (dockerconfigjson or dockercfg, YAML or JSON, or
    /// the bare content) to take credentials from (repeatable)
    #[arg(long = "pull-secret", value_name = "FILE")]
    #[serde(rename = "pull-secret", default, skip_serializing_if = "Vec::is_empty")]
    pub pull_secrets: Vec<PathBuf>,
    /// A token file for HOST[:PORT][/PATH], re-read on every pull (repeatable)
    #[arg(long = "registry-token", value_name = "HOST[:PORT][/PATH]=FILE")]
    #[serde(
        rename = "registry-token",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tokens: Vec<String>,
    /// The user name that goes with --registry-token [default: serviceaccount]
    #[arg(long = "registry-token-user", value_name = "NAME")]
    #[serde(
        rename = "registry-token-user",
        skip_serializing_if = "Option::is_none"
    )]
    pub token_user: Option<String>,
    /// Without any source, do not read the host's default credential files
    /// (/run, /etc, /usr/lib ostree/auth.json, /var/lib/kubelet/config.json)
    #[arg(long)]
    #[serde(default, skip_serializing_if = "is_false")]
    pub no_default_creds: bool,
    /// containers-registries.conf(5) to use instead of /etc/containers/registries.conf{,.d}
    #[arg(long, value_name = "FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registries_conf: Option<PathBuf>,
    /// kubelet's CredentialProviderConfig: exec plugins asked for credentials
    #[arg(long = "credential-provider-config", value_name = "FILE")]
    #[serde(
        rename = "credential-provider-config",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_config: Option<PathBuf>,
    /// The directory of the credential provider plugins
    #[arg(long = "credential-provider-bin-dir", value_name = "DIR")]
    #[serde(
        rename = "credential-provider-bin-dir",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_bin_dir: Option<PathBuf>,
    /// Directory of CA certificates (*.crt) trusted for the registry
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_dir: Option<PathBuf>,
    /// Require HTTPS and verify certificates [default: true]
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_verify: Option<bool>,
    /// OS/ARCH[/VARIANT] to choose from a multi-platform image; defaults to this host's
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// How to isolate the network-facing worker [default: auto]
    #[arg(long, value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxMode>,
    /// The worker unit's SELinux context where SELinux is enabled
    /// [default: system_u:system_r:hostpull_worker_t:s0]
    #[arg(long = "worker-selinux-context", value_name = "CONTEXT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selinux_context: Option<String>,
    /// The skopeo binary that runs as the worker [default: skopeo on PATH;
    /// HOSTPULL_SKOPEO, a test hook, comes between this and the config file]
    #[arg(long, value_name = "PATH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skopeo: Option<PathBuf>,
    /// The worker's MemoryMax= (bytes, or with K, M, G, T) [default: 512M]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_max: Option<String>,
    /// The worker's CPUQuota=, e.g. 50% [default: none]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_quota: Option<String>,
    /// The worker's TasksMax= [default: 256]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks_max: Option<u32>,
    /// The worker's IOWeight=, 1 to 10000 [default: 50]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_weight: Option<u32>,
    /// Give up after this many seconds, retries included [default: 3600]
    #[arg(long, value_name = "SECS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Stop a worker that received no byte for this many seconds [default: 60]
    #[arg(long, value_name = "SECS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall_timeout: Option<u64>,
    /// At most this many bytes a second for the whole pull, all blobs
    /// together (with K, M, G, T: base 1024; at least 1K) [default: no limit]
    #[arg(long, value_name = "RATE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_rate: Option<String>,
    /// Trust the CA certificates in FILE for HOST[:PORT] only (repeatable)
    #[arg(long = "ca", value_name = "HOST[:PORT]=FILE")]
    #[serde(rename = "ca", default, skip_serializing_if = "Vec::is_empty")]
    pub cas: Vec<String>,
    /// A name server for the worker only (repeatable; needs --sandbox systemd)
    #[arg(long, value_name = "IP")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<String>,
    /// A search domain for the worker only (repeatable)
    #[arg(long, value_name = "DOMAIN")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_search: Vec<String>,
    /// An /etc/hosts entry for the worker only (repeatable)
    #[arg(long = "add-host", value_name = "NAME:IP")]
    #[serde(rename = "add-host", default, skip_serializing_if = "Vec::is_empty")]
    pub add_hosts: Vec<String>,
    /// containers-policy.json(5) to enforce [default: /etc/containers/policy.json]
    #[arg(long, value_name = "FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<PathBuf>,
    /// containers-registries.d(5) directory with signature lookasides
    /// [default: /etc/containers/registries.d]
    #[arg(long = "registries.d", value_name = "DIR")]
    #[serde(rename = "registries.d", skip_serializing_if = "Option::is_none")]
    pub registries_d: Option<PathBuf>,
    /// Refuse to pull when the policy accepts the image without a signature
    /// (insecureAcceptAnything)
    #[arg(long)]
    #[serde(default, skip_serializing_if = "is_false")]
    pub require_signature: bool,
}

/// serde: a flag that is off is not written, so that merging leaves it to
/// the layers below.
fn is_false(b: &bool) -> bool {
    !b
}
