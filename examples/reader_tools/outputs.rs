//! Writing a run's outputs so that no run loses a file.
//!
//! - Before anything is read, [`check_distinct`] refuses an output that is the same file as an
//!   input or as another output. It compares files, not spellings: `q.npy`, `./q.npy`,
//!   `$PWD/q.npy`, a symbolic link to it and a hard link to it are all the same file.
//! - [`Outputs`] writes every output to a temporary file of its own beside its target. Only
//!   when all are written does it move them into place, one `rename` each (atomic: at every
//!   moment the target is either its old file or the new one, never a torn one). A target that
//!   existed is first kept as a hard link (or a copy), so that an error or a signal (SIGINT,
//!   SIGTERM, SIGHUP) between two renames puts back every file already replaced. A hard kill
//!   (SIGKILL, a power cut) cannot be handled: it may leave hidden `.NAME.PID.N.tmp` and
//!   `.NAME.PID.N.bak` files beside the outputs, but every output is still whole, old or new.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ndarray::{Array, Dimension};
use ndarray_npy::{WritableElement, WriteNpyExt};

use super::Failure;

/// A path from the command line and the option that named it (`--out`, `--q`, ...).
#[derive(Clone, Copy, Debug)]
pub struct Named<'a> {
    /// The option, e.g. `--out`.
    pub flag: &'static str,
    /// The path as the user wrote it.
    pub path: &'a Path,
}

/// What makes two paths the same file: the canonical path of the file (or, for a file that
/// does not exist yet, of its directory), and the device and inode of an existing file.
#[derive(Debug, PartialEq)]
struct Identity {
    canonical: PathBuf,
    inode: Option<(u64, u64)>,
}

impl Identity {
    fn of(path: &Path) -> Identity {
        let inode = fs::metadata(path).ok().and_then(|m| inode(&m));
        let canonical = fs::canonicalize(path).unwrap_or_else(|_| {
            // Not there (yet): its directory's canonical path and its name.
            let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
            match (absolute.parent(), absolute.file_name()) {
                (Some(dir), Some(name)) => {
                    fs::canonicalize(dir).map(|dir| dir.join(name)).unwrap_or(absolute.clone())
                }
                _ => absolute,
            }
        });
        Identity { canonical, inode }
    }

    fn same_file(&self, other: &Identity) -> bool {
        self.canonical == other.canonical
            || (self.inode.is_some() && self.inode == other.inode)
    }
}

