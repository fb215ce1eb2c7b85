//! What hostpull says, held to what is true: each retry's warning names its
//! cause, `hostpull plan` shows the sandbox as the command line spells it and
//! no limit that does not apply, and a file that does not parse is named with
//! the line, the column and the key, and none of its values.

use std::path::Path;
use std::process::Command;

use crate::util::*;

/// Each retry's warning names its cause, the same as the error's first line:
/// a refused connection (a port nobody listens on) and a registry's 5xx on the
/// manifest and on a blob (tests/status_registry.py), whatever the worker.
#[test]
fn retry_warnings_name_their_cause() {
    let ca = Path::new(var("RIG_CA"));
    let mut server = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/status_registry.py"
    ));
    server
        .arg("--cert")
        .arg(ca.with_file_name("server.crt"))
        .arg("--key")
        .arg(ca.with_file_name("server.key"))
        .stdout(std::process::Stdio::piped());
    let mut child = server.spawn().unwrap();
    let port = read_port(&mut child, "tests/status_registry.py");
    let _kill = KillOnDrop(child);
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
        let dest = format!("oci:{}", s.path().join(format!("l{i}")).display());
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
            let mut c = Command::new(env!("CARGO_BIN_EXE_hostpull"));
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
