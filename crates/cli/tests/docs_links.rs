//! Every link and every repository path named in tandem's documentation exists.
//!
//! Which files: `README.md`, every `docs/*.md` and every `crates/*/README.md`,
//! found by listing the directories when the test runs (a README added later is
//! checked without touching this file).
//!
//! What is checked, in each file parsed as CommonMark with tables
//! (`pulldown-cmark`):
//! 1. **Links and images** whose destination is relative (no scheme such as
//!    `https:` or `mailto:`): the target, relative to the file's directory, must
//!    exist in the repository. A `#fragment` on a link to a Markdown file (or a
//!    bare `#fragment`, within the same file) must be the anchor of one of its
//!    headings, as GitHub makes them: the heading's text in lower case, letters,
//!    digits, `-` and `_` kept, spaces made `-`, everything else dropped, and
//!    `-1`, `-2`, ... added to repeated anchors.
//! 2. **Inline code spans that name a repository path**: a span made only of
//!    letters, digits and `. _ - /` (so no placeholder like `<cell>`, `*.svg`
//!    or `...`) that starts with one of the repository's top-level
//!    directories ([`TOP_DIRS`], e.g. `crates/sim/src/vm.rs`, `scenarios/`,
//!    `tools/test`) or is one of its top-level files ([`TOP_FILES`]) must exist,
//!    relative to the repository root. In a crate's README, a span starting with
//!    `src/`, `tests/`, `examples/` or `benches/` is a path in that crate and must
//!    exist there. A placeholder that looks like a path (`scenarios/X.toml`)
//!    is checked like one: write it `scenarios/<name>.toml`.
//!
//! Not checked: words inside fenced code blocks (commands, whose arguments are
//! often output paths that a run creates), web addresses, and paths outside the
//! repository (`/proc/...`, `/run/tandem/...`).

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Top-level directories of the repository: a code span starting with one of
/// these followed by `/` is taken for a repository path.
const TOP_DIRS: &[&str] = &[
    "crates",
    "docs",
    "scenarios",
    "tools",
    "apps",
    "reference",
    "dist",
    "fuzz",
    ".ci",
    ".cargo",
];

/// Top-level files a code span may name.
const TOP_FILES: &[&str] = &[
    "README.md",
    "Cargo.toml",
    "Cargo.lock",
    "clippy.toml",
    "rustfmt.toml",
];

/// In a crate's README, spans starting with these are paths in the crate.
const CRATE_DIRS: &[&str] = &["src", "tests", "examples", "benches"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

/// `README.md`, `docs/*.md` and `crates/*/README.md`, relative to `root`.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![PathBuf::from("README.md")];
    let md_in = |dir: &str| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("listing {dir}: {e}"))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        v.sort();
        v
    };
    for p in md_in("docs") {
        if p.extension().is_some_and(|e| e == "md") {
            docs.push(p.strip_prefix(root).expect("under the root").to_path_buf());
        }
    }
    for p in md_in("crates") {
        let readme = p.join("README.md");
        if readme.is_file() {
            docs.push(
                readme
                    .strip_prefix(root)
                    .expect("under the root")
                    .to_path_buf(),
            );
        }
    }
    docs
}

/// GitHub's anchor for a heading's text.
fn anchor(text: &str) -> String {
    text.chars()
        .flat_map(char::to_lowercase)
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn parser(text: &str) -> Parser<'_> {
    Parser::new_ext(text, Options::ENABLE_TABLES)
}

/// The anchors of every heading of a Markdown text, repeats numbered.
fn anchors(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut heading: Option<String> = None;
    for ev in parser(text) {
        match ev {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let a = anchor(&heading.take().unwrap_or_default());
                let n = seen.entry(a.clone()).or_insert(0);
                out.push(if *n == 0 {
                    a.clone()
                } else {
                    format!("{a}-{n}")
                });
                *n += 1;
            }
            _ => {}
        }
    }
    out
}

/// Is this code span a repository path by the rule above? Returns the path
/// relative to the repository root.
fn code_path(span: &str, doc: &Path) -> Option<PathBuf> {
    let plain = !span.is_empty()
        && !span.contains("..")
        && span
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
    if !plain {
        return None;
    }
    let first = span.split('/').next().unwrap_or("");
    let has_slash = span.contains('/');
    if (has_slash && TOP_DIRS.contains(&first)) || TOP_FILES.contains(&span) {
        return Some(PathBuf::from(span));
    }
    let crate_dir = doc.parent().filter(|d| d.starts_with("crates"))?;
    if has_slash && CRATE_DIRS.contains(&first) {
        return Some(crate_dir.join(span));
    }
    None
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// Whether a link destination leaves the repository (a scheme such as
/// `https:`, or an absolute path).
fn external(dest: &str) -> bool {
    let scheme = dest
        .split_once(':')
        .is_some_and(|(s, _)| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphabetic()));
    scheme || dest.starts_with('/')
}

