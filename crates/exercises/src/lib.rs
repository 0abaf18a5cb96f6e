//! Solutions to the book's exercises, one module per chapter.
//!
//! Each chapter shows an exercise as a stub (a signature with `todo!()`) and, folded away
//! under "Solution", the function from the module here, included by anchor. The tests beside
//! each solution are what "solved" means: a reader's own answer can be dropped in and checked
//! with `cargo test -p exercises`.

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
