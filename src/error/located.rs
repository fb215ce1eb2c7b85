//! Parse errors that point at the line: where in the file (line and column),
//! the key's path (`timeout`, `providers[0].args`), and what is wrong, never a
//! value of the file (which may be a secret: [`serde_redacted`]).
//!
//! Each format's own parser finds the place (serde_json's line and column,
//! toml's span, serde_yaml's mark); serde_path_to_error the path.

use std::fmt;

use serde::de::DeserializeOwned;

use super::{one_line, serde_redacted};

/// A parse error: where, which key, and what, without the input's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// 1-based line and column, if the parser knows them.
    pub at: Option<(usize, usize)>,
    /// The key's path, `.` for the document itself.
    pub path: String,
    /// What is wrong, without the values it quoted.
    pub message: String,
}

impl fmt::Display for Located {
    /// `line 3 column 11: timeout: invalid type: string, expected u64`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((line, column)) = self.at {
            write!(f, "line {line} column {column}: ")?;
        }
        if self.path != "." {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for Located {}

impl Located {
    /// An error of the whole file (no place, no key): `message` quotes none of it.
    pub fn whole(message: impl Into<String>) -> Self {
        Self {
            at: None,
            path: ".".into(),
            message: message.into(),
        }
    }

    fn new<E: fmt::Display>(e: &serde_path_to_error::Error<E>, at: Option<(usize, usize)>) -> Self {
        let mut message = one_line(&e.inner().to_string());
        // Each parser appends the place, or prepends the path, itself.
        if let Some((line, column)) = at {
            message = message.replacen(&format!(" at line {line} column {column}"), "", 1);
        }
        let path = e.path().to_string();
        if let Some(m) = message.strip_prefix(&format!("{path}: ")) {
            message = m.to_owned();
        }
        Self {
            at,
            path,
            message: serde_redacted(&message),
        }
    }
}

/// `text` as JSON into `T`.
pub fn json<T: DeserializeOwned>(text: &str) -> Result<T, Located> {
    let mut de = serde_json::Deserializer::from_str(text);
    let at = |e: &serde_json::Error| (e.line() > 0).then(|| (e.line(), e.column()));
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let place = at(e.inner());
        Located::new(&e, place)
    })?;
    de.end().map_err(|e| Located {
        at: at(&e),
        path: ".".into(),
        message: "trailing characters after the JSON value".into(),
    })?;
    Ok(value)
}

/// `text` as YAML into `T`.
pub fn yaml<T: DeserializeOwned>(text: &str) -> Result<T, Located> {
    serde_path_to_error::deserialize(serde_yaml::Deserializer::from_str(text)).map_err(|e| {
        let at = e.inner().location().map(|l| (l.line(), l.column()));
        Located::new(&e, at)
    })
}

/// `text` as TOML into `T`.
pub fn toml<T: DeserializeOwned>(text: &str) -> Result<T, Located> {
    serde_path_to_error::deserialize(toml::Deserializer::new(text)).map_err(|e| {
        let at = e.inner().span().map(|s| line_column(text, s.start));
        // toml's message is without the place and the source line (which
        // its Display quotes, value and all).
        let message = one_line(e.inner().message());
        let path = e.path().to_string();
        Located {
            at,
            path,
            message: serde_redacted(&message),
        }
    })
}

/// JSON, or YAML where it is not JSON, as `auth::parse_json_or_yaml` reads
/// these files: a text that is JSON is read as JSON (YAML would take `5` for
/// the string a field wants). Where it is neither, the error is JSON's for a
/// text that starts as JSON does (an object or an array), YAML's otherwise.
pub fn json_or_yaml<T: DeserializeOwned>(text: &str) -> Result<T, Located> {
    if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() {
        return json(text);
    }
    match yaml(text) {
        Err(_) if text.trim_start().starts_with(['{', '[']) => json(text),
        r => r,
    }
}

/// Why `auth::parse_json_or_yaml` read nothing from `text`: JSON's error for
/// a text that starts as JSON does, YAML's otherwise, with its line and
/// column, no value, and no path either (its keys are the input's, and may be
/// a secret pasted in the wrong place).
pub fn not_json_or_yaml(text: &str) -> String {
    use serde_json::Value;
    let e = match text.trim_start().starts_with(['{', '[']) {
        true => json::<Value>(text).err(),
        false => yaml::<Value>(text).err(),
    };
    match e {
        Some(e) => {
            let e = Located {
                path: ".".into(),
                ..e
            };
            format!("not JSON or YAML: {e}")
        }
        None => "not JSON or YAML".to_owned(),
    }
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Config {
        timeout: Option<u64>,
        providers: Option<Vec<Provider>>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Provider {
        name: String,
        args: Option<Vec<String>>,
    }

    /// Each format gives the line, the column and the key's path, and none
    /// of the values (here `s3cr3t`).
    #[test]
    fn errors_point_at_the_key_and_quote_no_value() {
        type Parse = fn(&str) -> Result<Config, Located>;
        let cases: [(&str, Parse, &str); 10] = [
            (
                "# c\ntimeout = \"s3cr3t\"\n",
                toml,
                "line 2 column 11: timeout: invalid type: string, expected u64",
            ),
            (
                "[[providers]]\nname = \"a\"\nargs = \"s3cr3t\"\n",
                toml,
                "line 3 column 8: providers[0].args: invalid type: string, expected a sequence",
            ),
            (
                "timeout = s3cr3t\n",
                toml,
                "line 1 column 11: invalid string expected `\"`, `'`",
            ),
            (
                "{\n  \"providers\": [{\"name\": \"a\",\n    \"args\": \"s3cr3t\"}]}",
                json,
                "line 3 column 20: providers[0].args: invalid type: string, expected a sequence",
            ),
            (
                "{\"timeout\": 1,\n \"s3cr3t\" 2}",
                json,
                "line 2 column 11: expected `:`",
            ),
            (
                "{\"timeout\": 1} s3cr3t",
                json,
                "line 1 column 16: trailing characters after the JSON value",
            ),
            (
                "providers:\n- name: a\n  args: s3cr3t\n",
                yaml,
                "line 3 column 9: providers[0].args: invalid type: string, expected a sequence",
            ),
            (
                "{\"providers\": [{\"name\": \"a\", \"args\": \"s3cr3t\"}]}",
                json_or_yaml,
                "line 1 column 45: providers[0].args: invalid type: string, expected a sequence",
            ),
            // JSON is read as JSON, where YAML would take the number for a string.
            (
                "{\"providers\": [{\"name\": 12345}]}",
                json_or_yaml,
                "line 1 column 29: providers[0].name: invalid type: integer, expected a string",
            ),
            (
                "providers:\n- name: a\n  args: {s3cr3t: 1}\n",
                json_or_yaml,
                "line 3 column 9: providers[0].args: invalid type: map, expected a sequence",
            ),
        ];
        for (text, parse, want) in cases {
            let got = parse(text).unwrap_err().to_string();
            assert!(got.starts_with(want), "{text:?}: {got}");
            assert!(!got.contains("s3cr3t"), "{got}");
        }
    }

    #[test]
    fn line_column_counts_characters() {
        assert_eq!(line_column("a\nbé = x", 6), (2, 4));
        assert_eq!(line_column("x", 0), (1, 1));
        assert_eq!(line_column("x", 99), (1, 2));
    }
}
