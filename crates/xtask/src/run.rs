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