#[cfg(unix)]
fn inode(m: &fs::Metadata) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Some((m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn inode(_: &fs::Metadata) -> Option<(u64, u64)> {
    None
}

/// Checks, before any work, that each output can be written where it is named: its folder
/// exists and it is not a directory itself. The message starts with the path, then names the
/// option and, for a missing folder, the folder.
pub fn check_outputs(outputs: &[Named]) -> Result<(), String> {
    for out in outputs {
        let folder = match out.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !folder.is_dir() {
            return Err(format!(
                "{} ({}): the folder {} does not exist; create it, or choose another path",
                out.path.display(),
                out.flag,
                folder.display()
            ));
        }
        if out.path.is_dir() {
            return Err(format!(
                "{} ({}): it is a directory; give a file name",
                out.path.display(),
                out.flag
            ));
        }
    }
    Ok(())
}

/// Refuses an output that is the same file as an input or as another output; the message
/// names both options and both paths.
pub fn check_distinct(inputs: &[Named], outputs: &[Named]) -> Result<(), String> {
    let ids: Vec<Identity> = outputs.iter().map(|o| Identity::of(o.path)).collect();
    for (i, (out, id)) in outputs.iter().zip(&ids).enumerate() {
        if let Some(input) =
            inputs.iter().find(|input| id.same_file(&Identity::of(input.path)))
        {
            return Err(format!(
                "{} {} is the same file as the input {} {}; choose another output path",
                out.flag,
                out.path.display(),
                input.flag,
                input.path.display()
            ));
        }
        if let Some(earlier) = outputs[..i].iter().zip(&ids).find(|(_, e)| e.same_file(id)) {
            return Err(format!(
                "{} {} and {} {} are the same file; give each output its own path",
                earlier.0.flag,
                earlier.0.path.display(),
                out.flag,
                out.path.display()
            ));
        }
    }
    Ok(())
}

/// Test seam: called with an output's index just before that output is renamed into place.
/// Only the process tests set it (to stop a child between two outputs); the tools never do.
pub static BEFORE_RENAME: OnceLock<fn(usize)> = OnceLock::new();

/// One output, written to `temp`, waiting to replace `target`.
struct Staged {
    shown: String,
    target: PathBuf,
    temp: PathBuf,
}

/// An output moved into place, and where its old file is kept until the run succeeds.
struct Replaced {
    shown: String,
    target: PathBuf,
    backup: Option<PathBuf>,
}

/// The outputs of one run (see the module documentation).
pub struct Outputs {
    staged: Vec<Staged>,
}

impl Outputs {
    /// Starts the output phase: from now on SIGINT, SIGTERM and SIGHUP no longer stop the
    /// process at once, but make the run roll back and stop (see [`signals`]).
    pub fn new() -> Outputs {
        signals::start_writing();
        Outputs { staged: Vec::new() }
    }

    /// Stages `array` as a `.npy` file for `path`.
    pub fn write_npy<A: WritableElement, D: Dimension>(
        &mut self,
        path: &Path,
        array: &Array<A, D>,
    ) -> Result<(), Failure> {
        self.stage(path, |file| {
            let mut writer = BufWriter::new(file);
            array.write_npy(&mut writer).map_err(|e| e.to_string())?;
            writer.flush().map_err(|e| e.to_string())
        })
    }

    /// Stages `bytes` (a PNG, say) for `path`.
    pub fn write_bytes(&mut self, path: &Path, bytes: &[u8]) -> Result<(), Failure> {
        self.stage(path, |mut file| file.write_all(bytes).map_err(|e| e.to_string()))
    }

    /// Writes one output to a temporary file of its own beside its target. A failure (or a
    /// signal) here has changed no output yet, and says so.
    fn stage(
        &mut self,
        path: &Path,
        write: impl FnOnce(&File) -> Result<(), String>,
    ) -> Result<(), Failure> {
        let shown = path.display().to_string();
        let cannot = |e: String| Failure::Data(format!("{shown}: cannot write: {e}"));
        let staged = (|| {
            signals::check()?;
            let target = target_of(path).map_err(cannot)?;
            let (temp, file) =
                create_beside(&target, "tmp").map_err(|e| cannot(e.to_string()))?;
            self.staged.push(Staged {
                shown: shown.clone(),
                target: target.clone(),
                temp: temp.clone(),
            });
            write(&file).map_err(cannot)?;
            file.sync_all().map_err(|e| cannot(e.to_string()))?;
            if let Ok(old) = fs::metadata(&target) {
                // The new file keeps the old one's permissions.
                fs::set_permissions(&temp, old.permissions())
                    .map_err(|e| cannot(e.to_string()))?;
            }
            signals::check()
        })();
        staged.map_err(|failure| with_rollback(failure, &[], &[]))
    }

    /// Moves every staged output into place, in order, and returns their paths as given.
    /// On an error or a signal, every output already moved is put back as it was (or removed,
    /// if it did not exist) and nothing is left behind.
    pub fn commit(mut self) -> Result<Vec<String>, Failure> {
        let staged = std::mem::take(&mut self.staged);
        let mut replaced: Vec<Replaced> = Vec::new();
        let mut failure = None;
        for (i, s) in staged.iter().enumerate() {
            if let Some(hook) = BEFORE_RENAME.get() {
                hook(i);
            }
            if let Err(f) = signals::check() {
                failure = Some(f);
                break;
            }
            match replace(s, &replaced) {
                Ok(r) => replaced.push(r),
                Err(e) => {
                    failure = Some(Failure::Data(format!("{}: cannot write: {e}", s.shown)));
                    break;
                }
            }
        }
        let Some(failure) = failure else {
            for r in &replaced {
                if let Some(backup) = &r.backup {
                    let _ = fs::remove_file(backup);
                }
            }
            return Ok(staged.into_iter().map(|s| s.shown).collect());
        };
        for s in &staged[replaced.len()..] {
            let _ = fs::remove_file(&s.temp);
        }
        let mut unrestored = Vec::new();
        for r in replaced.iter().rev() {
            let restored = match &r.backup {
                Some(backup) => fs::rename(backup, &r.target),
                None => fs::remove_file(&r.target),
            };
            if let Err(e) = restored {
                let kept = r.backup.as_ref().map_or(String::new(), |b| {
                    format!(" (its old content is in {})", b.display())
                });
                unrestored.push(format!("{} could not be restored: {e}{kept}", r.shown));
            }
        }
        Err(with_rollback(failure, &replaced, &unrestored))
    }
}

impl Drop for Outputs {
    fn drop(&mut self) {
        for s in self.staged.drain(..) {
            let _ = fs::remove_file(&s.temp);
        }
        signals::stop_writing();
    }
}

/// Adds to a failure's message what the rollback did.
fn with_rollback(failure: Failure, replaced: &[Replaced], unrestored: &[String]) -> Failure {
    let note = if !unrestored.is_empty() {
        format!("; {}", unrestored.join("; "))
    } else if replaced.is_empty() {
        "; no output was changed".to_string()
    } else {
        let names: Vec<&str> = replaced.iter().map(|r| r.shown.as_str()).collect();
        format!("; {} put back as it was, no output was changed", names.join(" and "))
    };
    match failure {
        Failure::Data(message) => Failure::Data(message + &note),
        Failure::Interrupted { signal, message } => {
            Failure::Interrupted { signal, message: message + &note }
        }
        usage => usage,
    }
}

/// Moves one staged output into place, keeping the old file (if any) as a backup first.
fn replace(s: &Staged, replaced: &[Replaced]) -> Result<Replaced, String> {
    let backup = match fs::symlink_metadata(&s.target) {
        Ok(m) if m.is_dir() => return Err("it is a directory".into()),
        Ok(_) => {
            // Two spellings the first check could not tell apart (a case-insensitive file
            // system, say) show up here as the same inode.
            let id = Identity::of(&s.target);
            if let Some(earlier) =
                replaced.iter().find(|r| Identity::of(&r.target).same_file(&id))
            {
                return Err(format!("it is the same file as {}", earlier.shown));
            }
            Some(
                keep_old(&s.target)
                    .map_err(|e| format!("cannot keep its old content: {e}"))?,
            )
        }
        Err(_) => None,
    };
    if let Err(e) = fs::rename(&s.temp, &s.target) {
        if let Some(backup) = &backup {
            let _ = fs::remove_file(backup);
        }
        let _ = fs::remove_file(&s.temp);
        return Err(e.to_string());
    }
    Ok(Replaced { shown: s.shown.clone(), target: s.target.clone(), backup })
}

/// A second name for the file at `target`, beside it: a hard link, or a copy where the file
/// system has no hard links.
fn keep_old(target: &Path) -> std::io::Result<PathBuf> {
    for n in 0.. {
        let backup = beside(target, n, "bak");
        match fs::hard_link(target, &backup) {
            Ok(()) => return Ok(backup),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(_) => break,
        }
    }
    let (backup, mut file) = create_beside(target, "bak")?;
    std::io::copy(&mut File::open(target)?, &mut file)?;
    file.sync_all()?;
    Ok(backup)
}

/// Where an output goes: the file itself, or the file a symbolic link points to.
fn target_of(path: &Path) -> Result<PathBuf, String> {
    if path.file_name().is_none() {
        return Err("not a file name".into());
    }
    match fs::metadata(path) {
        Ok(m) if m.is_dir() => Err("it is a directory".into()),
        Ok(_) => fs::canonicalize(path).map_err(|e| e.to_string()),
        Err(_) => Ok(path.to_path_buf()),
    }
}

/// `.NAME.PID.N.EXT` beside `target`.
fn beside(target: &Path, n: usize, ext: &str) -> PathBuf {
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    target.with_file_name(format!(".{name}.{}.{n}.{ext}", std::process::id()))
}

/// Creates a new, empty file `.NAME.PID.N.EXT` beside `target`, with a number `N` no other
/// file there has.
fn create_beside(target: &Path, ext: &str) -> std::io::Result<(PathBuf, File)> {
    for n in 0.. {
        let path = beside(target, n, ext);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    unreachable!("some number is free")
}

/// SIGINT, SIGTERM and SIGHUP during the output phase.
///
/// Outside it a signal does what it always does (the process stops: nothing has been written
/// yet, so nothing is lost). During it, the signal is recorded; the run checks for it after each
/// temporary file and before each rename, rolls back, and exits with 128 + the signal's number.
pub mod signals {
    use super::Failure;

    #[cfg(unix)]
    mod imp {
        use std::sync::Once;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

        static IDLE: AtomicBool = AtomicBool::new(true);
        static CAUGHT: AtomicUsize = AtomicUsize::new(0);
        static REGISTER: Once = Once::new();

        pub fn start_writing() {
            REGISTER.call_once(|| {
                for signal in [SIGINT, SIGTERM, SIGHUP] {
                    // Order matters: while idle the first action runs the default (stop).
                    let _ = signal_hook::flag::register_conditional_default(signal, &IDLE);
                    let _ =
                        signal_hook::flag::register_usize(signal, &CAUGHT, signal as usize);
                }
            });
            IDLE.store(false, Ordering::SeqCst);
        }

        pub fn stop_writing() {
            IDLE.store(true, Ordering::SeqCst);
        }

        pub fn caught() -> Option<(i32, &'static str)> {
            match CAUGHT.load(Ordering::SeqCst) {
                0 => None,
                s if s == SIGINT as usize => Some((SIGINT, "SIGINT")),
                s if s == SIGTERM as usize => Some((SIGTERM, "SIGTERM")),
                s => Some((s as i32, "SIGHUP")),
            }
        }
    }

    #[cfg(not(unix))]
    mod imp {
        pub fn start_writing() {}
        pub fn stop_writing() {}
        pub fn caught() -> Option<(i32, &'static str)> {
            None
        }
    }

    pub(super) use imp::{start_writing, stop_writing};

    /// Whether a signal arrived during the output phase.
    pub fn interrupted() -> bool {
        imp::caught().is_some()
    }

    /// An error if a signal arrived during the output phase.
    pub(super) fn check() -> Result<(), Failure> {
        match imp::caught() {
            None => Ok(()),
            Some((signal, name)) => Err(Failure::Interrupted {
                signal,
                message: format!("interrupted by {name} while writing the outputs"),
            }),
        }
    }
}
