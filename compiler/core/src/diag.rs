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
        let mut out = String::new();
        self.render_into(&mut out, source);
        out
    }

    fn render_into(&self, out: &mut String, source: Option<&str>) {
        use std::fmt::Write;
        let kind = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
            Severity::Remark => "remark",
        };
        if self.loc.is_known() || self.loc.file.is_some() {
            let _ = writeln!(out, "{}: {kind}: {}", self.loc, self.message);
        } else {
            let _ = writeln!(out, "{kind}: {}", self.message);
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
            let _ = writeln!(out, "{pad}^");
        }
        for note in &self.notes {
            note.render_into(out, source);
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
        self.0.iter().map(|d| d.render(source)).collect()
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
