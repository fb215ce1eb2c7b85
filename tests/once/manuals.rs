//! The command line as README, `--help`, the man pages and the completions
//! describe it, held against the real binary's parser; and the options whose
//! parsing README promises (a table of command lines).

use std::collections::BTreeSet;
use std::process::{Command, Output};

use crate::util::{config_root, hostpull, scratch};

/// `hostpull ARGS` to completion, below warnings.
fn output(args: &[&str]) -> Output {
    hostpull(args).env("RUST_LOG", "warn").output().unwrap()
}

fn stdout_of(args: &[&str]) -> String {
    let out = output(args);
    assert!(out.status.success(), "hostpull {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Every `--long` word of `text`, `--registries.d` included.
fn longs(text: &str) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    for (i, _) in text.match_indices("--") {
        let name: String = text[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
            .collect();
        let name = name.trim_end_matches('.');
        let after_word = i == 0 || !text[..i].ends_with(|c: char| c.is_alphanumeric());
        if after_word && name.starts_with(|c: char| c.is_ascii_lowercase()) {
            set.insert(format!("--{name}"));
        }
    }
    set
}

/// The verbs `hostpull --help` lists, but `help`.
fn verbs() -> Vec<String> {
    let help = stdout_of(&["--help"]);
    let (_, rest) = help.split_once("Commands:\n").unwrap();
    (rest.lines())
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|v| *v != "help")
        .map(str::to_owned)
        .collect()
}

/// The options `hostpull VERB --help` lists in its Options section (the parser's
/// own list), but --help and --version, which every clap command has.
fn options_of(verb: &str) -> BTreeSet<String> {
    let help = stdout_of(&[verb, "--help"]);
    let (_, section) = help.split_once("Options:\n").unwrap();
    let mut set = BTreeSet::new();
    // An option's line: `  -h, --help` or `      --dest <DEST>`; its text is
    // indented further, or follows on the same line after two spaces.
    let indent = |l: &str| l.len() - l.trim_start().len();
    for line in (section.lines()).filter(|l| indent(l) <= 6 && l.trim_start().starts_with('-')) {
        let head = line.trim_start().split("  ").next().unwrap();
        set.extend(longs(head));
    }
    set.remove("--help");
    set.remove("--version");
    set
}

/// README's Usage block names every verb and every option the parser has, and
/// nothing else: a new option, or one README shows that the parser lost, fails.
#[test]
fn manuals_readme_synopsis_is_the_parser() {
    let readme = include_str!("../../README.md");
    let (_, usage) = readme.split_once("## Usage\n\n```\n").unwrap();
    let (synopsis, _) = usage.split_once("```").unwrap();
    let readme_verbs: BTreeSet<&str> = (synopsis.lines())
        .filter_map(|l| l.strip_prefix("hostpull "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let verbs = verbs();
    assert_eq!(readme_verbs, verbs.iter().map(String::as_str).collect());
    let parser: BTreeSet<String> = verbs.iter().flat_map(|v| options_of(v)).collect();
    let readme_options = longs(synopsis);
    let missing: Vec<_> = parser.difference(&readme_options).collect();
    let extra: Vec<_> = readme_options.difference(&parser).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "README's synopsis lacks {missing:?}; the parser has no {extra:?}"
    );
}

/// `--help`, the bash completions and the man pages show the same verbs and
/// options (none hidden from one and offered by another), each verb has its
/// page (hostpull-VERB(1), as hostpull(1) lists it), and the Makefile renders
/// and installs a page per verb.
#[test]
fn manuals_help_completions_and_man_pages_agree() {
    let verbs = verbs();
    let top_help = stdout_of(&["--help"]);
    let completions = stdout_of(&["completions", "bash"]);
    let top_page = man(&stdout_of(&["man"]));
    for verb in &verbs {
        assert!(
            completions.contains(&format!("hostpull,{verb})")),
            "completions lack {verb}"
        );
        assert!(
            top_page.contains(&format!("hostpull-{verb}(1)")),
            "{top_page}"
        );
        let page = man(&stdout_of(&["man", verb]));
        let name = format!("hostpull-{verb} - ");
        assert!(page.contains(&name), "no NAME {name:?} in\n{page}");
        let options = options_of(verb);
        let in_page = longs(&page);
        let missing: Vec<_> = options.difference(&in_page).collect();
        assert!(missing.is_empty(), "man hostpull-{verb} lacks {missing:?}");
    }
    assert!(!top_page.contains("hostpull-help"), "{top_page}");
    let offered: BTreeSet<String> = longs(&completions);
    let shown: BTreeSet<String> = (verbs.iter().flat_map(|v| options_of(v)))
        .chain(["--help", "--version"].map(String::from))
        .collect();
    assert_eq!(offered, shown, "the completions offer what --help shows");
    for hidden_before in ["  man ", "  completions "] {
        assert!(top_help.contains(hidden_before), "{top_help}");
    }
    let makefile = include_str!("../../Makefile");
    let make_verbs = (makefile.lines())
        .find_map(|l| l.strip_prefix("VERBS := "))
        .unwrap();
    assert_eq!(make_verbs.split_whitespace().collect::<Vec<_>>(), verbs);
}

/// `hostpull man VERB` with a verb that has no page: exit 2, naming the verbs.
#[test]
fn manuals_man_of_an_unknown_verb_is_a_usage_error() {
    let out = output(&["man", "pul"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        err.starts_with("error: no man page for \"pul\": the verbs are pull, "),
        "{err}"
    );
}

/// roff rendered as man(1) shows it (man-db, plain text, one long line a
/// paragraph), with the hyphens as typed.
fn man(roff: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("page.1");
    std::fs::write(&file, roff).unwrap();
    let out = Command::new("man")
        .arg("-l")
        .arg(&file)
        .env("MANWIDTH", "1000")
        .env("MANPAGER", "cat")
        .env("LC_ALL", "C")
        .output()
        .expect("man (man-db: tests/rig.sh install brings it)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// A command line, its exit code, and what stderr must and must not say.
struct Case {
    args: &'static [&'static str],
    code: i32,
    says: &'static str,
    never: &'static str,
}

/// The options README's Usage promises to parse strictly, with the real binary.
/// `plan` makes no network call; `--config-root` gives it a policy.json.
#[test]
fn manuals_command_line_table() {
    const IMAGE: &str = "docker://quay.io/a/b:v1";
    let cases = [
        // --tls-verify takes its value after `=` only: the image is the image.
        Case {
            args: &["plan", "--tls-verify", IMAGE],
            code: 0,
            says: "",
            never: "invalid value",
        },
        Case {
            args: &["plan", IMAGE, "--tls-verify=false"],
            code: 0,
            says: "",
            never: "invalid value",
        },
        Case {
            args: &["plan", IMAGE, "--tls-verify", "false"],
            code: 2,
            says: "unexpected argument 'false'",
            never: "",
        },
        // A negative number is a bad value, not an option to pass after `--`.
        Case {
            args: &["plan", IMAGE, "--timeout", "-1"],
            code: 2,
            says: "error: invalid value '-1' for '--timeout <SECS>'",
            never: "-- -1",
        },
        Case {
            args: &["plan", IMAGE, "--stall-timeout", "-1"],
            code: 2,
            says: "error: invalid value '-1' for '--stall-timeout <SECS>'",
            never: "-- -1",
        },
        Case {
            args: &["plan", IMAGE, "--tasks-max", "-1"],
            code: 2,
            says: "error: invalid value '-1' for '--tasks-max <TASKS_MAX>'",
            never: "-- -1",
        },
        Case {
            args: &["plan", IMAGE, "--io-weight", "-5"],
            code: 2,
            says: "error: invalid value '-5' for '--io-weight <IO_WEIGHT>'",
            never: "-- -5",
        },
        // rebase: --layout and --dest name the same thing; both is a mistake.
        Case {
            args: &["rebase", IMAGE, "--layout", "/x", "--dest", "oci:/y"],
            code: 2,
            says: "error: the argument '--layout <DIR>' cannot be used with '--dest <DEST>'",
            never: "",
        },
    ];
    let dir = scratch();
    let root = config_root(dir.path());
    let root = format!("--config-root={}", root.display());
    for case in cases {
        let mut args = case.args.to_vec();
        args.extend(["--sandbox", "none", &root]);
        let out = output(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(case.code), "{args:?}: {err}");
        assert!(err.contains(case.says), "{args:?}: {err}");
        assert!(
            case.never.is_empty() || !err.contains(case.never),
            "{args:?}: {err}"
        );
        if case.code == 0 {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("quay.io/a/b"), "{args:?}: {text}");
        }
    }
}

/// `rebase --help` (and so hostpull-rebase(1)) offers only what rebase takes:
/// an OCI layout, never `ostree:`, which pull's help offers.
#[test]
fn manuals_rebase_help_offers_no_ostree_dest() {
    let rebase = stdout_of(&["rebase", "--help"]);
    let pull = stdout_of(&["pull", "--help"]);
    let dest_help = |help: &str| {
        let (_, rest) = help
            .split_once("--dest <DEST>\n")
            .expect("--dest in --help");
        rest.split("\n\n").next().unwrap().to_owned()
    };
    assert!(dest_help(&pull).contains("ostree:REPO"), "{pull}");
    let rebase_dest = dest_help(&rebase);
    assert!(rebase_dest.contains("oci:DIR"), "{rebase}");
    assert!(!rebase_dest.contains("ostree:"), "{rebase}");
}
