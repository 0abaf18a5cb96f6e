//! A progress line for long runs: after a few seconds of computing, the tools say on standard
//! error what they are doing and for how long they have been at it, once a second, on one
//! line that rewrites itself. Only on a terminal: when standard error is a file or a pipe
//! (a script, a test, a log), nothing is written.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a run computes before the line appears.
pub const AFTER: Duration = Duration::from_secs(2);

/// The environment variable that replaces [`AFTER`] with a number of milliseconds (the tests
/// set 0, to check that nothing is written when standard error is not a terminal).
pub const AFTER_VAR: &str = "ATTENTION_PROGRESS_AFTER_MS";

/// Where the line goes.
pub type Sink = Box<dyn Write + Send>;

/// How a progress line ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// The work is done ([`Progress::finish`]): the line says so, with the time it took.
    Done,
    /// The line is dropped unfinished (the work failed): it is cleared, and says nothing.
    Dropped,
}

/// A progress line being shown (or not); [`Progress::finish`] ends it with "done", dropping
/// it unfinished (as a failing run does) clears it.
pub struct Progress {
    done: Arc<(Mutex<Option<End>>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts the line `what` on standard error if it is a terminal; otherwise shows nothing.
    pub fn start(what: String) -> Progress {
        let after = std::env::var(AFTER_VAR)
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map_or(AFTER, Duration::from_millis);
        let stderr = std::io::stderr();
        let sink: Option<Sink> = stderr.is_terminal().then(|| Box::new(stderr) as Sink);
        Progress::start_to(what, sink, after)
    }

    /// Starts the line `what` on `sink` (nothing when `None`), first shown after `after`,
    /// then rewritten every second with the time elapsed.
    pub fn start_to(what: String, sink: Option<Sink>, after: Duration) -> Progress {
        let done = Arc::new((Mutex::new(None), Condvar::new()));
        let thread = sink.map(|mut sink| {
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let start = Instant::now();
                let (lock, signal) = &*done;
                let mut wait = after;
                let mut shown = false;
                let mut finished = lock.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    let (guard, _) = signal
                        .wait_timeout_while(finished, wait, |end| end.is_none())
                        .unwrap_or_else(|e| e.into_inner());
                    finished = guard;
                    let secs = start.elapsed().as_secs();
                    let line = format!("{what}: {secs} s so far…");
                    match *finished {
                        Some(End::Done) if shown => {
                            let _ = writeln!(sink, "\r{what}: done after {secs} s   ");
                            return;
                        }
                        Some(End::Dropped) if shown => {
                            let blank = " ".repeat(line.chars().count() + 3);
                            let _ = write!(sink, "\r{blank}\r");
                            let _ = sink.flush();
                            return;
                        }
                        Some(_) => return,
                        None => {}
                    }
                    let _ = write!(sink, "\r{line}");
                    let _ = sink.flush();
                    shown = true;
                    wait = Duration::from_secs(1);
                }
            })
        });
        Progress { done, thread }
    }

    /// Ends the line (with the total time, if it was shown) and waits for it to be written.
    pub fn finish(mut self) {
        self.stop(End::Done);
    }

    fn stop(&mut self, end: End) {
        let (lock, signal) = &*self.done;
        lock.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(end);
        signal.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Progress {
    /// Clears the line without saying "done": a run that fails drops its progress unfinished.
    fn drop(&mut self) {
        self.stop(End::Dropped);
    }
}
