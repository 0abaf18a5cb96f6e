//! Running child processes with clear errors.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, IsTerminal, Write};
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

    /// Runs to completion like [`Cmd::run_filtered`], and also fails if the command succeeded
    /// but logged a warning (a line containing ` WARN `) that `tolerated` does not accept.
    /// mdBook only warns about an unbalanced HTML tag in a page (garbled math, say), a missing
    /// anchor or a missing image, and still exits 0.
    pub fn run_without_warnings(self, tolerated: fn(&str) -> bool) -> Result<()> {
        let shown = self.shown.clone();
        let warnings = self.run_filtered(tolerated)?;
        if !warnings.is_empty() {
            return Err(format!("`{shown}` logged {} warning(s):\n  {}", warnings.len(), warnings.join("\n  ")).into());
        }
        Ok(())
    }

    /// Runs to completion with standard output passed through and standard error copied line
    /// by line as it arrives, except the lines `tolerated` accepts, which are dropped unseen.
    /// Returns the warnings (lines containing ` WARN `) that were not tolerated, colours
    /// removed; a failed command is an error. Colours are kept only when our own standard
    /// error is a terminal, so logs and CI output get plain text.
    pub fn run_filtered(mut self, tolerated: fn(&str) -> bool) -> Result<Vec<String>> {
        println!("$ {}", self.shown);
        let mut child = self
            .inner
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("could not start `{}`: {e}", self.shown))?;
        let log = child.stderr.take().expect("standard error is piped");
        let keep_colour = std::io::stderr().is_terminal();
        let warnings = filter_log(BufReader::new(log), &mut std::io::stderr(), tolerated, keep_colour)
            .map_err(|e| format!("could not read the log of `{}`: {e}", self.shown))?;
        let status = child.wait().map_err(|e| format!("`{}` did not finish: {e}", self.shown))?;
        if !status.success() {
            return Err(format!("`{}` failed ({status})", self.shown).into());
        }
        Ok(warnings)
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

/// Copies `log` to `out` line by line, leaving out every line that `tolerated` accepts (it is
/// shown the line with its ANSI colour codes removed), and returns the warnings it did not
/// accept, without colours. The lines written keep their colours only if `keep_colour`.
fn filter_log(
    mut log: impl BufRead,
    out: &mut impl Write,
    tolerated: fn(&str) -> bool,
    keep_colour: bool,
) -> std::io::Result<Vec<String>> {
    let mut warnings = Vec::new();
    let mut raw = Vec::new();
    while log.read_until(b'\n', &mut raw)? > 0 {
        let line = String::from_utf8_lossy(&raw);
        let line = line.strip_suffix('\n').unwrap_or(&line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        let plain = strip_ansi(line);
        if !tolerated(&plain) {
            writeln!(out, "{}", if keep_colour { line } else { &plain })?;
            out.flush()?;
            if plain.contains(" WARN ") {
                warnings.push(plain);
            }
        }
        raw.clear();
    }
    Ok(warnings)
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

    /// What mdbook-katex 0.10.0 logs under mdBook 0.5.4, colours and all.
    const KATEX: &str = "\u{1b}[2m2026-11-23T02:13:57.774990Z\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m \u{1b}[2mmdbook_katex\u{1b}[0m\u{1b}[2m:\u{1b}[0m This mdbook-katex was built against mdbook v0.5.3, but we are being called from mdbook v0.5.4. If you have any issue, this might be a reason.";

    fn filter(log: &str, tolerated: fn(&str) -> bool, keep_colour: bool) -> (String, Vec<String>) {
        let mut out = Vec::new();
        let warnings = filter_log(log.as_bytes(), &mut out, tolerated, keep_colour).unwrap();
        (String::from_utf8(out).unwrap(), warnings)
    }

    #[test]
    fn a_tolerated_line_is_neither_shown_nor_counted() {
        let log = format!(" INFO Book building has started\n{KATEX}\n INFO Running the html backend\n{KATEX}\n");
        let (shown, warnings) = filter(&log, |line| line.contains("was built against mdbook v0.5.3"), false);
        assert_eq!(shown, " INFO Book building has started\n INFO Running the html backend\n");
        assert!(warnings.is_empty());
        assert!(!shown.contains('\u{1b}'));
    }

    #[test]
    fn other_warnings_are_shown_and_returned() {
        let log = format!("{KATEX}\r\n WARN unclosed HTML tag `<mo>` found in `ch04.md`\nthe last line, unterminated");
        let (shown, warnings) = filter(&log, |line| line.contains("was built against mdbook v0.5.3"), false);
        assert_eq!(shown, " WARN unclosed HTML tag `<mo>` found in `ch04.md`\nthe last line, unterminated\n");
        assert_eq!(warnings, [" WARN unclosed HTML tag `<mo>` found in `ch04.md`"]);
        // Nothing tolerated: the katex line is shown and counted too, without its colours.
        let (shown, warnings) = filter(&log, |_| false, false);
        assert!(shown.starts_with("2026-11-23T02:13:57.774990Z  WARN mdbook_katex: This mdbook-katex"));
        assert_eq!(warnings.len(), 2);
    }

    #[test]
    fn colours_are_kept_only_for_a_terminal() {
        let (shown, warnings) = filter(KATEX, |_| false, true);
        assert_eq!(shown, format!("{KATEX}\n"));
        assert_eq!(warnings, [strip_ansi(KATEX)]);
    }

    #[test]
    fn bytes_that_are_not_utf8_do_not_stop_the_copy() {
        let mut out = Vec::new();
        let log: &[u8] = b"caf\xe9\n WARN after\n";
        let warnings = filter_log(log, &mut out, |_| false, false).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "caf\u{fffd}\n WARN after\n");
        assert_eq!(warnings, [" WARN after"]);
    }
}
