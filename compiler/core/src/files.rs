//! The rules for files: names made from names in the IR (kernel symbols,
//! output names), so nothing written leaves the directory the user named,
//! and the files a model names (external data, weights), so nothing read
//! lies outside the model's folder.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

/// The file `relative` names inside `folder`: the rule for every file a
/// model refers to (ONNX external data, `ircc.weights`). The path must be
/// relative, its real location (links resolved) inside `folder`, and a
/// regular file, not a FIFO or a device that could block a read forever.
pub fn file_inside(folder: &Path, relative: &str) -> Result<PathBuf, String> {
    let rel = Path::new(relative);
    let escapes = rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if relative.is_empty() {
        return Err("an empty file name".to_string());
    }
    if escapes {
        return Err(format!(
            "'{relative}' leaves the folder {}",
            folder.display()
        ));
    }
    let folder = if folder.as_os_str().is_empty() {
        Path::new(".")
    } else {
        folder
    };
    let base = std::fs::canonicalize(folder)
        .map_err(|e| format!("cannot read the folder {}: {e}", folder.display()))?;
    let path = base.join(rel);
    let real =
        std::fs::canonicalize(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !real.starts_with(&base) {
        return Err(format!(
            "{} leads to {}, outside the folder {}",
            path.display(),
            real.display(),
            base.display()
        ));
    }
    let meta =
        std::fs::metadata(&real).map_err(|e| format!("cannot read {}: {e}", real.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    Ok(real)
}

/// The largest data file (a fusion table, a rule file, a device profile)
/// read at run time, so a stray path cannot fill memory.
pub const MAX_SPEC_FILE_BYTES: u64 = 1 << 20;

/// The text of a data file the user named: a regular file (not a FIFO or
/// a device, which could block a read or never end) of at most
/// [`MAX_SPEC_FILE_BYTES`].
pub fn read_spec_file(path: &str) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{path}: {e}"))?;
    if !meta.is_file() || meta.len() > MAX_SPEC_FILE_BYTES {
        return Err(format!(
            "{path}: not a regular file of at most {MAX_SPEC_FILE_BYTES} bytes"
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))
}

/// Writes the file `path` through `fill`, which is given a new, empty
/// file beside it to fill; that file is then renamed over `path`. A link
/// already at `path`, symbolic or hard, is replaced, never written through
/// (an output folder may hold one to a file outside it); a file replaced
/// keeps its permissions; a failed write (a full disk) leaves no
/// truncated file. This is how ircc writes the files it names in a folder
/// the user named (a bundle, run outputs, dumps); a path the user names
/// exactly (`-o FILE`) is written where it leads, `/dev/stdout` included.
pub fn write_replacing<T>(
    path: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> Result<T, String>,
) -> Result<T, String> {
    let fail = |e: std::io::Error| cannot_write(path, e);
    let existing = std::fs::symlink_metadata(path).ok();
    // Not a device, a FIFO or a folder a hostile folder put there.
    if let Some(m) = &existing
        && !m.is_file()
        && !m.file_type().is_symlink()
    {
        return Err(format!(
            "cannot write {}: it exists and is not a regular file",
            path.display()
        ));
    }
    let kept = existing.filter(|m| m.is_file()).map(|m| m.permissions());
    let (temp, mut file) = new_file_beside(path)?;
    // Filled through the file made new: never reopened by its name.
    let written = fill(&mut file).and_then(|v| {
        drop(file);
        if let Some(permissions) = kept {
            let _ = std::fs::set_permissions(&temp, permissions);
        }
        std::fs::rename(&temp, path).map(|()| v).map_err(fail)
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// [`write_replacing`] with `bytes`.
pub fn write_file(path: &Path, bytes: impl AsRef<[u8]>) -> Result<(), String> {
    write_replacing(path, |file| {
        std::io::Write::write_all(file, bytes.as_ref()).map_err(|e| cannot_write(path, e))
    })
}

/// A new, empty file in `path`'s folder, named after it, and its path.
fn new_file_beside(path: &Path) -> Result<(PathBuf, std::fs::File), String> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| format!("cannot write {}: not a file name", path.display()))?
        .to_string_lossy();
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = path.with_file_name(format!(".{name}.{}-{n}.tmp", std::process::id()));
    // Made new (O_EXCL): never opened through a link planted under its name.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(|e| cannot_write(path, e))?;
    Ok((temp, file))
}

fn cannot_write(path: &Path, e: std::io::Error) -> String {
    format!("cannot write {}: {e}", path.display())
}

/// `name` as a file name: ASCII letters, digits, `-` and `_` kept, every
/// other character (path separators, dots, spaces) replaced by `_`, so the
/// result is never empty, absolute, hidden, or a `..`.
pub fn file_stem(name: &str) -> String {
    let stem: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if stem.is_empty() {
        "_".to_string()
    } else {
        stem
    }
}

/// File stems for `names`, one each, made unique by a numeric suffix where
/// two names give the same stem (`a/b` and `a_b`).
pub fn unique_stems<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut used = HashSet::new();
    names
        .into_iter()
        .map(|n| {
            let base = file_stem(n);
            let mut stem = base.clone();
            let mut k = 2;
            while !used.insert(stem.to_ascii_lowercase()) {
                stem = format!("{base}_{k}");
                k += 1;
            }
            stem
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn writes_replace_links_instead_of_writing_through_them() {
        let dir = std::env::temp_dir().join(format!("ircc-write-links-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (victim, other) = (dir.join("victim"), dir.join("other"));
        std::fs::write(&victim, "keep").unwrap();
        std::fs::write(&other, "keep too").unwrap();
        let (soft, hard) = (dir.join("plan.json"), dir.join("k0.wgsl"));
        std::os::unix::fs::symlink(&victim, &soft).unwrap();
        std::fs::hard_link(&other, &hard).unwrap();
        write_file(&soft, "new").unwrap();
        write_file(&hard, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "keep too");
        for path in [&soft, &hard] {
            assert_eq!(std::fs::read_to_string(path).unwrap(), "new");
            let meta = std::fs::symlink_metadata(path).unwrap();
            assert!(meta.file_type().is_file());
        }
        // A failed write leaves neither the file nor its temporary.
        let err = write_replacing(&dir.join("y.npy"), |_| {
            Err::<(), _>("disk full".to_string())
        });
        assert_eq!(err.unwrap_err(), "disk full");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 4, "{left:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn stems_stay_in_their_directory_and_differ() {
        assert_eq!(file_stem("../../etc/x"), "______etc_x");
        assert_eq!(file_stem("/abs"), "_abs");
        assert_eq!(file_stem(""), "_");
        assert_eq!(file_stem(".."), "__");
        assert_eq!(
            unique_stems(["a/b", "a_b", "A_b"]),
            ["a_b", "a_b_2", "A_b_3"]
        );
    }

    #[test]
    fn files_are_found_only_inside_their_folder() {
        let dir = std::env::temp_dir().join(format!("ircc-files-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/w.bin"), b"w").unwrap();
        let sub = dir.join("sub");
        assert!(file_inside(&sub, "w.bin").is_ok());
        assert!(
            file_inside(&sub, "../sub/w.bin")
                .unwrap_err()
                .contains("leaves the folder")
        );
        assert!(
            file_inside(&sub, "/etc/passwd")
                .unwrap_err()
                .contains("leaves the folder")
        );
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc/hostname", sub.join("link")).unwrap();
            assert!(
                file_inside(&sub, "link")
                    .unwrap_err()
                    .contains("outside the folder")
            );
            std::fs::create_dir(sub.join("d")).unwrap();
            assert!(
                file_inside(&sub, "d")
                    .unwrap_err()
                    .contains("not a regular file")
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
