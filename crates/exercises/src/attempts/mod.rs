//! Your attempts at the exercises, one file per chapter: the stubs the book shows.
//!
//! Replace a `todo!()` with your answer, then run the chapter's check on it:
//! `cargo test -p exercises attempts::ch04 -- --ignored` (or name one exercise instead of
//! `attempts::ch04`: `cargo test -p exercises sliding_window -- --ignored`).

// A stub names its arguments without using them yet, and imports what an answer needs.
#![allow(unused_variables, unused_imports)]

mod ch01;
mod ch02;
mod ch03;
mod ch04;
mod ch05;
mod ch06;
mod ch07;
mod ch08;
mod ch09;
mod ch10;
mod ch11;
mod ch12;
mod ch13;
mod ch14;
mod ch15;
mod ch16;
