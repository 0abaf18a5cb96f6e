//! Running child processes with clear errors.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::{Command, Stdio};

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A command line, printed before it runs, that fails with the command's name and status.
pub struct Cmd {
    inner: Command,
    shown: String,
}

impl Cmd {
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        let program = program.as_ref();
        let name = Path::new(program).file_name().unwrap_or(program);
        Cmd { inner: Command::new(program), shown: name.to_string_lossy().into_owned() }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.shown.push(' ');
        self.shown.push_str(&arg.as_ref().to_string_lossy());
        self.inner.arg(arg);
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(self, args: I) -> Self {
        args.into_iter().fold(self, Cmd::arg)
    }

    pub fn cwd(mut self, dir: &Path) -> Self {
        self.inner.current_dir(dir);
        self
    }

    /// Puts the pinned tools' directory first on `PATH`, so that `mdbook` finds the
    /// `mdbook-katex` preprocessor and the `mdbook-linkcheck2` backend we installed.
    pub fn tools(mut self, bin: &Path) -> Self {
        let mut path = OsString::from(bin.as_os_str());
        if let Some(old) = std::env::var_os("PATH") {
            path.push(":");
            path.push(old);
        }
        self.inner.env("PATH", path);
        self
    }

    pub fn quiet_stdout(mut self) -> Self {
        self.inner.stdout(Stdio::null());
        self
    }

    /// Runs to completion; a non-zero exit is an error naming the command.
    pub fn run(mut self) -> Result<()> {
        println!("$ {}", self.shown);
        let status = self
            .inner
            .status()
            .map_err(|e| format!("could not start `{}`: {e}", self.shown))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("`{}` failed ({status})", self.shown).into())
        }
    }

    /// Runs to completion, passing both streams through, and fails if the command succeeded
    /// but logged a warning (a line containing ` WARN `) that `tolerated` does not accept.
    /// mdBook only warns about an unbalanced HTML tag in a page (garbled math, say), a missing
    /// anchor or a missing image, and still exits 0.
    pub fn run_without_warnings(mut self, tolerated: fn(&str) -> bool) -> Result<()> {
        println!("$ {}", self.shown);
        let out = self
            .inner
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("could not start `{}`: {e}", self.shown))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprint!("{stderr}");
        if !out.status.success() {
            return Err(format!("`{}` failed ({})", self.shown, out.status).into());
        }
        let warnings = unexpected_warnings(&stderr, tolerated);
        if !warnings.is_empty() {
            return Err(format!("`{}` logged {} warning(s):\n  {}", self.shown, warnings.len(), warnings.join("\n  ")).into());
        }
        Ok(())
    }

    /// Runs to completion and returns standard output; standard error passes through.
    pub fn output(mut self) -> Result<String> {
        let out = self
            .inner
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("could not start `{}`: {e}", self.shown))?;
        if !out.status.success() {
            return Err(format!("`{}` failed ({})", self.shown, out.status).into());
        }
        Ok(String::from_utf8(out.stdout)?)
    }
}

/// The lines of `log` that are warnings `tolerated` does not accept, with ANSI colours removed.
fn unexpected_warnings(log: &str, tolerated: fn(&str) -> bool) -> Vec<String> {
    log.lines().map(strip_ansi).filter(|line| line.contains(" WARN ") && !tolerated(line)).collect()
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // Skip a CSI sequence: ESC [ parameters final-letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_found_and_filtered() {
        let log = "\u{1b}[2m2026\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m mdbook_katex: built against v0.5.3\n INFO ok\n WARN unclosed HTML tag `<mo>` found in `ch04.md`\n";
        let found = unexpected_warnings(log, |line| line.contains("built against"));
        assert_eq!(found, [" WARN unclosed HTML tag `<mo>` found in `ch04.md`"]);
        assert_eq!(unexpected_warnings(log, |_| false).len(), 2);
    }
}
