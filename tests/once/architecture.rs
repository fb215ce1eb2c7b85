//! The shape of `src/`, checked from its text and, for functions, its syntax
//! tree (syn; HACKING.md says why): no import cycles between modules, no host
//! effects in `plan/`, and no very long file or function; and every file of
//! `tests/` under what its tests depend on (tests/tests.rs). These need no rig.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Lines of code a file may have before its `#[cfg(test)] mod tests`. Past
/// 600 a change is a prompt to review the file for a split by what belongs
/// together (HACKING.md), not to move code until it fits; past this, it fails.
const MAX_FILE_LINES: usize = 800;
/// Lines a function may have, signature and closing brace included.
const MAX_FN_LINES: usize = 80;

/// Every `.rs` file under `src/`, as (module path, code without its tests
/// and comments).
fn sources() -> Vec<(String, String)> {
    files()
        .into_iter()
        .map(|(m, text)| (m, without_comments(&text)))
        .collect()
}

/// Every `.rs` file under `dir`, sorted.
fn rs_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    files.sort();
    files
}

/// Every `.rs` file under `src/`, as (module path, text without its tests).
fn files() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    rs_files(&src)
        .into_iter()
        .filter_map(|p| {
            let rel = p.strip_prefix(&src).unwrap().with_extension("");
            let mut m = rel.to_str().unwrap().replace('/', "::");
            if let Some(parent) = m.strip_suffix("::mod") {
                m = parent.to_owned();
            }
            if m == "lib" || m == "main" {
                return None;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            Some((m, without_tests(&text).to_owned()))
        })
        .collect()
}

/// The text before `#[cfg(test)]` followed by `mod tests`.
fn without_tests(text: &str) -> &str {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with("#[cfg(test)]") && text[at + line.len()..].starts_with("mod tests") {
            return &text[..at];
        }
        at += line.len();
    }
    text
}

/// The code of each line, without `//` comments (doc links are not imports).
/// A `//` inside a string literal cuts the line short, which only hides text.
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules a file names through `crate::` (with `use crate::{a, b::c}`
/// expanded to the first segments) and `super::`.
fn imports(module: &str, text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let parent = module.rsplit_once("::").map(|(p, _)| p);
    for (prefix, base) in [("crate::", None), ("super::", parent)] {
        if prefix == "super::" && base.is_none() {
            continue;
        }
        let mut rest = text;
        while let Some(i) = rest.find(prefix) {
            rest = &rest[i + prefix.len()..];
            let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
                // Top-level names of the group: split at depth 0.
                let mut depth = 0;
                let mut names = Vec::new();
                let mut start = 0;
                for (j, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            names.push(&group[start..j]);
                            break;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            names.push(&group[start..j]);
                            start = j + 1;
                        }
                        _ => {}
                    }
                }
                names
            } else {
                vec![rest]
            };
            for n in names {
                let n = n.trim_start();
                let end = n
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(n.len());
                let first = &n[..end];
                if first.is_empty() || first.starts_with(char::is_uppercase) {
                    continue;
                }
                // `crate::plan::auth` counts as `plan::auth` when that module exists;
                // resolved against the module list by the caller.
                let rest_path = &n[end..];
                let second = rest_path
                    .strip_prefix("::")
                    .map(|r| {
                        let e = r
                            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                            .unwrap_or(r.len());
                        &r[..e]
                    })
                    .filter(|s| !s.is_empty() && !s.starts_with(char::is_uppercase));
                let full = match base {
                    Some(b) => format!("{b}::{first}"),
                    None => first.to_owned(),
                };
                out.insert(match second {
                    Some(s) => format!("{full}::{s}"),
                    None => full,
                });
            }
        }
    }
    out
}

