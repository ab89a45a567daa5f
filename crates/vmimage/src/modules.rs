//! Kernel modules for the guest: which files, in which order.
//!
//! A kernel package's `.deb` has no `modules.dep` (depmod runs when the package
//! is installed), so dependencies come from each module's own `.modinfo`
//! section (`depends=a,b`), read from the ELF file. Modules the kernel has
//! built in (`modules.builtin`) are left out. The load order puts every
//! module after its dependencies, ties broken by name, so that the same set
//! always gives the same order.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The modules the guest needs: the virtio transport and devices, BFQ and
/// Kyber, ext4. Debian's 6.1 kernel has mq-deadline built in
/// (`CONFIG_MQ_IOSCHED_DEADLINE=y` in its `boot/config-*`) and BFQ and Kyber
/// as modules (`CONFIG_IOSCHED_BFQ=m`, `CONFIG_MQ_IOSCHED_KYBER=m`:
/// `kernel/block/bfq.ko`, `kernel/block/kyber-iosched.ko`); a scheduler
/// offers itself on every disk once its module is loaded, so the guest's
/// `/sys/block/vda/queue/scheduler` lists all four (the two-tier study's
/// guest schedulers, `scenarios/two-tier-kvm.toml`).
/// `crc32c_generic` is here because ext4 and jbd2 ask for the `crypto-crc32c`
/// algorithm only as a soft dependency (`softdep=pre:`), an alias that
/// nothing in the `.deb` maps to a file without depmod; metadata checksums
/// (on by default in mkfs.ext4) cannot be verified without it.
pub const REQUIRED: &[&str] = &[
    "virtio",
    "virtio_ring",
    "virtio_pci_modern_dev",
    "virtio_pci_legacy_dev",
    "virtio_pci",
    "virtio_blk",
    "virtio_console",
    "bfq",
    "kyber_iosched",
    "crc32c_generic",
    "ext4",
];

/// vsock over virtio: a second channel to the host. The guest boots without it
/// (the host may have no vhost-vsock device), so failures to find or load
/// these are not errors.
pub const OPTIONAL: &[&str] = &[
    "vsock",
    "vmw_vsock_virtio_transport_common",
    "vmw_vsock_virtio_transport",
];

/// Module names use `-` and `_` interchangeably; the kernel treats them alike.
pub fn normalize(name: &str) -> String {
    name.trim().replace('-', "_")
}

/// The `.modinfo` section of a module's ELF image, as key/value pairs in file
/// order (keys repeat, e.g. `alias`).
pub fn modinfo(elf: &[u8]) -> Result<Vec<(String, String)>, String> {
    let sec = elf_section(elf, ".modinfo")?
        .ok_or_else(|| "no .modinfo section (not a kernel module?)".to_string())?;
    Ok(sec
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .filter_map(|s| {
            let s = String::from_utf8_lossy(s);
            s.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect())
}

/// The `depends=` list of a module's modinfo (empty when it depends on nothing).
pub fn depends(info: &[(String, String)]) -> Vec<String> {
    info.iter()
        .filter(|(k, _)| k == "depends")
        .flat_map(|(_, v)| v.split(','))
        .map(normalize)
        .filter(|s| !s.is_empty())
        .collect()
}

/// The first value of `key`.
pub fn value<'a>(info: &'a [(String, String)], key: &str) -> Option<&'a str> {
    info.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

fn rd<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N], String> {
    b.get(at..at + N)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| format!("ELF truncated at offset {at}"))
}
fn u16_at(b: &[u8], at: usize) -> Result<usize, String> {
    Ok(u16::from_le_bytes(rd(b, at)?) as usize)
}
fn u32_at(b: &[u8], at: usize) -> Result<usize, String> {
    Ok(u32::from_le_bytes(rd(b, at)?) as usize)
}
fn u64_at(b: &[u8], at: usize) -> Result<usize, String> {
    usize::try_from(u64::from_le_bytes(rd(b, at)?)).map_err(|_| "ELF offset too large".into())
}

