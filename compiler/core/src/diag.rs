//! Diagnostics in MLIR's shape: `file:line:col: error: message`, then the
//! source line and a caret under the column.

use std::fmt;
use std::sync::Arc;

/// Where something came from in a source file. Lines and columns count from 1.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Location {
    pub file: Option<Arc<str>>,
    pub line: u32,
    pub col: u32,
}

impl Location {
    pub fn new(file: Option<Arc<str>>, line: u32, col: u32) -> Self {
        Location { file, line, col }
    }

    /// Unknown: the operation was made by a pass, not read from a file.
    pub fn unknown() -> Self {
        Location::default()
    }

    pub fn is_known(&self) -> bool {
        self.line > 0
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.as_deref().unwrap_or("<input>");
        if self.is_known() {
            write!(f, "{file}:{}:{}", self.line, self.col)
        } else {
            write!(f, "{file}")
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    /// A problem that does not stop compilation (a rule that can never
    /// fire); always shown.
    Warning,
    Note,
    /// What a pass decided and why (a fallback, a choice), shown with
    /// `--remarks` as LLVM's optimization remarks are.
    Remark,
}

/// One message about the input, with an optional location and notes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub loc: Location,
    pub message: String,
    pub notes: Vec<Diagnostic>,
}

impl Diagnostic {
    pub fn error(loc: Location, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            loc,
            message: message.into(),
            notes: Vec::new(),
        }
    }

    pub fn warning(loc: Location, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(loc, message)
        }
    }

    pub fn remark(loc: Location, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Remark,
            ..Diagnostic::error(loc, message)
        }
    }

    /// An error that concerns no particular place in the input.
    pub fn plain(message: impl Into<String>) -> Self {
        Diagnostic::error(Location::unknown(), message)
    }

    pub fn with_note(mut self, loc: Location, message: impl Into<String>) -> Self {
        self.notes.push(Diagnostic {
            severity: Severity::Note,
            loc,
            message: message.into(),
            notes: Vec::new(),
        });
        self
    }

    /// Renders the diagnostic; `source` is the text of the file it points
    /// into, if available, for the source line and caret.
    pub fn render(&self, source: Option<&str>) -> String {
        self.render_styled(source, false)
    }

    /// [`Diagnostic::render`], with ANSI colours where `color` holds: as
    /// clang and mlir-opt print them, the location and message bold, the
    /// severity coloured, the caret green.
    pub fn render_styled(&self, source: Option<&str>, color: bool) -> String {
        let mut out = String::new();
        self.render_into(&mut out, source, color);
        out
    }

    fn render_into(&self, out: &mut String, source: Option<&str>, color: bool) {
        use std::fmt::Write;
        let (kind, hue) = match self.severity {
            Severity::Error => ("error", "31"),
            Severity::Warning => ("warning", "35"),
            Severity::Note => ("note", "36"),
            Severity::Remark => ("remark", "34"),
        };
        let paint = |code: &str, text: &str| {
            if color {
                format!("\x1b[{code}m{text}\x1b[0m")
            } else {
                text.to_string()
            }
        };
        let kind = paint(&format!("1;{hue}"), &format!("{kind}:"));
        let message = paint("1", &self.message);
        if self.loc.is_known() || self.loc.file.is_some() {
            let loc = paint("1", &format!("{}:", self.loc));
            let _ = writeln!(out, "{loc} {kind} {message}");
        } else {
            let _ = writeln!(out, "{kind} {message}");
        }
        if let (true, Some(src)) = (self.loc.is_known(), source)
            && let Some(line) = src.lines().nth(self.loc.line as usize - 1)
        {
            let _ = writeln!(out, "{line}");
            // Tabs stay tabs so the caret lines up in a terminal.
            let pad: String = line
                .chars()
                .take(self.loc.col.saturating_sub(1) as usize)
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            let _ = writeln!(out, "{pad}{}", paint("1;32", "^"));
        }
        for note in &self.notes {
            note.render_into(out, source, color);
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.render(None).trim_end())
    }
}

impl std::error::Error for Diagnostic {}

/// Several diagnostics, reported together (a verifier reports every problem
/// it finds, not only the first).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn render(&self, source: Option<&str>) -> String {
        self.render_styled(source, false)
    }

    /// [`Diagnostics::render`], coloured where `color` holds.
    pub fn render_styled(&self, source: Option<&str>, color: bool) -> String {
        self.0
            .iter()
            .map(|d| d.render_styled(source, color))
            .collect()
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.render(None).trim_end())
    }
}

impl std::error::Error for Diagnostics {}

#[cfg(test)]
mod tests {
    use super::*;

    fn located() -> Diagnostic {
        let loc = Location {
            file: Some("m.ir".into()),
            line: 1,
            col: 3,
        };
        Diagnostic::error(loc, "bad op").with_note(Location::unknown(), "see here")
    }

    #[test]
    fn colours_wrap_the_plain_text_only_when_asked() {
        let d = located();
        let plain = d.render(Some("x = y"));
        assert_eq!(
            plain,
            "m.ir:1:3: error: bad op\nx = y\n  ^\nnote: see here\n"
        );
        let coloured = d.render_styled(Some("x = y"), true);
        assert!(coloured.contains("\x1b[1;31merror:\x1b[0m"), "{coloured:?}");
        assert!(coloured.contains("\x1b[1;36mnote:\x1b[0m"), "{coloured:?}");
        assert!(coloured.contains("  \x1b[1;32m^\x1b[0m"), "{coloured:?}");
        // Without the escapes, the same text.
        let mut stripped = String::new();
        let mut rest = coloured.as_str();
        while let Some(at) = rest.find('\x1b') {
            stripped.push_str(&rest[..at]);
            rest = &rest[at + rest[at..].find('m').unwrap() + 1..];
        }
        stripped.push_str(rest);
        assert_eq!(stripped, plain);
    }
}
