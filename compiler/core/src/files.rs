//! File names made from names in the IR (kernel symbols, output names):
//! one rule, so nothing written can leave the directory the user named.

use std::collections::HashSet;

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
}
