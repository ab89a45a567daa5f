//! The guest image carries cyclictest (rt-tests) with its libraries: the
//! manifest lists them, the initramfs holds them, and the image's own
//! cyclictest runs with the image's own loader and libraries. Building an
//! image fetches Debian packages: `#[ignore = "needs network/apt: ..."]`,
//! run with `cargo test -- --include-ignored` by `tools/test`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

mod common;
use common::{require_tool, Scratch};

#[test]
#[ignore = "needs network/apt: builds a guest image from Debian packages (linux-image-amd64, busybox-static, rt-tests, libnuma1)"]
fn the_image_carries_cyclictest_and_its_libraries() {
    for (tool, package) in [
        ("apt-get", "apt"),
        ("dpkg-deb", "dpkg"),
        ("objcopy", "binutils"),
    ] {
        require_tool(tool, package);
    }
    let s = Scratch::new("vmimage-tools");
    let out = s.0.join("image");
    let mut o = vmimage::ImageOptions::new(&out, std::env::current_exe().unwrap());
    o.cache_dir = Some(s.0.join("debs"));
    o.quiet = true;
    let img = vmimage::build(&o).unwrap();
    let m = vmimage::read_manifest(&out).unwrap();

    let names: Vec<&str> = m.packages.iter().map(|p| p.name.as_str()).collect();
    assert!(
        names.contains(&"rt-tests") && names.contains(&"libnuma1"),
        "{names:?}"
    );
    let t = m
        .tools
        .iter()
        .find(|t| t.path == vmimage::tools::CYCLICTEST)
        .expect("the manifest lists cyclictest");
    assert_eq!(t.package, "rt-tests");
    let libs: Vec<&str> = t.libraries.iter().map(|l| l.name.as_str()).collect();
    for want in ["libnuma.so.1", "libc.so.6", "ld-linux-x86-64.so.2"] {
        assert!(libs.iter().any(|l| l.ends_with(want)), "{want} in {libs:?}");
    }

    // The initramfs holds them, byte for byte as the manifest says.
    let entries = vmimage::read_initramfs(&img.initramfs).unwrap();
    let get = |n: &str| {
        entries
            .iter()
            .find(|e| e.name == n.trim_start_matches('/'))
            .unwrap_or_else(|| panic!("{n} not in the initramfs"))
    };
    let sha = |d: &[u8]| {
        use sha2::Digest;
        sha2::Sha256::digest(d)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let bin = get(&t.path);
    assert!(bin.is_file() && bin.mode & 0o111 != 0);
    assert_eq!(sha(&bin.data), t.sha256);
    for l in &t.libraries {
        assert_eq!(sha(&get(&l.name).data), l.sha256, "{}", l.name);
    }

    // The image's cyclictest runs with the image's loader and libraries
    // (nothing of the host's): ten samples, a -h 5000 histogram.
    let root = s.0.join("root");
    for e in entries.iter().filter(|e| e.is_file()) {
        let p = root.join(&e.name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, &e.data).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(e.mode & 0o7777)).unwrap();
    }
    let lib_dirs: Vec<String> = libs
        .iter()
        .filter_map(|l| Path::new(l).parent())
        .map(|d| {
            root.join(d.strip_prefix("/").unwrap())
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let loader = libs.iter().find(|l| l.contains("ld-linux")).unwrap();
    let run = Command::new(root.join(loader.trim_start_matches('/')))
        .arg("--library-path")
        .arg(lib_dirs.join(":"))
        .arg(root.join(t.path.trim_start_matches('/')))
        .args(["-q", "-l", "10", "-h", "5000"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && text.contains("# Histogram\n000000 "),
        "{}\n{}",
        &text[..text.len().min(300)],
        String::from_utf8_lossy(&run.stderr)
    );
}
