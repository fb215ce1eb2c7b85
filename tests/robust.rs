//! Robustness at the edge of the binary: bad configuration is exit 2 naming what
//! is wrong, and the committed fuzz corpus (fuzz/corpus) replays through the
//! same contract checks the fuzz targets assert (fuzz/src/contract.rs).

use std::process::Command;

use crate::util::*;

#[test]
fn missing_config_root_is_a_usage_error_naming_it() {
    let dir = scratch();
    let missing = dir.path().join("no-such-root");
    let r = run(Command::new(env!("CARGO_BIN_EXE_hostpull"))
        .args(["plan", "127.0.0.1:1/x:v1", "--dest", "oci:/nonexistent/d"])
        .arg("--config-root")
        .arg(&missing));
    r.assert_failure(2);
    assert!(r.stderr.contains(missing.to_str().unwrap()), "{}", r.stderr);
}
