//! The strict reading of untrusted JSON that [`super::parse`] does before its
//! typed parse: every document that serde and Go's `encoding/json` could read
//! differently is refused.

use std::fmt;

use serde::Deserialize;

/// A JSON document as written: every key of an object in order, repeats kept,
/// so that [`strict`] sees what serde's typed parse and Go's would each pick.
/// serde_json's parse of it refuses invalid UTF-8, lone surrogates and nesting
/// deeper than 128.
#[derive(Debug)]
pub(super) enum Json {
    Scalar,
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    pub(super) fn parse(bytes: &[u8]) -> serde_json::Result<Self> {
        serde_json::from_slice(bytes)
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Json;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("JSON")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Json, E> {
                Ok(Json::Scalar)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Json, E> {
                Ok(Json::Scalar)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Json, E> {
                Ok(Json::Scalar)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Json, E> {
                Ok(Json::Scalar)
            }
            fn visit_str<E>(self, _: &str) -> Result<Json, E> {
                Ok(Json::Scalar)
            }
            fn visit_unit<E>(self) -> Result<Json, E> {
                Ok(Json::Scalar)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Json, A::Error> {
                let mut v = Vec::new();
                while let Some(e) = a.next_element()? {
                    v.push(e);
                }
                Ok(Json::Arr(v))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Json, A::Error> {
                let mut v = Vec::new();
                while let Some(e) = a.next_entry::<String, Json>()? {
                    v.push(e);
                }
                Ok(Json::Obj(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// What a JSON value is read as, by us and by Go: a struct (image-spec's
/// `specs-go/v1`), or anything else ([`Shape::Any`]: maps such as annotations
/// and labels, strings, numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    Manifest,
    Index,
    Descriptor,
    Platform,
    Config,
    ContainerConfig,
    RootFs,
    History,
    Any,
}

/// A field of a struct: its key, what it holds, and whether it is an array of that.
type Field = (&'static str, Shape, bool);

impl Shape {
    fn fields(self) -> &'static [Field] {
        use Shape::*;
        const A: Shape = Any;
        match self {
            Manifest => &[
                ("schemaVersion", A, false),
                ("mediaType", A, false),
                ("artifactType", A, false),
                ("config", Descriptor, false),
                ("layers", Descriptor, true),
                ("subject", Descriptor, false),
                ("annotations", A, false),
            ],
            Index => &[
                ("schemaVersion", A, false),
                ("mediaType", A, false),
                ("artifactType", A, false),
                ("manifests", Descriptor, true),
                ("subject", Descriptor, false),
                ("annotations", A, false),
            ],
            Descriptor => &[
                ("mediaType", A, false),
                ("digest", A, false),
                ("size", A, false),
                ("urls", A, false),
                ("annotations", A, false),
                ("data", A, false),
                ("platform", Platform, false),
                ("artifactType", A, false),
            ],
            Platform => &[
                ("architecture", A, false),
                ("os", A, false),
                ("os.version", A, false),
                ("os.features", A, false),
                ("variant", A, false),
                ("features", A, false),
            ],
            Config => &[
                ("created", A, false),
                ("author", A, false),
                ("architecture", A, false),
                ("os", A, false),
                ("os.version", A, false),
                ("os.features", A, false),
                ("variant", A, false),
                ("config", ContainerConfig, false),
                ("rootfs", RootFs, false),
                ("history", History, true),
            ],
            ContainerConfig => &[
                ("User", A, false),
                ("ExposedPorts", A, false),
                ("Env", A, false),
                ("Entrypoint", A, false),
                ("Cmd", A, false),
                ("Volumes", A, false),
                ("WorkingDir", A, false),
                ("Labels", A, false),
                ("StopSignal", A, false),
                ("ArgsEscaped", A, false),
            ],
            RootFs => &[("type", A, false), ("diff_ids", A, false)],
            History => &[
                ("created", A, false),
                ("created_by", A, false),
                ("author", A, false),
                ("comment", A, false),
                ("empty_layer", A, false),
            ],
            Any => &[],
        }
    }

    /// Keys of the other kinds of document that make one ambiguous:
    /// containers/image's `validateUnambiguousManifestFormat` refuses them.
    fn foreign(self) -> &'static [&'static str] {
        match self {
            Shape::Manifest => &["manifests", "fsLayers", "history"],
            Shape::Index => &["config", "layers", "fsLayers", "history"],
            _ => &[],
        }
    }
}

/// Go's case folding of a key (encoding/json's `foldName`: upper of lower, rune
/// by rune), so that keys Go would match to one field fold alike. The four
/// runes outside ASCII that fold into it are Go's too (K, ſ, İ, ı).
pub(super) fn go_fold(key: &str) -> String {
    fn single(mut it: impl Iterator<Item = char>, c: char) -> char {
        match (it.next(), it.next()) {
            (Some(x), None) => x,
            _ => c,
        }
    }
    key.chars()
        .map(|c| match c {
            '\u{212a}' => 'K',
            '\u{17f}' => 'S',
            '\u{130}' | '\u{131}' => 'I',
            c if c.is_ascii() => c.to_ascii_uppercase(),
            c => {
                let lower = single(c.to_lowercase(), c);
                single(lower.to_uppercase(), lower)
            }
        })
        .collect()
}

/// Refuse what serde and Go could read differently (see [`super::parse`]).
pub(super) fn strict(v: &Json, shape: Shape, at: &str) -> Result<(), String> {
    let entries = match (v, shape) {
        // A scalar where a struct belongs fails both typed parses alike (null:
        // neither has one).
        (Json::Scalar, _) => return Ok(()),
        (Json::Arr(items), Shape::Any) => {
            return items
                .iter()
                .enumerate()
                .try_for_each(|(i, e)| strict(e, Shape::Any, &format!("{at}[{i}]")));
        }
        // serde would read an array into a struct by position; Go refuses it.
        (Json::Arr(_), _) => return Err(format!("{at} is an array, not an object")),
        (Json::Obj(entries), _) => entries,
    };
    let structure = shape != Shape::Any;
    let mut seen: Vec<(String, &str)> = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        // A map's keys are exact in Go too; a struct's fold.
        let folded = if structure { go_fold(key) } else { key.clone() };
        if let Some((_, first)) = seen.iter().find(|(f, _)| *f == folded) {
            return Err(if *first == key.as_str() {
                format!("{at} has the key {key:?} twice")
            } else {
                format!("{at} has the keys {first:?} and {key:?}, one key to a Go reader")
            });
        }
        seen.push((folded.clone(), key));
        if shape.foreign().iter().any(|f| go_fold(f) == folded) {
            return Err(format!(
                "{at} has {key:?}: it is both an image manifest and an index, or a \
                 schema 1 manifest (CVE-2021-41190)"
            ));
        }
        let where_ = format!("{at}.{key}");
        match shape.fields().iter().find(|(f, ..)| go_fold(f) == folded) {
            None => strict(value, Shape::Any, &where_)?,
            Some((name, ..)) if *name != key.as_str() => {
                return Err(format!(
                    "{at} has the key {key:?}, which a Go reader takes for {name:?}"
                ));
            }
            Some((_, child, false)) => strict(value, *child, &where_)?,
            Some((_, child, true)) => match value {
                Json::Arr(items) => {
                    for (i, e) in items.iter().enumerate() {
                        strict(e, *child, &format!("{where_}[{i}]"))?;
                    }
                }
                Json::Obj(_) => return Err(format!("{where_} is an object, not an array")),
                Json::Scalar => {}
            },
        }
    }
    Ok(())
}