/// The dependency graph between modules at `depth` (1: top-level modules, 2:
/// their submodules too), without self-edges.
fn graph(depth: usize) -> BTreeMap<String, BTreeSet<String>> {
    let files = sources();
    let known: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
    let cut = |m: &str| m.split("::").take(depth).collect::<Vec<_>>().join("::");
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, text) in &files {
        for to in imports(m, text) {
            // The longest known module the path names.
            let mut target = to.clone();
            while !known.contains(&target) {
                match target.rsplit_once("::") {
                    Some((p, _)) => target = p.to_owned(),
                    None => break,
                }
            }
            if !known.contains(&target) {
                continue;
            }
            let (a, b) = (cut(m), cut(&target));
            // A module's own children are its business.
            if a != b && !b.starts_with(&format!("{a}::")) {
                g.entry(a).or_default().insert(b);
            }
        }
    }
    g
}

/// The strongly connected components with more than one module.
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Reachability is enough at this size: a and b are in one cycle when
    // each reaches the other.
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_owned()];
        while let Some(v) = todo.pop() {
            for w in g.get(&v).into_iter().flatten() {
                if seen.insert(w.clone()) {
                    todo.push(w.clone());
                }
            }
        }
        seen
    };
    let nodes: BTreeSet<&String> = g.keys().chain(g.values().flatten()).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for a in &nodes {
        if out.iter().any(|c| c.contains(a)) {
            continue;
        }
        let from_a = reach(a);
        let comp: Vec<String> = nodes
            .iter()
            .filter(|b| *b != a && from_a.contains(**b) && reach(b).contains(*a))
            .map(|b| b.to_string())
            .collect();
        if !comp.is_empty() {
            let mut c = vec![a.to_string()];
            c.extend(comp);
            out.push(c);
        }
    }
    out
}

#[test]
fn architecture_import_cycle_finder_finds_cycles() {
    let g: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
        .iter()
        .fold(BTreeMap::new(), |mut g, (a, b)| {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g
        });
    assert_eq!(cycles(&g), vec![vec!["a", "b", "c"]]);
    let i = imports(
        "fetch",
        "use crate::{plan::{self, auth}, sandbox::Worker};\nuse super::x; crate::signature::check(",
    );
    assert_eq!(
        i.into_iter().collect::<Vec<_>>(),
        ["plan", "sandbox", "signature::check"]
    );
    assert_eq!(without_tests("a\n#[cfg(test)]\nmod tests {}\n"), "a\n");
    assert_eq!(
        without_comments("a // [crate::b]\n/// [crate::c]\nd"),
        "a \n\nd"
    );
}

#[test]
fn architecture_no_import_cycles_between_modules() {
    for depth in [1, 2] {
        let g = graph(depth);
        assert_eq!(
            cycles(&g),
            Vec::<Vec<String>>::new(),
            "depth {depth}: {g:#?}"
        );
    }
}

