# tests/cargo-target.sh - sourced by the scripts that run what cargo built by its path
# (tests/demo.sh, bench/). cargo_target_dir [DIR] prints the target directory of the
# package at DIR (default .) as cargo itself decides it (`cargo metadata`:
# CARGO_TARGET_DIR, build.target-dir, else DIR/target), so that a developer's
# CARGO_TARGET_DIR does not leave `target/release/hostpull` missing after the build.
# tests/once/scripts.rs runs it with and without CARGO_TARGET_DIR.

# Where cargo cannot answer (a bench's second stage inside tests/sysd.sh, say), its
# first rules: CARGO_TARGET_DIR, else DIR/target.
cargo_target_dir() {
    local meta dir=
    if meta=$(cd "${1:-.}" && cargo metadata --format-version 1 --no-deps --offline 2>/dev/null); then
        dir=$(printf '%s\n' "$meta" | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    fi
    printf '%s\n' "${dir:-${CARGO_TARGET_DIR:-${1:-.}/target}}"
}
