//! Embeds the git commit tandem is built from (`TANDEM_GIT_COMMIT`), for the
//! provenance in `results.json`: `git rev-parse HEAD`, or the variable of that name
//! when set (a packager building from a tarball), or `unknown` outside a git checkout.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=TANDEM_GIT_COMMIT");
    let commit = std::env::var("TANDEM_GIT_COMMIT")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| git(&["rev-parse", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    // Build again when HEAD moves: HEAD itself (a branch switch), the branch refs
    // (a commit) and packed-refs, wherever this checkout (or worktree) keeps them.
    for path in ["HEAD", "refs/heads", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rustc-env=TANDEM_GIT_COMMIT={commit}");
}
