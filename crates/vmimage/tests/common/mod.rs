//! Helpers of the vmimage tests.

use std::path::PathBuf;

/// A scratch directory under the target directory, removed on drop.
pub struct Scratch(pub PathBuf);
impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fails the test unless `tool` is an executable in one of PATH's
/// directories (the test runs it by name).
#[track_caller]
pub fn require_tool(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()));
    assert!(
        found,
        "this test needs {tool} on PATH (apt-get install {package}). It is #[ignore]d for \
         that reason, and was run without it (--include-ignored); tools/test, run as \
         root, installs what the tests need"
    );
}
