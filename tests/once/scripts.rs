//! The scripts that run what cargo built (tests/demo.sh, bench/) find it where
//! cargo put it (issue 45): with CARGO_TARGET_DIR set, README's first command
//! built there, then ran `target/release/hostpull` by path: exit 127 after a
//! 7-minute build.

use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// tests/cargo-target.sh's `cargo_target_dir`, run from `cwd` with `env`.
fn cargo_target_dir(cwd: &Path, arg: &str, env: Option<&Path>) -> PathBuf {
    let mut c = Command::new("bash");
    c.current_dir(cwd).env_remove("CARGO_TARGET_DIR");
    c.args([
        "-c",
        &format!(". {ROOT}/tests/cargo-target.sh && cargo_target_dir {arg}"),
    ]);
    if let Some(dir) = env {
        c.env("CARGO_TARGET_DIR", dir);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim_end())
}

#[test]
fn scripts_run_the_binary_where_cargo_built_it() {
    let root = Path::new(ROOT);
    let elsewhere = tempfile::tempdir().unwrap();
    assert_eq!(cargo_target_dir(root, "", None), root.join("target"));
    let set = Some(elsewhere.path());
    assert_eq!(cargo_target_dir(root, "", set), elsewhere.path());
    assert_eq!(
        cargo_target_dir(elsewhere.path(), ROOT, set),
        elsewhere.path()
    );
    // No script guesses the path: each one that builds asks cargo_target_dir.
    let mut scripts = vec![root.join("tests/demo.sh")];
    for e in std::fs::read_dir(root.join("bench")).unwrap() {
        scripts.extend(Some(e.unwrap().path()).filter(|p| p.extension() == Some("sh".as_ref())));
    }
    for script in scripts {
        let text = std::fs::read_to_string(&script).unwrap();
        let code: Vec<&str> = (text.lines())
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect();
        for guess in ["target/release", "target/$HOST"] {
            let found = code.iter().find(|l| l.contains(guess));
            assert!(found.is_none(), "{}: {found:?}", script.display());
        }
        if code.iter().any(|l| l.contains("cargo build")) {
            // Directly, or through bench/lib.sh's bench_checks (checked below).
            let sources = code.iter().any(|l| {
                l.contains("tests/cargo-target.sh") || l.trim_start().starts_with("bench_checks")
            });
            assert!(sources, "{} builds, and finds no binary", script.display());
        }
    }
    let lib = std::fs::read_to_string(root.join("bench/lib.sh")).unwrap();
    let checks = lib.split("bench_checks() {").nth(1).unwrap_or_default();
    let checks = checks.split("\n}").next().unwrap_or_default();
    assert!(
        checks.contains(". \"$ROOT/tests/cargo-target.sh\"") && checks.contains("cargo_target_dir"),
        "bench/lib.sh's bench_checks finds no binary: {checks}"
    );
}
