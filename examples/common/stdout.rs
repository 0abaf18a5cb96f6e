//! Printing to standard output as a command-line program should: a reader that stops reading
//! (`| head -1`, `| true`) ends the run quietly with exit code 0, as SIGPIPE ends a C program,
//! instead of the panic "failed printing to stdout: Broken pipe" of `print!` (exit code 101).
//!
//! The chapter examples (through `common`) and the reader tools (through `reader_tools`) print
//! their standard output through [`print`] and [`line`] (or [`write`]).

use std::io::{ErrorKind, Write};

/// Writes `text` to standard output and flushes it. When the reader has closed the pipe, the
/// process ends at once with exit code 0 (everything it had to do before printing is done);
/// any other error writing to standard output ends it with one line on standard error and
/// exit code 1.
pub fn write(text: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_fmt(text).and_then(|()| stdout.flush()) {
        Ok(()) => {}
        Err(e) => {
            drop(stdout);
            exit_on(&e)
        }
    }
}

/// Ends the process as [`write`] does after `error`: quietly with 0 for a closed pipe, with a
/// message and 1 otherwise.
pub fn exit_on(error: &std::io::Error) -> ! {
    if error.kind() == ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("error: cannot write to standard output: {error}");
    std::process::exit(1)
}

/// `print!("{text}")` through [`write`]: a closed standard output ends the run quietly.
pub fn print(text: impl std::fmt::Display) {
    write(format_args!("{text}"))
}

/// `println!("{text}")` through [`write`]: a closed standard output ends the run quietly.
pub fn line(text: impl std::fmt::Display) {
    write(format_args!("{text}\n"))
}
