//! The data disk: reproducible bytes, an ext4 filesystem with the fixed UUID,
//! and clear refusals of sizes mkfs cannot use. Making one needs mkfs.ext4
//! and e2fsck (e2fsprogs), not root: that test is `#[ignore = "needs
//! mkfs.ext4: ..."]`, run with `cargo test -- --include-ignored` by
//! `tools/test` (which installs e2fsprogs when missing), and fails there when
//! they are missing.

use std::process::Command;

mod common;
use common::{require_tool, Scratch};

#[test]
#[ignore = "needs mkfs.ext4: makes ext4 images (e2fsprogs)"]
fn data_disks_of_one_size_are_identical_ext4_images() {
    require_tool("mkfs.ext4", "e2fsprogs");
    require_tool("e2fsck", "e2fsprogs");
    let s = Scratch::new("vmimage-disk");
    let a = s.0.join("a.img");
    let b = s.0.join("b.img");
    vmimage::make_data_disk(&a, 32 << 20).unwrap();
    // Made over an existing file, which is replaced.
    std::fs::write(&b, b"old contents").unwrap();
    vmimage::make_data_disk(&b, 32 << 20).unwrap();
    assert_eq!(std::fs::metadata(&a).unwrap().len(), 32 << 20);
    let (da, db) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert!(da == db, "two data disks of one size differ");
    // The ext4 superblock (at 1024): magic 0xEF53 at 0x38, UUID at 0x68.
    let sb = &da[1024..2048];
    assert_eq!(&sb[0x38..0x3a], &[0x53, 0xef], "ext4 magic");
    let uuid: String = sb[0x68..0x78].iter().map(|x| format!("{x:02x}")).collect();
    assert_eq!(uuid, "5d1b6c4e7a2f4c1e9b3a2f6e8d0c1a47");
    // e2fsck agrees it is clean.
    let out = Command::new("e2fsck")
        .args(["-n", "-f"])
        .arg(&a)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "e2fsck: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bad_sizes_and_places_are_refused() {
    let s = Scratch::new("vmimage-disk-bad");
    for bytes in [0, 1 << 20, (16 << 20) + 1] {
        let e = vmimage::make_data_disk(&s.0.join("x.img"), bytes).unwrap_err();
        assert!(matches!(e, vmimage::Error::Usage(_)), "{bytes}: {e}");
        assert!(e.to_string().contains("data disk"), "{e}");
    }
    assert!(!s.0.join("x.img").exists());
    let e = vmimage::make_data_disk(&s.0, 16 << 20).unwrap_err();
    assert!(e.to_string().contains("directory"), "{e}");
    let e = vmimage::make_data_disk(&s.0.join("no/such/dir/x.img"), 16 << 20).unwrap_err();
    assert!(matches!(e, vmimage::Error::Run(_)), "{e}");
}