/// Problems in one document: `doc` is its path relative to `root`, `text` its
/// contents. Each problem names the file, the line and what is missing.
fn check(root: &Path, doc: &Path, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let dir = doc.parent().unwrap_or(Path::new(""));
    for (ev, range) in parser(text).into_offset_iter() {
        let at = || format!("{}:{}", doc.display(), line_of(text, range.start));
        match ev {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                if external(&dest_url) {
                    continue;
                }
                let (file, fragment) = match dest_url.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (&*dest_url, None),
                };
                let target = if file.is_empty() {
                    doc.to_path_buf()
                } else {
                    dir.join(file)
                };
                let full = root.join(&target);
                if !file.is_empty() && !full.exists() {
                    problems.push(format!("{}: link to {dest_url}: no such file", at()));
                    continue;
                }
                let Some(fragment) = fragment else { continue };
                if target.extension().is_some_and(|e| e == "md") {
                    // A bare `#fragment` points into this very text.
                    let target_text = if file.is_empty() {
                        text.to_string()
                    } else {
                        std::fs::read_to_string(&full)
                            .unwrap_or_else(|e| panic!("reading {}: {e}", full.display()))
                    };
                    if !anchors(&target_text).iter().any(|a| a == fragment) {
                        problems.push(format!(
                            "{}: link to {dest_url}: {} has no heading #{fragment}",
                            at(),
                            target.display()
                        ));
                    }
                }
            }
            Event::Code(span) => {
                if let Some(p) = code_path(&span, doc) {
                    if !root.join(&p).exists() {
                        problems.push(format!(
                            "{}: `{span}` names {}, which does not exist",
                            at(),
                            p.display()
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    problems
}

#[test]
fn every_link_and_path_in_the_docs_exists() {
    let root = repo_root();
    let docs = documents(&root);
    assert!(
        docs.len() >= 3,
        "found only {docs:?}: README.md, docs/ and the crate READMEs should be there"
    );
    let mut problems = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(root.join(doc))
            .unwrap_or_else(|e| panic!("reading {}: {e}", doc.display()));
        problems.extend(check(&root, doc, &text));
    }
    assert!(
        problems.is_empty(),
        "{} broken links or paths in {} documents:\n{}",
        problems.len(),
        docs.len(),
        problems.join("\n")
    );
}

#[test]
fn a_made_up_path_in_a_code_span_is_reported() {
    let root = repo_root();
    let text = "See `crates/no-such-crate/src/lib.rs` and `crates/cli/Cargo.toml`.\n";
    let problems = check(&root, Path::new("docs/example.md"), text);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("docs/example.md:1: `crates/no-such-crate/src/lib.rs`"),
        "{problems:?}"
    );
}

#[test]
fn a_broken_link_and_a_missing_anchor_are_reported() {
    let root = repo_root();
    let text = "# Title\n\n[gone](no-such-file.md), [ok](../README.md),\n\
                [bad anchor](../README.md#no-such-heading), [here](#title),\n\
                [not here](#nothing), [web](https://example.org/x).\n";
    let problems = check(&root, Path::new("docs/example.md"), text);
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].contains("no-such-file.md: no such file"));
    assert!(problems[1].contains("has no heading #no-such-heading"));
    assert!(problems[2].contains("#nothing"));
    assert!(problems.iter().all(|p| p.starts_with("docs/example.md:3")
        || p.starts_with("docs/example.md:4")
        || p.starts_with("docs/example.md:5")));
}

#[test]
fn crate_paths_placeholders_and_code_blocks_follow_the_rule() {
    let root = repo_root();
    let doc = Path::new("crates/devmodel/README.md");
    // A path in the crate, a placeholder, a glob, an output path, a path
    // outside the repository, and a fenced block: only the first is a path.
    let text = "`src/hdd.rs`, `src/missing.rs`, `scenarios/X.toml`, `startup-<device>.svg`, \
                `crates/*/README.md`, `OUT/vm-logs/`, `/proc/PID/io`\n\n\
                ```sh\ncat crates/none/file\n```\n";
    let problems = check(&root, doc, text);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains("crates/devmodel/src/missing.rs"),
        "{problems:?}"
    );
    // `scenarios/X.toml` is plain and under a top-level directory: it is
    // checked, so a placeholder must not look like a file name.
    assert!(problems[1].contains("scenarios/X.toml"), "{problems:?}");
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    let text = "# The two commands\n## Guest image (`tandem vm image`)\n\
                ## VMs found in a directory (`--vm-dir DIR`, `vm_dir = \"DIR\"`)\n\
                ## Measured\n### Measured\n";
    assert_eq!(
        anchors(text),
        [
            "the-two-commands",
            "guest-image-tandem-vm-image",
            "vms-found-in-a-directory---vm-dir-dir-vm_dir--dir",
            "measured",
            "measured-1",
        ]
    );
}