/// The contents of a named section of a 64-bit little-endian ELF file (the
/// only kind an amd64 kernel loads). Every offset is bounds-checked.
fn elf_section<'a>(b: &'a [u8], name: &str) -> Result<Option<&'a [u8]>, String> {
    if b.len() < 64 || &b[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if b[4] != 2 || b[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let shoff = u64_at(b, 0x28)?;
    let shentsize = u16_at(b, 0x3a)?;
    let shnum = u16_at(b, 0x3c)?;
    let shstrndx = u16_at(b, 0x3e)?;
    if shentsize < 64 || shstrndx >= shnum {
        return Err("bad ELF section header table".into());
    }
    let table_end = shnum
        .checked_mul(shentsize)
        .and_then(|n| n.checked_add(shoff));
    if table_end.is_none_or(|end| end > b.len()) {
        return Err("ELF section header table lies outside the file".into());
    }
    let section = |i: usize| -> Result<(usize, &'a [u8]), String> {
        let h = shoff
            .checked_add(i.checked_mul(shentsize).ok_or("ELF overflow")?)
            .ok_or("ELF overflow")?;
        let name_off = u32_at(b, h)?;
        let off = u64_at(b, h + 24)?;
        let size = u64_at(b, h + 32)?;
        let data = off
            .checked_add(size)
            .and_then(|end| b.get(off..end))
            .ok_or_else(|| format!("ELF section {i} lies outside the file"))?;
        Ok((name_off, data))
    };
    let (_, strtab) = section(shstrndx)?;
    for i in 0..shnum {
        let (name_off, data) = section(i)?;
        let Some(rest) = strtab.get(name_off..) else {
            continue;
        };
        let end = rest.iter().position(|c| *c == 0).unwrap_or(rest.len());
        if &rest[..end] == name.as_bytes() {
            return Ok(Some(data));
        }
    }
    Ok(None)
}

/// Load order for `roots` and everything they depend on: each module after
/// its dependencies, ties broken by name (Kahn's algorithm over a sorted set),
/// so the order does not depend on the order of `roots` or of the maps.
/// `deps` must hold every module reachable from `roots`.
pub fn load_order(
    deps: &BTreeMap<String, BTreeSet<String>>,
    roots: &[String],
) -> Result<Vec<String>, String> {
    // The closure.
    let mut todo: Vec<&str> = roots.iter().map(|s| s.as_str()).collect();
    let mut set: BTreeSet<&str> = BTreeSet::new();
    while let Some(m) = todo.pop() {
        if !set.insert(m) {
            continue;
        }
        let d = deps
            .get(m)
            .ok_or_else(|| format!("module {m}: its dependencies are unknown"))?;
        todo.extend(d.iter().map(|s| s.as_str()));
    }
    let mut waiting: BTreeMap<&str, usize> = set
        .iter()
        .map(|m| {
            (
                *m,
                deps[*m].iter().filter(|d| set.contains(d.as_str())).count(),
            )
        })
        .collect();
    let mut ready: BTreeSet<&str> = waiting
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(m, _)| *m)
        .collect();
    let mut order = Vec::with_capacity(set.len());
    while let Some(m) = ready.pop_first() {
        waiting.remove(m);
        order.push(m.to_string());
        for (other, n) in waiting.iter_mut() {
            if deps[*other].contains(m) {
                *n -= 1;
                if *n == 0 {
                    ready.insert(other);
                }
            }
        }
    }
    if !waiting.is_empty() {
        return Err(format!(
            "modules depend on each other in a cycle: {}",
            waiting.keys().copied().collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(order)
}

/// The module files of one kernel: `lib/modules/<version>` of the extracted package.
pub struct Tree {
    /// `lib/modules/<version>` on disk.
    pub root: PathBuf,
    pub version: String,
    /// Normalised module name -> path relative to `root` (as found, maybe compressed).
    pub files: BTreeMap<String, PathBuf>,
    /// Normalised names of the modules built into the kernel.
    pub builtin: BTreeSet<String>,
}

/// A module chosen for the guest.
#[derive(Debug, Clone)]
pub struct Chosen {
    pub name: String,
    /// Path relative to `lib/modules/<version>`, always ending in `.ko`.
    pub path: String,
    pub optional: bool,
    /// The uncompressed module.
    pub data: Vec<u8>,
}

/// The plan: modules in load order (the required ones first), and the
/// optional ones left out with the reason.
#[derive(Debug)]
pub struct Plan {
    pub modules: Vec<Chosen>,
    pub left_out: Vec<(String, String)>,
}

fn module_name(file: &str) -> Option<(&str, Option<&str>)> {
    for (suffix, comp) in [
        (".ko", None),
        (".ko.xz", Some("xz")),
        (".ko.zst", Some("zstd")),
        (".ko.gz", Some("gzip")),
    ] {
        if let Some(stem) = file.strip_suffix(suffix) {
            return Some((stem, comp));
        }
    }
    None
}

impl Tree {
    /// Index `root` (= `lib/modules/<version>`).
    pub fn scan(root: &Path, version: &str) -> Result<Tree, String> {
        let mut files = BTreeMap::new();
        let mut stack = vec![PathBuf::from("kernel")];
        while let Some(rel) = stack.pop() {
            let dir = root.join(&rel);
            let rd = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            for e in rd {
                let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
                let ft = e
                    .file_type()
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
                let name = e.file_name().to_string_lossy().into_owned();
                if ft.is_dir() {
                    stack.push(rel.join(&name));
                } else if let Some((stem, _)) = module_name(&name) {
                    if let Some(old) = files.insert(normalize(stem), rel.join(&name)) {
                        return Err(format!(
                            "two files for module {stem}: {} and {}",
                            old.display(),
                            rel.join(&name).display()
                        ));
                    }
                }
            }
        }
        if files.is_empty() {
            return Err(format!("{}: no kernel modules", root.display()));
        }
        let builtin_file = root.join("modules.builtin");
        let builtin = match std::fs::read_to_string(&builtin_file) {
            Ok(text) => parse_builtin(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
            Err(e) => return Err(format!("{}: {e}", builtin_file.display())),
        };
        Ok(Tree {
            root: root.to_path_buf(),
            version: version.to_string(),
            files,
            builtin,
        })
    }

    /// Read a module (decompressing `.ko.xz`/`.ko.zst`/`.ko.gz` with the
    /// matching tool: the guest's busybox insmod loads plain ELF only).
    fn read(&self, rel: &Path) -> Result<Vec<u8>, String> {
        let path = self.root.join(rel);
        let file = rel.file_name().unwrap_or_default().to_string_lossy();
        let comp = module_name(&file).and_then(|(_, c)| c);
        match comp {
            None => std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display())),
            Some(tool) => {
                let out = Command::new(tool)
                    .arg("-dc")
                    .arg(&path)
                    .output()
                    .map_err(|e| {
                        format!(
                            "{} is compressed and {tool} could not be run to decompress it ({e}); install it (Debian: {})",
                            path.display(),
                            match tool { "xz" => "xz-utils", "zstd" => "zstd", _ => "gzip" }
                        )
                    })?;
                if !out.status.success() {
                    return Err(format!(
                        "{tool} -dc {}: {}",
                        path.display(),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                Ok(out.stdout)
            }
        }
    }

    /// Choose the modules: `required` and `optional` with their dependencies,
    /// minus built-in ones. A missing required module is an error; a missing
    /// optional one (or one of its dependencies) leaves that one out.
    pub fn plan(&self, required: &[&str], optional: &[&str]) -> Result<Plan, String> {
        let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut data: BTreeMap<String, (String, Vec<u8>)> = BTreeMap::new();
        // Reads a module and the modules it needs, into `deps`/`data`.
        let mut visit = |root: &str| -> Result<(), String> {
            let mut todo = vec![normalize(root)];
            while let Some(m) = todo.pop() {
                if deps.contains_key(&m) || self.builtin.contains(&m) {
                    continue;
                }
                let rel = self
                    .files
                    .get(&m)
                    .ok_or_else(|| format!("module {m} is neither in the package nor built in"))?;
                let bytes = self.read(rel)?;
                let info = modinfo(&bytes).map_err(|e| format!("{}: {e}", rel.display()))?;
                if let Some(vm) = value(&info, "vermagic") {
                    if vm.split_whitespace().next() != Some(self.version.as_str()) {
                        return Err(format!(
                            "{}: built for kernel {:?}, not {}",
                            rel.display(),
                            vm,
                            self.version
                        ));
                    }
                }
                let d: BTreeSet<String> = depends(&info)
                    .into_iter()
                    .filter(|d| !self.builtin.contains(d))
                    .collect();
                todo.extend(d.iter().cloned());
                let mut path = rel.to_string_lossy().into_owned();
                if let Some(i) = path.rfind(".ko") {
                    path.truncate(i + 3);
                }
                deps.insert(m.clone(), d);
                data.insert(m, (path, bytes));
            }
            Ok(())
        };
        let mut req_roots = Vec::new();
        for r in required {
            visit(r).map_err(|e| format!("required module {r}: {e}"))?;
            if !self.builtin.contains(&normalize(r)) {
                req_roots.push(normalize(r));
            }
        }
        let mut opt_roots = Vec::new();
        let mut left_out = Vec::new();
        for o in optional {
            match visit(o) {
                Ok(()) if self.builtin.contains(&normalize(o)) => {}
                Ok(()) => opt_roots.push(normalize(o)),
                Err(e) => left_out.push((normalize(o), e)),
            }
        }
        // A failed visit may have recorded some of its modules: only what is
        // reachable from the kept roots goes in.
        let req = load_order(&deps, &req_roots)?;
        let all = load_order(&deps, &[req_roots.clone(), opt_roots].concat())?;
        let req_set: BTreeSet<&String> = req.iter().collect();
        let mut modules = Vec::new();
        for (name, optional) in req.iter().map(|m| (m, false)).chain(
            all.iter()
                .filter(|m| !req_set.contains(m))
                .map(|m| (m, true)),
        ) {
            let (path, bytes) = data[name].clone();
            modules.push(Chosen {
                name: name.clone(),
                path,
                optional,
                data: bytes,
            });
        }
        Ok(Plan { modules, left_out })
    }
}

/// Module names of a `modules.builtin` file (one path per line).
pub fn parse_builtin(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| {
            let file = l.trim().rsplit('/').next()?;
            module_name(file).map(|(stem, _)| normalize(stem))
        })
        .collect()
}

/// The `/etc/tandem/modules` file of the initramfs: one module per line, in load
/// order, as an absolute path, with `optional` after the ones whose failure
/// the guest ignores.
pub fn list_file(version: &str, modules: &[Chosen]) -> String {
    let mut s = String::new();
    for m in modules {
        s.push_str(&format!("/lib/modules/{version}/{}", m.path));
        if m.optional {
            s.push_str(" optional");
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal ELF64 little-endian file with a `.modinfo` section holding
    /// `entries` (NUL-separated), as the kernel's modpost writes it.
    pub(crate) fn fake_module(entries: &[&str]) -> Vec<u8> {
        let mut modinfo = Vec::new();
        for e in entries {
            modinfo.extend_from_slice(e.as_bytes());
            modinfo.push(0);
        }
        let shstrtab = b"\0.modinfo\0.shstrtab\0".to_vec();
        let mut f = vec![0u8; 64];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2; // ELFCLASS64
        f[5] = 1; // little endian
        f[6] = 1;
        let modinfo_off = f.len();
        f.extend_from_slice(&modinfo);
        let strtab_off = f.len();
        f.extend_from_slice(&shstrtab);
        while !f.len().is_multiple_of(8) {
            f.push(0);
        }
        let shoff = f.len();
        let mut sh = |name: u32, typ: u32, off: usize, size: usize| {
            let mut h = [0u8; 64];
            h[0..4].copy_from_slice(&name.to_le_bytes());
            h[4..8].copy_from_slice(&typ.to_le_bytes());
            h[24..32].copy_from_slice(&(off as u64).to_le_bytes());
            h[32..40].copy_from_slice(&(size as u64).to_le_bytes());
            f.extend_from_slice(&h);
        };
        sh(0, 0, 0, 0);
        sh(1, 1, modinfo_off, modinfo.len());
        sh(10, 3, strtab_off, shstrtab.len());
        f[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        f[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        f[0x3e..0x40].copy_from_slice(&2u16.to_le_bytes());
        f
    }

    #[test]
    fn modinfo_reads_the_section_of_an_elf_module() {
        let elf = fake_module(&[
            "license=GPL",
            "depends=virtio_ring,virtio-pci-modern-dev,virtio",
            "alias=virtio:d00000002v*",
            "alias=second",
            "vermagic=6.1.0-56-amd64 SMP preempt mod_unload modversions ",
        ]);
        let info = modinfo(&elf).unwrap();
        assert_eq!(info.len(), 5);
        assert_eq!(value(&info, "license"), Some("GPL"));
        assert_eq!(
            depends(&info),
            ["virtio_ring", "virtio_pci_modern_dev", "virtio"]
        );
        assert_eq!(info.iter().filter(|(k, _)| k == "alias").count(), 2);
        assert!(value(&info, "vermagic")
            .unwrap()
            .starts_with("6.1.0-56-amd64 "));
    }

    #[test]
    fn modinfo_with_empty_depends_and_bad_files() {
        let info = modinfo(&fake_module(&["depends=", "name=bfq"])).unwrap();
        assert!(depends(&info).is_empty());
        assert!(
            modinfo(b"not an elf at all, but long enough to pass the length check....").is_err()
        );
        assert!(modinfo(&[0u8; 10]).is_err());
        let mut elf = fake_module(&["depends="]);
        // Point the section headers past the end of the file.
        elf[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(modinfo(&elf).is_err());
        let mut elf = fake_module(&["depends="]);
        elf.truncate(elf.len() - 10);
        assert!(modinfo(&elf).is_err());
        let mut elf32 = fake_module(&[]);
        elf32[4] = 1;
        assert!(modinfo(&elf32).is_err());
    }

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        edges
            .iter()
            .map(|(m, d)| (m.to_string(), d.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn load_order_puts_dependencies_first_and_is_deterministic() {
        let g = graph(&[
            ("virtio_ring", &[]),
            ("virtio", &["virtio_ring"]),
            ("virtio_pci_modern_dev", &[]),
            ("virtio_pci_legacy_dev", &[]),
            (
                "virtio_pci",
                &[
                    "virtio_ring",
                    "virtio_pci_modern_dev",
                    "virtio_pci_legacy_dev",
                    "virtio",
                ],
            ),
            ("virtio_blk", &["virtio", "virtio_ring"]),
            ("bfq", &[]),
            ("crc16", &[]),
            ("mbcache", &[]),
            ("jbd2", &[]),
            ("ext4", &["jbd2", "mbcache", "crc16"]),
            ("unused", &[]),
        ]);
        let roots = s(&["virtio_blk", "ext4", "virtio_pci", "bfq"]);
        let order = load_order(&g, &roots).unwrap();
        assert_eq!(order.len(), 11, "{order:?}");
        assert!(!order.contains(&"unused".to_string()));
        let pos = |m: &str| order.iter().position(|x| x == m).unwrap();
        for (m, d) in &g {
            if order.contains(m) {
                for dep in d {
                    assert!(pos(dep) < pos(m), "{dep} before {m}: {order:?}");
                }
            }
        }
        // Any order of the roots gives the same load order.
        let mut rev = roots.clone();
        rev.reverse();
        assert_eq!(load_order(&g, &rev).unwrap(), order);
        assert_eq!(
            order,
            s(&[
                "bfq",
                "crc16",
                "jbd2",
                "mbcache",
                "ext4",
                "virtio_pci_legacy_dev",
                "virtio_pci_modern_dev",
                "virtio_ring",
                "virtio",
                "virtio_blk",
                "virtio_pci"
            ])
        );
    }

    #[test]
    fn load_order_reports_cycles_and_unknown_modules() {
        let g = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &[])]);
        let e = load_order(&g, &s(&["a", "d"])).unwrap_err();
        assert!(
            e.contains("cycle") && e.contains('a') && e.contains('c'),
            "{e}"
        );
        let g = graph(&[("a", &["x"])]);
        assert!(load_order(&g, &s(&["a"])).unwrap_err().contains('x'));
    }

    #[test]
    fn builtin_names_and_the_list_file() {
        let b = parse_builtin("kernel/lib/crc32.ko\nkernel/drivers/virtio/virtio-mmio.ko\n\n");
        assert!(b.contains("crc32") && b.contains("virtio_mmio") && b.len() == 2);
        let m = |n: &str, optional| Chosen {
            name: n.into(),
            path: format!("kernel/x/{n}.ko"),
            optional,
            data: vec![],
        };
        assert_eq!(
            list_file("6.1.0-1-amd64", &[m("virtio", false), m("vsock", true)]),
            "/lib/modules/6.1.0-1-amd64/kernel/x/virtio.ko\n/lib/modules/6.1.0-1-amd64/kernel/x/vsock.ko optional\n"
        );
    }

    #[test]
    fn plan_follows_depends_skips_builtins_and_leaves_out_missing_optionals() {
        let dir = crate::util::TempDir::new("tandem-modtest").unwrap();
        let root = dir.path().join("lib/modules/9.9-test");
        let put = |rel: &str, entries: &[&str]| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, fake_module(entries)).unwrap();
        };
        let vm = "vermagic=9.9-test SMP mod_unload ";
        put("kernel/a/virtio.ko", &["depends=virtio_ring", vm]);
        put("kernel/a/virtio_ring.ko", &["depends=", vm]);
        put(
            "kernel/b/virtio_blk.ko",
            &["depends=virtio,virtio_ring,crc32", vm],
        );
        put("kernel/c/vsock.ko", &["depends=", vm]);
        put(
            "kernel/c/vsock_virtio.ko",
            &["depends=vsock,virtio,gone", vm],
        );
        put("kernel/c/vsock_loop.ko", &["depends=vsock", vm]);
        put("kernel/d/other.ko", &["depends=", "vermagic=1.0 SMP"]);
        std::fs::write(root.join("modules.builtin"), "kernel/lib/crc32.ko\n").unwrap();
        let tree = Tree::scan(&root, "9.9-test").unwrap();
        assert_eq!(tree.files.len(), 7);
        let plan = tree
            .plan(&["virtio_blk", "crc32"], &["vsock_virtio", "vsock-loop"])
            .unwrap();
        let names: Vec<(&str, bool)> = plan
            .modules
            .iter()
            .map(|m| (m.name.as_str(), m.optional))
            .collect();
        assert_eq!(
            names,
            [
                ("virtio_ring", false),
                ("virtio", false),
                ("virtio_blk", false),
                ("vsock", true),
                ("vsock_loop", true)
            ]
        );
        assert_eq!(plan.left_out.len(), 1);
        assert_eq!(plan.left_out[0].0, "vsock_virtio");
        assert!(plan.left_out[0].1.contains("gone"), "{:?}", plan.left_out);
        assert_eq!(plan.modules[2].path, "kernel/b/virtio_blk.ko");
        // A required module that is missing, or built for another kernel, is an error.
        assert!(tree
            .plan(&["nothere"], &[])
            .unwrap_err()
            .contains("nothere"));
        assert!(tree
            .plan(&["other"], &[])
            .unwrap_err()
            .contains("built for"));
    }
}
