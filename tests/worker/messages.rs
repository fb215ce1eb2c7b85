//! What hostpull says, held to what is true: each retry's warning names its
//! cause, `hostpull plan` shows the sandbox as the command line spells it and
//! no limit that does not apply, and a file that does not parse is named with
//! the line, the column and the key, and none of its values.

use std::path::Path;

use crate::util::*;

/// Each retry's warning names its cause, the same as the error's first line:
/// a refused connection (a port nobody listens on) and a registry's 5xx on the
/// manifest and on a blob (tests/status_registry.py), whatever the worker.
#[test]
fn retry_warnings_name_their_cause() {
    let (port, _kill) = status_registry();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cases = [
        (format!("127.0.0.1:{dead}/x/y:v1"), "connection refused"),
        (
            format!("127.0.0.1:{port}/eof/s503-m-text:v1"),
            "HTTP status 503",
        ),
        (
            format!("127.0.0.1:{port}/x509/s500-b:v1"),
            "HTTP status 500",
        ),
    ];
    let s = scratch();
    for (i, (image, cause)) in cases.iter().enumerate() {
        let dest = oci(&s.path().join(format!("l{i}")));
        let mut c = pull_cmd(image, &dest);
        c.args(["--cert-dir", var("RIG_CERT_DIR"), "--no-default-creds"])
            .args(["--timeout", "5"]);
        let r = run(&mut c);
        r.assert_failure(6);
        let warnings: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| l.contains(" WARN ") && l.contains(" failed, retrying in "))
            .collect();
        assert!(!warnings.is_empty(), "{image}: no retry: {}", r.stderr);
        for w in &warnings {
            assert!(w.ends_with(&format!(": {cause}")), "{image}: {w}");
        }
        let error = r.stderr.lines().find(|l| l.starts_with("error: ")).unwrap();
        assert!(error.contains(&format!(": {cause}")), "{image}: {error}");
    }
}

/// `hostpull plan` shows the sandbox as `--sandbox` spells it, in its text
/// and in `--json` alike, and the unit's limits only where there is a unit:
/// `none` runs the worker as a plain child, which no MemoryMax= or TasksMax=
/// holds (docs/sandbox.md). `auto` is `systemd` where systemd runs the host
/// (the systemd pass), else `auto` with the error a pull would give, and the
/// limits it would have where systemd runs.
#[test]
fn plan_says_the_sandbox_as_the_command_line_does() {
    let s = scratch();
    let root = config_root(s.path());
    let systemd = Path::new("/run/systemd/system").exists();
    // (--sandbox, what plan shows, whether a unit's limits apply)
    let cases = [
        ("none", "none", false),
        ("auto", if systemd { "systemd" } else { "auto" }, true),
    ];
    for (mode, shown, limits) in cases {
        let plan = |json: bool| {
            let mut c = hostpull(&[]);
            c.args(["plan", "127.0.0.1:1/x:v1", "--no-default-creds"])
                .args(["--sandbox", mode, "--config-root"])
                .arg(&root);
            if json {
                c.arg("--json");
            }
            let r = run(&mut c);
            assert_eq!(r.code, 0, "{mode}: {}", r.stderr);
            r
        };
        let text = plan(false).stdout;
        let line = text
            .lines()
            .find(|l| l.starts_with("sandbox "))
            .unwrap_or_else(|| panic!("{mode}: {text}"));
        let word = line["sandbox".len()..].trim_start();
        assert!(word.starts_with(shown), "{mode}: {line}");
        for debug in ["None", "Auto", "Systemd"] {
            assert!(!text.contains(debug), "{mode}: {text}");
        }
        assert_eq!(
            line.contains("MemoryMax=512M, TasksMax=256"),
            limits,
            "{mode}: {line}"
        );
        if mode == "none" {
            assert!(line.contains("no MemoryMax="), "{mode}: {line}");
        }
        let json: serde_json::Value = serde_json::from_str(&plan(true).stdout).unwrap();
        assert_eq!(json["sandbox"], shown, "{mode}: {json}");
        let memory = if mode == "none" {
            serde_json::Value::Null
        } else {
            "512M".into()
        };
        assert_eq!(json["memory_max"], memory, "{mode}: {json}");
    }
}

