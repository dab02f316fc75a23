//! Records the git revision the binary is built from, for `ircc --version`
//! (`unknown` outside a git checkout, as in a source tarball; `-modified`
//! where tracked files differed from it when this script last ran, which
//! a commit, a checkout or staging makes it do again).

use std::path::Path;
use std::process::Command;

fn main() {
    let revision = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .is_some_and(|o| !o.stdout.is_empty());
    let suffix = if dirty { "-modified" } else { "" };
    println!("cargo:rustc-env=IRCC_GIT_REVISION={revision}{suffix}");
    // A new commit or checkout changes HEAD or the branch it names; staging
    // or committing changes the index.
    let branch = std::fs::read_to_string(".git/HEAD").ok().and_then(|h| {
        h.strip_prefix("ref: ")
            .map(|r| format!(".git/{}", r.trim()))
    });
    let files = [".git/HEAD", ".git/index", ".git/packed-refs"];
    for file in files.iter().map(|f| f.to_string()).chain(branch) {
        if Path::new(&file).exists() {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
