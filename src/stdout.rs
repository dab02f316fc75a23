//! The process's standard output as commands write it: every write and
//! flush checked, so that output which never arrived fails the command.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// A writer that remembers the first error of its writes and flushes, so
/// that one a command ignored (a `let _ = writeln!`) still fails the
/// command: [`CheckedWriter::finish`] flushes and returns it.
pub(crate) struct CheckedWriter<W: Write> {
    inner: W,
    error: Option<std::io::Error>,
    /// Standard output was closed when the process started: every write
    /// fails, as it would have had Rust's runtime left it closed.
    closed: bool,
}

impl CheckedWriter<std::io::StdoutLock<'static>> {
    /// The process's standard output.
    pub(crate) fn of_process() -> Self {
        CheckedWriter {
            inner: std::io::stdout().lock(),
            error: None,
            closed: closed_at_start(),
        }
    }
}

impl<W: Write> CheckedWriter<W> {
    fn keep<T>(&mut self, r: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &r
            && self.error.is_none()
        {
            self.error = Some(std::io::Error::new(e.kind(), e.to_string()));
        }
        r
    }

    pub(crate) fn finish(mut self) -> std::io::Result<()> {
        let flushed = self.inner.flush();
        match self.error.take() {
            Some(e) => Err(e),
            None => flushed,
        }
    }
}

impl<W: Write> Write for CheckedWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let r = if self.closed && !buf.is_empty() {
            Err(std::io::Error::other("standard output is closed"))
        } else {
            self.inner.write(buf)
        };
        self.keep(r)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let r = self.inner.flush();
        self.keep(r)
    }
}

/// Whether file descriptor 1 was closed when the process started
/// (`ircc stats m.ir >&-`), as [`LOOK_AT_STDOUT`] saw before `main`.
fn closed_at_start() -> bool {
    // Naming the constructor keeps it, and so its `.init_array` entry, in
    // the link wherever this is linked (a custom driver's binary too).
    std::hint::black_box(&LOOK_AT_STDOUT);
    CLOSED_AT_START.load(Ordering::Relaxed)
}

static CLOSED_AT_START: AtomicBool = AtomicBool::new(false);

/// Rust's runtime reopens a closed standard stream on /dev/null before
/// `main` runs, after which a closed stdout cannot be told from
/// `> /dev/null` and every write to it vanishes. An ELF constructor runs
/// earlier, from the C runtime, and looks at descriptor 1 as the shell
/// left it. (Elsewhere than Linux it does not run, and a closed stdout
/// reads as open.)
#[cfg_attr(target_os = "linux", unsafe(link_section = ".init_array"))]
#[used]
static LOOK_AT_STDOUT: extern "C" fn() = look_at_stdout;

extern "C" fn look_at_stdout() {
    #[cfg(unix)]
    {
        // SAFETY: F_GETFD reads a descriptor's flags and touches nothing;
        // it fails with EBADF where descriptor 1 is not open.
        let flags = unsafe { libc::fcntl(1, libc::F_GETFD) };
        if flags == -1 {
            CLOSED_AT_START.store(true, Ordering::Relaxed);
        }
    }
}