/// A file that does not parse, of each kind hostpull reads, is exit 2 with
/// one line that names the file, the line and column and the key's path,
/// and quotes none of its values: `s3cr3t` stands for a secret (a password in
/// an authfile, a token in a provider's `args`).
#[test]
fn parse_errors_point_at_the_line_and_quote_no_value() {
    let s = scratch();
    // (name, file and its text, arguments, what the error says)
    let cases: &[(&str, &str, &str, &[&str], &str)] = &[
        (
            "config.toml",
            "etc/hostpull/config.toml",
            "[pull]\nstall-timeout = 5\ntimeout = \"s3cr3t\"\n",
            &[],
            "invalid configuration {root}/etc/hostpull/config.toml: line 3 column 11: \
             pull.timeout: invalid type: string, expected u64",
        ),
        (
            "drop-in",
            "run/hostpull/config.d/50-x.toml",
            "[worker]\ntasks-max = [\"s3cr3t\"]\n",
            &[],
            "invalid configuration {root}/run/hostpull/config.d/50-x.toml: line 2 column 13: \
             worker.tasks-max: invalid type: sequence, expected u32",
        ),
        (
            "drop-in syntax",
            "etc/hostpull/config.d/50-x.toml",
            "[cluster]\ndns = [\"10.0.0.1\",\n  s3cr3t]\n",
            &[],
            "invalid configuration {root}/etc/hostpull/config.d/50-x.toml: line 3 column 3: ",
        ),
        (
            "profile",
            "etc/hostpull/pulls.d/os.toml",
            "image = \"127.0.0.1:1/x:v1\"\ndest = \"oci:/nonexistent/l\"\nauthfile = \"s3cr3t\"\n",
            &["--profile", "os"],
            "invalid pull profile {root}/etc/hostpull/pulls.d/os.toml: line 3 column 12: \
             authfile: invalid type: string, expected a sequence",
        ),
        (
            "registries.conf",
            "r.conf",
            "[[registry]]\nlocation = \"127.0.0.1:1\"\ninsecure = \"s3cr3t\"\n",
            &["--registries-conf", "{}"],
            "r.conf: line 3 column 12: registry[0].insecure: invalid type: string, expected a boolean",
        ),
        (
            "authfile",
            "a.json",
            "{\"auths\": {\n  \"127.0.0.1:1\": {\"auth\": 12345,\n    \"password\": \"s3cr3t\"}}}\n",
            &["--authfile", "{}"],
            "a.json: line 2 column 31: auths.127.0.0.1:1.auth: invalid type: integer, expected a string",
        ),
        (
            "authfile syntax",
            "b.json",
            "{\"auths\": {\"127.0.0.1:1\": {\"auth\": \"czNjcjN0OnMzY3IzdA==\"\n  \"password\": \"s3cr3t\"}}}\n",
            &["--authfile", "{}"],
            "b.json: not JSON or YAML: line 2 column 3: expected `,` or `}`",
        ),
        (
            "pull secret",
            "s.yaml",
            "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: [s3cr3t\n",
            &["--pull-secret", "{}"],
            "s.yaml: not JSON or YAML: line 6 column 1: ",
        ),
        (
            "provider config",
            "p.yaml",
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: p\n  args: --token=s3cr3t\n",
            &[
                "--credential-provider-config",
                "{}",
                "--credential-provider-bin-dir",
                "/nonexistent",
            ],
            "invalid credential provider config {}: line 5 column 9: providers[0].args: \
             invalid type: string, expected a sequence",
        ),
        (
            "registries.d",
            "registries.d/x.yaml",
            "docker:\n  127.0.0.1:1:\n    lookaside: [s3cr3t]\n",
            &["--registries.d", "{dir}"],
            "registries.d/x.yaml: line 3 column 16: docker.127.0.0.1:1.lookaside: \
             invalid type: sequence, expected a string",
        ),
        (
            "policy.json",
            "policy.json",
            "{\"default\": [{\"type\": \"insecureAcceptAnything\"}],\n \"s3cr3t\"}\n",
            &["--policy", "{}"],
            "policy.json: ",
        ),
    ];
    for (i, (name, file, text, args, want)) in cases.iter().enumerate() {
        let root = config_root(s.path().join(format!("root{i}")));
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        let path = path.to_str().unwrap();
        let dir = Path::new(path).parent().unwrap().to_str().unwrap();
        let mut c = hostpull(&[]);
        c.args(["plan", "127.0.0.1:1/x:v1", "--sandbox", "none"])
            .arg("--config-root")
            .arg(&root);
        for a in *args {
            c.arg(a.replace("{}", path).replace("{dir}", dir));
        }
        let r = run(&mut c);
        r.assert_failure(2);
        // Under --config-root, the file's real path.
        let want = want
            .replace("{}", path)
            .replace("{root}", root.to_str().unwrap());
        assert!(
            r.stderr.contains(&want),
            "{name}: want {want}\n{}",
            r.stderr
        );
        assert!(r.stderr.contains("line "), "{name}: {}", r.stderr);
        for secret in ["s3cr3t", "czNjcjN0", "12345"] {
            assert!(!r.stderr.contains(secret), "{name}: {}", r.stderr);
        }
    }
}