/// The planner decides; the `Host` it is given reads files, the environment
/// and the clock, and runs plugins.
#[test]
fn architecture_plan_has_no_host_effects() {
    let banned = [
        "std::fs",
        "std::env",
        "env::var",
        "Command",
        "SystemTime::now",
        "Instant::now",
        ".is_file()",
        ".is_dir()",
        ".exists()",
        "read_to_string(",
        "read_dir(",
    ];
    let mut found = Vec::new();
    for (m, text) in sources() {
        if m != "plan" && !m.starts_with("plan::") {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            for b in banned {
                if line.contains(b) {
                    found.push(format!("src/{m}:{}: {b}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn architecture_no_long_files_or_functions() {
    let mut long = Vec::new();
    for (m, text) in files() {
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES {
            long.push(format!("{m}: {lines} lines"));
        }
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{m}: {e}"));
        let mut fns = LongFns {
            module: &m,
            long: &mut long,
        };
        syn::visit::visit_file(&mut fns, &file);
    }
    assert!(long.is_empty(), "{}", long.join("\n"));
}

/// Every function, parsed by syn (free, in an impl or a trait, nested, of any
/// visibility) longer than MAX_FN_LINES, as "MODULE:LINE NAME: N lines".
struct LongFns<'a> {
    module: &'a str,
    long: &'a mut Vec<String>,
}

impl LongFns<'_> {
    fn check(&mut self, sig: &syn::Signature, body: &syn::Block) {
        let start = sig.fn_token.span.start().line;
        let lines = body.brace_token.span.close().end().line - start + 1;
        if lines > MAX_FN_LINES {
            let (m, name) = (self.module, &sig.ident);
            self.long.push(format!("{m}:{start} {name}: {lines} lines"));
        }
    }
}

impl<'ast> syn::visit::Visit<'ast> for LongFns<'_> {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.check(&f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.check(&f.sig, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }
    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(body) = &f.default {
            self.check(&f.sig, body);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

#[test]
fn architecture_long_function_finder_sees_every_kind() {
    // One line over the limit: MAX_FN_LINES - 1 body lines, the signature and
    // the closing brace; `fits` is exactly at the limit.
    let over = "    let _ = 0;\n".repeat(MAX_FN_LINES - 1);
    let at = "    let _ = 0;\n".repeat(MAX_FN_LINES - 2);
    let text = format!(
        "pub(super) fn free() {{\n{over}}}\n\
         impl X {{\npub(crate) async fn method() {{\n{over}}}\n}}\n\
         trait T {{\nfn provided() {{\n{over}}}\n}}\n\
         fn outer() {{\nfn nested() {{\n{over}}}\n}}\n\
         pub(in crate::a) fn fits() {{\n{at}}}\n"
    );
    let file = syn::parse_file(&text).unwrap();
    let mut long = Vec::new();
    let mut fns = LongFns {
        module: "m",
        long: &mut long,
    };
    syn::visit::visit_file(&mut fns, &file);
    let names: Vec<&str> = long
        .iter()
        .map(|l| l.split(' ').nth(1).unwrap().trim_end_matches(':'))
        .collect();
    assert_eq!(
        names,
        ["free", "method", "provided", "outer", "nested"],
        "{long:?}"
    );
}

/// What an integration test may depend on, as tests/tests.rs groups the files of
/// tests/ (its doc says what each means), and the systemd passes of tests/run.sh
/// select them. `util` is the harness.
const TEST_GROUPS: [&str; 3] = ["once", "worker", "systemd"];

/// Every file of tests/ is compiled, under one of [`TEST_GROUPS`]: a new file
/// cannot escape the passes by being declared at the top, nor by not being
/// declared at all; and tests/run.sh's systemd passes select the groups a
/// worker can change by those names.
#[test]
fn every_test_file_is_under_what_it_depends_on() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tests = root.join("tests");
    let text = std::fs::read_to_string(tests.join("tests.rs")).unwrap();
    let file = syn::parse_file(&text).unwrap();
    let mut declared = BTreeSet::from([tests.join("tests.rs")]);
    let mut top = BTreeSet::new();
    for item in &file.items {
        let syn::Item::Mod(m) = item else { continue };
        let name = m.ident.to_string();
        top.insert(name.clone());
        let Some((_, inner)) = &m.content else {
            declared.insert(tests.join(format!("{name}.rs")));
            continue;
        };
        for item in inner {
            if let syn::Item::Mod(sub) = item {
                assert!(sub.content.is_none(), "{name}::{}: inline", sub.ident);
                declared.insert(tests.join(&name).join(format!("{}.rs", sub.ident)));
            }
        }
    }
    let mut want: BTreeSet<String> = TEST_GROUPS.iter().map(|g| g.to_string()).collect();
    want.insert("util".into());
    assert_eq!(top, want, "tests/tests.rs: the top-level modules");
    let present: BTreeSet<PathBuf> = rs_files(&tests).into_iter().collect();
    let undeclared: Vec<_> = present.difference(&declared).collect();
    assert!(undeclared.is_empty(), "not compiled: {undeclared:?}");
    let run = std::fs::read_to_string(tests.join("run.sh")).unwrap();
    let worker_pass = "test(/^(worker|systemd)::/)";
    assert!(
        run.contains(worker_pass),
        "tests/run.sh has no {worker_pass}"
    );
}
