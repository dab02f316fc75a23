//! Generates the typed ops of the dialects the textual format itself knows
//! (`func`, and `index` for the pretty form of `index.view`) from their
//! specs (see `ircc-ods`), and the parts of the plugin stamp
//! (`src/plugin.rs`) only a build knows: the compiler's version and a hash
//! of this crate's sources, its API.

use std::path::Path;

fn main() {
    ircc_ods::build_dialects("../../spec/dialects", &["func", "index"], "crate");

    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(&rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("cannot run {rustc} --version"));
    println!("cargo::rustc-env=IRCC_RUSTC_VERSION={version}");

    println!("cargo::rerun-if-changed=src");
    println!("cargo::rerun-if-changed=Cargo.toml");
    let mut files = Vec::new();
    collect(Path::new("src"), &mut files);
    files.push(Path::new("Cargo.toml").to_path_buf());
    files.sort();
    // FNV-1a: stable across compilers and platforms, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in &files {
        let name = file.to_string_lossy().replace('\\', "/");
        let text = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for byte in name.bytes().chain([0]).chain(text).chain([0]) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    println!("cargo::rustc-env=IRCC_API_HASH={hash:016x}");
}

fn collect(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
    }
}
