//! The book's exercises: a place for your attempts, a check for each exercise, and the
//! solutions, one module per chapter.
//!
//! Each chapter shows its exercises as stubs, signatures whose body is `todo!()`. The stubs
//! are the files `src/attempts/chNN.rs` of this crate: write your answer there, in place of
//! the `todo!()`, and check it:
//!
//! ```text
//! cargo test -p exercises attempts::ch04 -- --ignored    # the exercises of chapter 4
//! cargo test -p exercises sliding_window -- --ignored    # one exercise
//! ```
//!
//! The attempts are compiled for tests only, and their tests are marked `#[ignore]`, so that
//! `cargo test --workspace` passes while the stubs are untouched; `-- --ignored` runs them,
//! and only them. Each runs the
//! chapter's check on your function, for example [`ch04::check_sliding_window`]: it tries the
//! function on a list of cases and fails on the first one it gets wrong, saying what went in,
//! what came back and what was expected.
//!
//! The solutions are the other functions of the chapter modules, such as
//! [`ch04::sliding_window`]; the book folds them away under "Solution". The chapters' tests,
//! `cargo test -p exercises ch04`, run every check on the solution, which must pass, and on
//! the classic wrong answers of that exercise (a mask of the wrong polarity, a window one
//! token too wide, a sum that is never rescaled, ...), which it must reject: a check that
//! accepted the classic mistake would not be worth passing.

#![doc(test(attr(deny(warnings))))]
#![warn(missing_docs)]

pub mod ch01;
pub mod ch02;
pub mod ch03;
pub mod ch04;
pub mod ch05;
pub mod ch06;
pub mod ch07;
pub mod ch08;
pub mod ch09;
pub mod ch10;
pub mod ch11;
pub mod ch12;
pub mod ch13;
pub mod ch14;
pub mod ch15;
pub mod ch16;

#[cfg(test)]
mod attempts;

use std::fmt::Display;
use std::panic::{AssertUnwindSafe, catch_unwind};

use attention::projection::Linear;
use ndarray::{Array2, ArrayRef, ArrayRef2, Dimension};

/// Runs one call of a candidate answer, turning a panic into a message that names the call
/// (`what`, e.g. `sliding_window(4, 4)`).
fn call<T>(what: impl Display, f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string());
        if message.starts_with("not yet implemented") {
            format!("{what} reached a todo!() ({message}): write your answer in its place.")
        } else {
            format!("{what} panicked: {message}")
        }
    })
}

/// What a candidate answer can return where [`refuses`] expects an error, in words.
trait Answer {
    /// A short description, e.g. `a matrix of shape [2, 3]`.
    fn described(&self) -> String;
}

impl Answer for Array2<f64> {
    fn described(&self) -> String {
        format!("a matrix of shape {:?}", self.shape())
    }
}

impl Answer for Linear<f32> {
    fn described(&self) -> String {
        format!("a Linear with W: ({}, {})", self.d_in(), self.d_out())
    }
}

/// `Ok` if `f` (one call of a candidate answer, named by `what`) refuses its input with an
/// error; a panic, or a value where the error should be, is a message saying `why` the input
/// must be refused.
fn refuses<T: Answer, E>(
    what: &str,
    why: &str,
    f: impl FnOnce() -> Result<T, E>,
) -> Result<(), String> {
    let result = call(what, f)
        .map_err(|panic| format!("{panic}; it should return an error ({why})"))?;
    match result {
        Ok(got) => {
            Err(format!("{what} returned {} instead of an error ({why})", got.described()))
        }
        Err(_) => Ok(()),
    }
}

/// Whether `value` is `target` or within `tolerance` of it (never, for NaN).
fn within(value: f64, target: f64, tolerance: f64) -> bool {
    value == target || (value - target).abs() < tolerance
}

/// `Ok` if `got` has `expected`'s shape and every entry equals its counterpart or is within
/// `tolerance` of it; otherwise a message with both arrays, starting with `what` (the call
/// that returned `got`).
/// NaN is never within any tolerance.
fn close<D: Dimension>(
    what: &str,
    got: &ArrayRef<f64, D>,
    expected: &ArrayRef<f64, D>,
    tolerance: f64,
) -> Result<(), String>
where
    D::Pattern: std::fmt::Debug,
{
    if got.shape() != expected.shape() {
        return Err(format!(
            "{what} has shape {:?}, expected {:?}:\n{got:.6}",
            got.shape(),
            expected.shape()
        ));
    }
    let worst = got
        .indexed_iter()
        .zip(expected.iter())
        .find(|&((_, &g), &e)| !within(g, e, tolerance));
    match worst {
        None => Ok(()),
        Some(((at, &g), &e)) => {
            let allowed = match tolerance {
                0.0 => "the check allows no difference".to_string(),
                _ => format!("the check allows {tolerance:.0e}"),
            };
            Err(format!(
                "{what} is\n{got:.6}\nbut should be\n{expected:.6}\n(entry {at:?} is {g} \
                 instead of {e}, off by {:.1e}; {allowed})",
                (g - e).abs()
            ))
        }
    }
}

/// Where a mask differs from the one expected, in words, and the two side by side; `None` if
/// they are equal.
fn mask_difference(got: &ArrayRef2<bool>, expected: &ArrayRef2<bool>) -> Option<String> {
    let ((i, j), &allowed) = got.indexed_iter().zip(expected).find(|((_, g), e)| g != e)?.0;
    let words = if allowed {
        format!("lets query {i} attend to key {j}, which should be blocked")
    } else {
        format!("stops query {i} from attending to key {j}, which should be visible")
    };
    Some(format!("{words} (1 = may attend, . = blocked):\n{}", side_by_side(got, expected)))
}

/// Two boolean matrices side by side, `1` for `true` (may attend) and `.` for `false`.
fn side_by_side(got: &ArrayRef2<bool>, expected: &ArrayRef2<bool>) -> String {
    let line = |row: ndarray::ArrayView1<bool>| {
        row.iter().map(|&ok| if ok { "1" } else { "." }).collect::<Vec<_>>().join(" ")
    };
    let width = 2 * got.ncols().max(3);
    let mut text = format!("{:<width$}    expected\n", "got");
    for (g, e) in got.rows().into_iter().zip(expected.rows()) {
        text += &format!("{:<width$}    {}\n", line(g), line(e));
    }
    text
}

/// Panics with a check's message unless it passed: what the tests of the attempts call.
#[cfg(test)]
#[track_caller]
fn verdict(check: Result<(), String>) {
    if let Err(problem) = check {
        panic!("\n\n{problem}\n\n");
    }
}

/// Asserts that a check rejects a wrong answer, with a message that contains `names` (the
/// failing case).
#[cfg(test)]
#[track_caller]
fn rejects(check: Result<(), String>, names: &str) {
    match check {
        Ok(()) => panic!("the check accepted a wrong answer"),
        Err(problem) => assert!(
            problem.contains(names),
            "the check rejected the wrong answer, but its message does not mention \
             {names:?}:\n{problem}"
        ),
    }
}
