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
