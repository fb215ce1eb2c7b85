//! A cap on how deep a host file nests, checked before its parser sees it.
//! libyaml's scanner walks every open flow level (`[`, `{`) at each token,
//! so 100 000 `[` kept serde_yaml busy past 30 s before its own depth limit
//! refused them; toml's parser overflowed the stack on them (a crash, not an
//! error). Host files (authfiles, pull secrets, provider configs,
//! registries.conf, registries.d, hostpull.d) nest a few levels.

/// The most levels of `[` and `{` a YAML file may nest: serde_json's and
/// serde_yaml's own limit, so that nothing they would read is refused.
pub const MAX_DEPTH: usize = 128;

/// The most a TOML file may nest: toml's parser has no limit of its own, and
/// 128 levels overflowed a 2 MiB thread stack (debug build); 100 did not.
pub const TOML_MAX_DEPTH: usize = 64;

/// Why a YAML text is refused before it is parsed.
pub const TOO_DEEP: &str = "nested more than 128 levels deep";

/// `text`, unless it nests more than `max` levels ([`too_deep`]): then a
/// short reason.
pub fn check(text: &str, max: usize) -> Result<(), String> {
    match too_deep(text, max) {
        true => Err(format!("nested more than {max} levels deep")),
        false => Ok(()),
    }
}

/// Whether `text` opens more than `max` flow collections (`[`, `{`:
/// YAML's, JSON's and TOML's arrays and inline tables) at once, outside
/// quoted strings. Plain scalars and comments are not told apart: a bracket
/// in one counts, which may only refuse an absurd file.
pub fn too_deep(text: &str, max: usize) -> bool {
    let mut depth = 0usize;
    let mut quote = None;
    let mut escaped = false;
    for b in text.bytes() {
        match (quote, b) {
            (Some(b'"'), b'\\') if !escaped => {
                escaped = true;
                continue;
            }
            (Some(q), b) if b == q && !escaped => quote = None,
            (Some(_), _) => {}
            (None, b'"' | b'\'') => quote = Some(b),
            (None, b'[' | b'{') => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            (None, b']' | b'}') => depth = depth.saturating_sub(1),
            (None, _) => {}
        }
        escaped = false;
    }
    false
}

/// `serde_yaml::from_str`, after [`too_deep`] with [`MAX_DEPTH`]: the error
/// is a short reason (serde_yaml's, which may quote the text: callers of
/// files with secrets drop it).
pub fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    if too_deep(text, MAX_DEPTH) {
        return Err(TOO_DEEP.to_owned());
    }
    serde_yaml::from_str(text).map_err(|e| crate::error::one_line(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_capped() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        for (text, deep) in [
            (nest(MAX_DEPTH), false),
            (nest(MAX_DEPTH + 1), true),
            ("[".repeat(100_000), true),
            ("{a: [1, {b: 2}]}".to_owned(), false),
            // Brackets in quoted strings do not count, escaped quotes stay inside.
            (format!("a: \"{}\\\"\"", "[".repeat(200)), false),
            (format!("a: '{}'", "{".repeat(200)), false),
            // Closing more than was opened never goes below zero.
            (format!("]]]]{}", nest(MAX_DEPTH)), false),
        ] {
            assert_eq!(
                too_deep(&text, MAX_DEPTH),
                deep,
                "{}",
                &text[..text.len().min(40)]
            );
        }
        let t = std::time::Instant::now();
        let e = yaml::<serde_yaml::Value>(&"[".repeat(100_000)).unwrap_err();
        assert_eq!(e, TOO_DEEP);
        assert!(
            t.elapsed() < std::time::Duration::from_millis(100),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(yaml::<Vec<u8>>("[1, 2]").unwrap(), [1, 2]);
        assert_eq!(
            check("a = [[1]]", 1).unwrap_err(),
            "nested more than 1 levels deep"
        );
        check("a = [[1]]", 2).unwrap();
    }
}
