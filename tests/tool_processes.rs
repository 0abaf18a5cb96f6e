//! The reader tools as separate processes: what a shell sees.
//!
//! - exit codes (0 done, 1 bad data, 2 bad usage, 128 + N for signal N) and which stream
//!   says what;
//! - malformed `.npy` files (cut short, bits flipped, a header claiming a huge shape, random
//!   bytes), generated from a seed, fed to both tools: every run must end in exit code 0 or 1
//!   and, on 1, in exactly one line `error: ...` naming the file; never a panic, an abort or a
//!   signal;
//! - SIGINT, SIGTERM and SIGHUP, and an error, between two outputs: every output already
//!   replaced is put back, byte for byte;
//! - SIGKILL between two outputs, and at random moments of a run: each output is then either
//!   its old file or the complete new one, never a torn one;
//! - `attend --grad-out`: its exit codes, and its three outputs rolled back like the others;
//! - `multihead --view`: a signal before the page is in place leaves no page behind.
//!
//! This test has its own `main` (`harness = false` in Cargo.toml): run with `--as-tool NAME`,
//! the binary *is* the tool, so the tests need no separately built example. Positional
//! arguments filter the checks by name: `cargo test --test tool_processes -- signal`;
//! `--list` lists them as libtest does, and `--ignored` runs none (none is ignored).

#[allow(dead_code)]
#[path = "../examples/reader_tools/mod.rs"]
mod reader_tools;
mod support;
#[allow(dead_code)]
#[path = "../examples/common/mod.rs"]
mod common;

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use ndarray::{Array, Array2};
use ndarray_npy::write_npy;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{files, fixture, layer_args, self_attention_args};
use tempfile::TempDir;

/// The environment variable that gives a child a hook between two outputs:
/// `pause:N:READY` (before output N, create the file READY and wait for a signal),
/// `mkdir:N:PATH` (before output N, make PATH a directory, so that writing output N fails).
const HOOK: &str = "TOOL_PROCESSES_HOOK";

/// How many runs are killed at random moments (Appendix C quotes it).
const KILLS: usize = 40;

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "--as-tool") {
        child(args);
    }
    if args.get(1).is_some_and(|a| a == "--as-chapter") {
        // What every chapter example's main does after drawing: print its report through
        // common::render_into (a report longer than a pipe's buffer).
        let dir = std::path::PathBuf::from(&args[2]);
        common::render_into(&dir, |dir| {
            let report = dir.join("chXX_output.txt");
            std::fs::write(&report, "a line of the report\n".repeat(20_000))?;
            Ok(vec![report])
        })
        .unwrap();
        std::process::exit(0);
    }
    let filters: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .filter(|a| !a.starts_with('-'))
        .collect();
    let checks: &[(&str, fn())] = &[
        ("exit_codes_and_streams", exit_codes_and_streams),
        ("malformed_files_end_in_one_error_line", malformed_files_end_in_one_error_line),
        ("a_signal_between_two_outputs_rolls_back", a_signal_between_two_outputs_rolls_back),
        ("an_error_between_two_outputs_rolls_back", an_error_between_two_outputs_rolls_back),
        (
            "a_hard_kill_leaves_each_output_old_or_whole",
            a_hard_kill_leaves_each_output_old_or_whole,
        ),
        ("gradients_exit_codes_and_rollback", gradients_exit_codes_and_rollback),
        ("an_interrupted_head_view_leaves_no_page", an_interrupted_head_view_leaves_no_page),
        ("a_closed_stdout_ends_quietly", a_closed_stdout_ends_quietly),
        ("sizes_are_checked_from_the_headers", sizes_are_checked_from_the_headers),
        ("no_progress_line_off_a_terminal", no_progress_line_off_a_terminal),
        ("a_gpu_run_prints_no_mesa_error", a_gpu_run_prints_no_mesa_error),
    ];
    let flag = |f: &str| args.iter().any(|a| a == f);
    if flag("--list") {
        // libtest's listing, for runners that ask (cargo nextest): one check per line.
        for (name, _) in checks {
            println!("{name}: test");
        }
        return;
    }
    if flag("--ignored") {
        println!("tool_processes: none of its checks is ignored, so none runs with --ignored");
        return;
    }
    let mut ran = 0;
    for (name, check) in checks {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        println!("test {name} ...");
        check();
        println!("test {name} ... ok");
        ran += 1;
    }
    println!("\ntool_processes: {ran} checks passed");
}

/// The child: `--as-tool attend|multihead ARGS...` runs the tool on ARGS and exits as it would.
fn child(args: Vec<OsString>) -> ! {
    let name = args[2].to_string_lossy().into_owned();
    let run: reader_tools::Run = match name.as_str() {
        "attend" => reader_tools::attend::run,
        "multihead" => reader_tools::multihead::run,
        other => panic!("no tool {other}"),
    };
    if std::env::var_os(HOOK).is_some() {
        let _ = reader_tools::outputs::BEFORE_RENAME.set(hook);
    }
    let tool_args: Vec<OsString> =
        std::iter::once(OsString::from(&name)).chain(args[3..].iter().cloned()).collect();
    std::process::exit(reader_tools::process(run, tool_args));
}

/// The hook `HOOK` describes (see there).
fn hook(index: usize) {
    let spec = std::env::var(HOOK).expect("set by the parent");
    let mut parts = spec.splitn(3, ':');
    let (what, at, path) =
        (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    if at.parse::<usize>().unwrap() != index {
        return;
    }
    match what {
        "pause" => {
            std::fs::write(path, b"ready").unwrap();
            let start = Instant::now();
            while !reader_tools::outputs::signals::interrupted()
                && start.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        "mkdir" => std::fs::create_dir(path).unwrap(),
        other => panic!("no hook {other}"),
    }
}

/// A tool run as a child process.
fn tool(name: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.arg("--as-tool").arg(name).args(args).env_remove(HOOK).stdin(Stdio::null());
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts a run failed on bad data: exit 1, nothing on stdout, one line `error: ...` on stderr.
fn assert_one_error_line(out: &Output, what: &str) -> String {
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(1),
        "{what}: exit status {:?}, stderr:\n{stderr}",
        out.status
    );
    assert!(stdout.is_empty(), "{what}: stdout should be empty: {stdout}");
    assert!(stderr.starts_with("error: ") && stderr.ends_with('\n'), "{what}: {stderr:?}");
    assert_eq!(stderr.lines().count(), 1, "{what}: one line only:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    stderr
}

fn path_in(dir: &TempDir, name: &str) -> String {
    dir.path().join(name).to_string_lossy().into_owned()
}

/// The paths of one PyTorch SDPA fixture's Q, K and V.
fn sdpa_qkv(case: &str) -> (String, String, String) {
    (fixture("sdpa", case, "q.npy"), fixture("sdpa", case, "k.npy"), fixture("sdpa", case, "v.npy"))
}

fn exit_codes_and_streams() {
    let dir = TempDir::new().unwrap();
    let case = "f64_causal_L6_dk8";
    let (q, k, v) = sdpa_qkv(case);
    let out = path_in(&dir, "out.npy");

    let done =
        tool("attend", &["--q", &q, "--k", &k, "--v", &v, "--out", &out]).output().unwrap();
    assert_eq!(done.status.code(), Some(0));
    assert!(done.stderr.is_empty(), "{}", text(&done.stderr));
    assert!(
        text(&done.stdout).starts_with("attention (plain)")
            && text(&done.stdout).lines().count() == 1
    );

    let missing = path_in(&dir, "missing.npy");
    let bad = tool("attend", &["--q", &missing, "--k", &k, "--v", &v, "--out", &out])
        .output()
        .unwrap();
    let line = assert_one_error_line(&bad, "missing file");
    assert!(line.starts_with(&format!("error: {missing}: cannot read")), "{line}");

    for (name, args) in [
        ("attend", vec!["--q", &q, "--k", &k, "--v", &v]),
        ("attend", vec!["--q", &q, "--k", &k, "--v", &v, "--out", &q]),
        ("multihead", vec!["--x", &q, "--heads", "0"]),
    ] {
        let usage = tool(name, &args).output().unwrap();
        let stderr = text(&usage.stderr);
        assert_eq!(usage.status.code(), Some(2), "{name} {args:?}: {stderr}");
        assert!(usage.stdout.is_empty());
        assert!(
            stderr.starts_with("error: ")
                && stderr.contains("For more information, try '--help'."),
            "{stderr}"
        );
    }
    // multihead's Part II options: usage errors found after parsing (a mask file with
    // --decode, G not dividing H) and by the parsers (W = 0, a base of 1) all end the same way,
    // and nothing is written.
    let case = "f64_d8_h2_batch3_L6_padding";
    let mask = fixture("mha", case, "mask.npy");
    let mut layer = layer_args("mha", case, "x_q.npy");
    let mh_out = path_in(&dir, "multihead.npy");
    layer.extend([
        "--heads".to_string(),
        "2".to_string(),
        "--out".to_string(),
        mh_out.clone(),
    ]);
    for (extra, first_line) in [
        (
            vec!["--decode", "--mask", &mask],
            "error: --decode computes causal attention through a KV cache",
        ),
        (vec!["--kv-heads", "4"], "error: --kv-heads 4 does not divide --heads 2"),
        (vec!["--mask", "window:0"], "error: invalid value 'window:0' for '--mask"),
        (vec!["--rope", "--rope-base", "1"], "error: invalid value '1' for '--rope-base <B>'"),
    ] {
        let mut args: Vec<&str> = layer.iter().map(String::as_str).collect();
        args.extend(&extra);
        let usage = tool("multihead", &args).output().unwrap();
        let stderr = text(&usage.stderr);
        assert_eq!(usage.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(usage.stdout.is_empty(), "{extra:?}: {}", text(&usage.stdout));
        assert!(stderr.lines().next().unwrap().starts_with(first_line), "{extra:?}: {stderr}");
        assert!(stderr.ends_with("For more information, try '--help'.\n"), "{stderr}");
        assert!(!Path::new(&mh_out).exists(), "{extra:?}: nothing is written");
    }
    for name in ["attend", "multihead"] {
        let help = tool(name, &["--help"]).output().unwrap();
        assert_eq!(help.status.code(), Some(0));
        assert!(help.stderr.is_empty());
        assert!(
            text(&help.stdout).contains(&format!("Usage: {name} [OPTIONS]")),
            "{}",
            text(&help.stdout)
        );
        let version = tool(name, &["--version"]).output().unwrap();
        assert_eq!(version.status.code(), Some(0));
        assert_eq!(text(&version.stdout), format!("{name} {}\n", env!("CARGO_PKG_VERSION")));
    }
}

/// One way to break a file.
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// Keep the first n bytes.
    Cut(usize),
    /// Flip these bits (byte, bit).
    Flip([(usize, u8); 3]),
    /// Rewrite the header to claim this shape, keeping its length.
    Claim(usize, usize),
    /// Replace the file by n random bytes from this seed.
    Noise(usize, u64),
}

fn damage(good: &[u8], how: Damage) -> Vec<u8> {
    match how {
        Damage::Cut(n) => good[..n.min(good.len())].to_vec(),
        Damage::Flip(bits) => {
            let mut bytes = good.to_vec();
            for (at, bit) in bits {
                let at = at % bytes.len();
                bytes[at] ^= 1 << bit;
            }
            bytes
        }
        Damage::Claim(a, b) => {
            let header_len = u16::from_le_bytes([good[8], good[9]]) as usize;
            let header =
                format!("{{'descr': '<f8', 'fortran_order': False, 'shape': ({a}, {b}), }}");
            let mut bytes = good[..10].to_vec();
            bytes.extend(format!("{header:<width$}\n", width = header_len - 1).as_bytes());
            bytes.extend(&good[10 + header_len..]);
            bytes
        }
        Damage::Noise(n, seed) => {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..n).map(|_| rng.random::<u8>()).collect()
        }
    }
}

fn malformed_files_end_in_one_error_line() {
    let dir = TempDir::new().unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let sdpa = "f64_causal_L6_dk8";
    let mha = "f64_d8_h2_batch3_L6_padding";
    // (tool, the arguments with one input replaced by BAD, the good file BAD is made from)
    let mut cases: Vec<(&str, Vec<String>, String)> = Vec::new();
    let attend_args = |slot: &str| {
        let mut list = Vec::new();
        for name in ["q", "k", "v"] {
            list.push(format!("--{name}"));
            list.push(if name == slot {
                "BAD".into()
            } else {
                fixture("sdpa", sdpa, &format!("{name}.npy"))
            });
        }
        list.extend([
            "--mask".into(),
            if slot == "mask" { "BAD".into() } else { "causal".into() },
        ]);
        list
    };
    for slot in ["q", "k", "v"] {
        cases.push((
            "attend",
            attend_args(slot),
            fixture("sdpa", sdpa, &format!("{slot}.npy")),
        ));
    }
    cases.push((
        "attend",
        attend_args("mask"),
        fixture("sdpa", "f64_bool_L10_dk6", "mask.npy"),
    ));
    // A damaged dO (made from the case's output, which has dO's shape and dtype).
    let mut with_grad = attend_args("");
    with_grad.extend([
        "--grad-out".into(),
        "BAD".into(),
        "--dq".into(),
        path_in(&dir, "dq.npy"),
    ]);
    cases.push(("attend", with_grad, fixture("sdpa", sdpa, "out.npy")));
    for slot in ["x", "wq", "wk", "wv", "wo", "mask"] {
        let mut list = Vec::new();
        for (flag, file) in [
            ("x", "x_q"),
            ("wq", "w_q"),
            ("wk", "w_k"),
            ("wv", "w_v"),
            ("wo", "w_o"),
            ("mask", "mask"),
        ] {
            list.push(format!("--{flag}"));
            list.push(if flag == slot {
                "BAD".into()
            } else {
                fixture("mha", mha, &format!("{file}.npy"))
            });
        }
        list.extend(["--heads".into(), "2".into()]);
        let file = match slot {
            "x" => "x_q",
            "wq" => "w_q",
            "wk" => "w_k",
            "wv" => "w_v",
            "wo" => "w_o",
            _ => "mask",
        };
        cases.push(("multihead", list, fixture("mha", mha, &format!("{file}.npy"))));
    }
    let (mut runs, mut refused, mut accepted) = (0, 0, 0);
    for (case, (name, list, good)) in cases.iter().enumerate() {
        let good = std::fs::read(good).unwrap();
        let mut damages: Vec<Damage> = Vec::new();
        for _ in 0..12 {
            damages.push(Damage::Cut(rng.random_range(0..good.len())));
        }
        damages.extend([
            Damage::Cut(0),
            Damage::Cut(5),
            Damage::Cut(10),
            Damage::Cut(good.len() - 1),
        ]);
        for _ in 0..16 {
            // Half the flips in the header, where they hurt most.
            let limit = if rng.random_bool(0.5) { 128 } else { good.len() };
            damages.push(Damage::Flip(
                [0; 3].map(|_| (rng.random_range(0..limit), rng.random_range(0..8u8))),
            ));
        }
        damages.extend([
            Damage::Claim(100_000, 100_000),
            Damage::Claim(1 << 40, 1 << 40),
            Damage::Claim(6, 9),
        ]);
        for _ in 0..3 {
            damages.push(Damage::Noise(rng.random_range(0..400), rng.random()));
        }
        for how in damages {
            let bad = path_in(&dir, &format!("bad{case}.npy"));
            std::fs::write(&bad, damage(&good, how)).unwrap();
            let out = path_in(&dir, "out.npy");
            let mut args: Vec<&str> = list
                .iter()
                .map(|a| if a == "BAD" { bad.as_str() } else { a.as_str() })
                .collect();
            args.extend(["--out", &out]);
            let result = tool(name, &args).output().unwrap();
            runs += 1;
            let what = format!(
                "{name} with {how:?} in {}",
                list[list.iter().position(|a| a == "BAD").unwrap() - 1]
            );
            assert!(
                result.status.code().is_some(),
                "{what}: killed by a signal: {:?}",
                result.status
            );
            match result.status.code() {
                Some(0) => {
                    accepted += 1; // the damage left a valid file (a flipped bit in a number)
                    assert!(result.stderr.is_empty(), "{what}: {}", text(&result.stderr));
                }
                _ => {
                    refused += 1;
                    let line = assert_one_error_line(&result, &what);
                    assert!(
                        line.contains("bad") || line.contains(&out),
                        "{what}: the message names no file: {line}"
                    );
                }
            }
        }
    }
    println!(
        "  {runs} damaged files: {refused} refused with one error line, {accepted} still valid"
    );
    assert_eq!(runs, 418, "Appendix C quotes the number of damaged files");
}

/// Old contents for the outputs, all different from anything the tools write.
fn old_outputs(dir: &TempDir, names: &[&str]) -> Vec<(String, Vec<u8>)> {
    names
        .iter()
        .map(|name| {
            let bytes = format!("the old {name}, from an earlier run").into_bytes();
            std::fs::write(dir.path().join(name), &bytes).unwrap();
            (name.to_string(), bytes)
        })
        .collect()
}

/// `attend`'s arguments for the causal fixture, writing out.npy, w.npy and w.png into `dir`.
fn causal_to_three_outputs(dir: &TempDir) -> Vec<String> {
    let case = "f64_causal_L6_dk8";
    let mut args = Vec::new();
    for name in ["q", "k", "v"] {
        args.extend([format!("--{name}"), fixture("sdpa", case, &format!("{name}.npy"))]);
    }
    args.extend(["--mask".into(), "causal".into()]);
    for (flag, name) in [("--out", "out.npy"), ("--weights", "w.npy"), ("--png", "w.png")] {
        args.extend([flag.to_string(), path_in(dir, name)]);
    }
    args
}

/// Starts the tool `name` on `args` with the hook `pause:AT` (it stops before output `at`,
/// the outputs before it in place), its stdout and stderr piped, and waits until it is there.
/// The hook's ready file lies next to `dir`, as `dir.ready`.
fn spawn_paused(name: &str, args: &[String], at: usize, dir: &TempDir) -> std::process::Child {
    let ready = dir.path().with_extension("ready");
    let _ = std::fs::remove_file(&ready);
    let child = tool(name, &args.iter().map(String::as_str).collect::<Vec<_>>())
        .env(HOOK, format!("pause:{at}:{}", ready.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !ready.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{name}: the child never reached its pause before output {at}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::remove_file(&ready).unwrap();
    child
}

/// Starts `attend` on the causal fixture writing out.npy, w.npy and w.png into `dir`, with
/// the hook `pause:1` (it stops after out.npy is in place, before w.npy), and waits until it
/// is there.
fn paused_between_outputs(dir: &TempDir) -> std::process::Child {
    spawn_paused("attend", &causal_to_three_outputs(dir), 1, dir)
}

#[cfg(unix)]
fn a_signal_between_two_outputs_rolls_back() {
    for (signal, name) in
        [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM"), (libc::SIGHUP, "SIGHUP")]
    {
        let dir = TempDir::new().unwrap();
        let old = old_outputs(&dir, &["out.npy", "w.npy", "w.png"]);
        let child = paused_between_outputs(&dir);
        assert_ne!(
            files(dir.path()).iter().find(|(n, _)| n == "out.npy").unwrap().1,
            old[0].1,
            "out.npy should be replaced by now"
        );
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let result = child.wait_with_output().unwrap();
        let stderr = text(&result.stderr);
        assert_eq!(result.status.code(), Some(128 + signal), "{name}: {stderr}");
        assert!(result.stdout.is_empty());
        assert_eq!(
            stderr,
            format!(
                "error: interrupted by {name} while writing the outputs; {} put back as it was, no output was changed\n",
                path_in(&dir, "out.npy")
            )
        );
        assert_eq!(
            files(dir.path()),
            old,
            "{name}: every output as it was, nothing left behind"
        );
    }
}

#[cfg(not(unix))]
fn a_signal_between_two_outputs_rolls_back() {}

fn an_error_between_two_outputs_rolls_back() {
    // w.npy does not exist; just before it is moved into place a directory of that name
    // appears: writing it fails, and out.npy, already replaced, is put back.
    let dir = TempDir::new().unwrap();
    let old = old_outputs(&dir, &["out.npy"]);
    let case = "f64_causal_L6_dk8";
    let (q, k, v) = sdpa_qkv(case);
    let (out, w) = (path_in(&dir, "out.npy"), path_in(&dir, "w.npy"));
    let result =
        tool("attend", &["--q", &q, "--k", &k, "--v", &v, "--out", &out, "--weights", &w])
            .env(HOOK, format!("mkdir:1:{w}"))
            .output()
            .unwrap();
    let line = assert_one_error_line(&result, "an error between outputs");
    assert_eq!(
        line,
        format!(
            "error: {w}: cannot write: it is a directory; {out} put back as it was, no output was changed\n"
        )
    );
    assert_eq!(files(dir.path()), old);
    assert!(Path::new(&w).is_dir());
}

/// What `attend` writes for these arguments when nothing goes wrong: output name → bytes.
fn reference(args: &[&str], outputs: &[&str], dir: &TempDir) -> Vec<Vec<u8>> {
    let result = tool("attend", args).output().unwrap();
    assert_eq!(result.status.code(), Some(0), "{}", text(&result.stderr));
    let bytes = outputs.iter().map(|o| std::fs::read(dir.path().join(o)).unwrap()).collect();
    for o in outputs {
        std::fs::remove_file(dir.path().join(o)).unwrap();
    }
    bytes
}

/// After a kill, every output is its old file or the complete new one, and any other file is
/// a leftover of the documented form `.NAME.PID.N.tmp|bak`.
fn check_after_kill(
    dir: &TempDir,
    old: &[(String, Vec<u8>)],
    new: &[Vec<u8>],
) -> Vec<&'static str> {
    let now = files(dir.path());
    let mut states = Vec::new();
    for ((name, old_bytes), new_bytes) in old.iter().zip(new) {
        let bytes =
            &now.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("{name} is gone")).1;
        states.push(if bytes == old_bytes {
            "old"
        } else if bytes == new_bytes {
            "new"
        } else {
            panic!(
                "{name} is torn: {} bytes, neither the old file nor the new one",
                bytes.len()
            )
        });
    }
    for (name, _) in &now {
        if old.iter().any(|(o, _)| o == name)
            || name.ends_with(".npy") && !name.starts_with('.')
        {
            continue;
        }
        let parts: Vec<&str> = name.split('.').collect();
        assert!(
            name.starts_with('.')
                && matches!(parts.last(), Some(&"tmp") | Some(&"bak"))
                && parts.len() >= 5,
            "unexpected leftover {name}"
        );
    }
    states
}

fn a_hard_kill_leaves_each_output_old_or_whole() {
    // Deterministic: killed between the two outputs.
    let dir = TempDir::new().unwrap();
    let names = ["out.npy", "w.npy", "w.png"];
    let args = causal_to_three_outputs(&dir);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let new = reference(&args, &names, &dir);
    let old = old_outputs(&dir, &names);
    let mut child = paused_between_outputs(&dir);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(check_after_kill(&dir, &old, &new), ["new", "old", "old"]);

    // At random moments of runs on larger inputs (L = 384, d = 64: a few hundred KiB to write).
    let dir = TempDir::new().unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    let x: Array2<f64> =
        Array::from_shape_fn((384, 64), |(i, j)| ((i * 31 + j * 17) % 97) as f64 / 97.0 - 0.5);
    let x_path = path_in(&dir, "x.npy");
    write_npy(&x_path, &x).unwrap();
    let names = ["out.npy", "w.npy"];
    let (out, w) = (path_in(&dir, "out.npy"), path_in(&dir, "w.npy"));
    let mut args = self_attention_args(&x_path);
    args.extend(["--mask", "causal", "--out", &out, "--weights", &w].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let start = Instant::now();
    let new = reference(&args, &names, &dir);
    let full = start.elapsed();
    let mut tally = std::collections::BTreeMap::new();
    for _ in 0..KILLS {
        let old = old_outputs(&dir, &names);
        let mut child =
            tool("attend", &args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        std::thread::sleep(full.mul_f64(rng.random_range(0.0..1.2)));
        let _ = child.kill();
        child.wait().unwrap();
        *tally.entry(check_after_kill(&dir, &old, &new).join("/")).or_insert(0) += 1;
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path != Path::new(&x_path) {
                std::fs::remove_file(path).unwrap();
            }
        }
    }
    println!(
        "  {KILLS} runs killed at random (one run takes {full:.0?}): out/w states {tally:?}"
    );
}

/// `attend --grad-out DO.npy --dq … --dk … --dv …` as a process: exit codes and streams, and
/// the gradients rolled back like every other output after a signal or an error.
fn gradients_exit_codes_and_rollback() {
    let dir = TempDir::new().unwrap();
    let case = "f64_causal_L6_dk8";
    let grad_o = fixture("sdpa", case, "out.npy"); // (6, 5), the output's shape and dtype
    let mut base: Vec<String> = Vec::new();
    for name in ["q", "k", "v"] {
        base.extend([format!("--{name}"), fixture("sdpa", case, &format!("{name}.npy"))]);
    }
    base.extend(["--mask".into(), "causal".into(), "--out".into(), path_in(&dir, "out.npy")]);
    let names = ["out.npy", "dq.npy", "dk.npy", "dv.npy"];
    let mut full = base.clone();
    full.extend(["--grad-out".into(), grad_o.clone()]);
    for name in &names[1..] {
        full.extend([format!("--{}", &name[..2]), path_in(&dir, name)]);
    }
    let run = |list: &[String]| {
        tool("attend", &list.iter().map(String::as_str).collect::<Vec<_>>()).output().unwrap()
    };

    let done = run(&full);
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    assert!(done.stderr.is_empty());
    let stdout = text(&done.stdout);
    assert!(
        stdout.starts_with("attention (plain) and its backward")
            && stdout.lines().count() == 1,
        "{stdout}"
    );
    let new: Vec<Vec<u8>> =
        names.iter().map(|n| std::fs::read(dir.path().join(n)).unwrap()).collect();
    for name in names {
        std::fs::remove_file(dir.path().join(name)).unwrap();
    }

    // Usage: exit 2, clap's message on stderr, nothing written.
    let dq = path_in(&dir, "dq.npy");
    for extra in [
        vec!["--dq", &dq],
        vec!["--grad-out", &grad_o],
        vec!["--grad-out", &grad_o, "--dq", &dq, "--dk", &dq],
    ] {
        let mut list = base.clone();
        list.extend(extra.iter().map(|a| a.to_string()));
        let usage = run(&list);
        let stderr = text(&usage.stderr);
        assert_eq!(usage.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(usage.stdout.is_empty());
        assert!(
            stderr.starts_with("error: ")
                && stderr.ends_with("For more information, try '--help'.\n"),
            "{stderr}"
        );
        assert!(files(dir.path()).is_empty(), "{extra:?}: nothing is written");
    }
    // Bad data: dO of Q's shape, (6, 8): exit 1, one line, nothing written.
    let mut list = full.clone();
    let i = list.iter().position(|a| a == "--grad-out").unwrap();
    list[i + 1] = fixture("sdpa", case, "q.npy");
    let line = assert_one_error_line(&run(&list), "dO of the wrong shape");
    assert!(
        line.contains("has shape (6, 8) but the output (…, L_q, d_v) has shape (6, 5)"),
        "{line}"
    );
    assert!(files(dir.path()).is_empty(), "nothing is written");

    // A signal after out.npy and dq.npy are in place, before dk.npy: both are put back.
    #[cfg(unix)]
    for (signal, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        let mut old = old_outputs(&dir, &names);
        old.sort(); // as files() lists them
        let child = spawn_paused("attend", &full, 2, &dir);
        let now = files(dir.path());
        let dq_now = &now.iter().find(|(n, _)| n == "dq.npy").unwrap().1;
        assert_eq!(dq_now, &new[1], "{name}: dq.npy is in place when the signal comes");
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let result = child.wait_with_output().unwrap();
        assert_eq!(result.status.code(), Some(128 + signal), "{}", text(&result.stderr));
        assert_eq!(
            text(&result.stderr),
            format!(
                "error: interrupted by {name} while writing the outputs; {} and {} put back as \
                 it was, no output was changed\n",
                path_in(&dir, "out.npy"),
                path_in(&dir, "dq.npy")
            )
        );
        assert_eq!(files(dir.path()), old, "{name}: every output as it was");
    }

    // An error on the last gradient: the three outputs before it are put back.
    let dv = path_in(&dir, "dv.npy");
    let _ = std::fs::remove_file(&dv); // left by the signals' runs
    let mut old = old_outputs(&dir, &names[..3]);
    old.sort();
    let result = tool("attend", &full.iter().map(String::as_str).collect::<Vec<_>>())
        .env(HOOK, format!("mkdir:3:{dv}"))
        .output()
        .unwrap();
    let line = assert_one_error_line(&result, "an error on dv.npy");
    assert_eq!(
        line,
        format!(
            "error: {dv}: cannot write: it is a directory; {} and {} and {} put back as it \
             was, no output was changed\n",
            path_in(&dir, "out.npy"),
            path_in(&dir, "dq.npy"),
            path_in(&dir, "dk.npy")
        )
    );
    std::fs::remove_dir(&dv).unwrap();
    assert_eq!(files(dir.path()), old);
}

/// `multihead --out out.npy --view view.html`, interrupted before each of its two outputs is
/// moved into place: out.npy keeps its old bytes, and no page (nor a temporary file) is left.
#[cfg(unix)]
fn an_interrupted_head_view_leaves_no_page() {
    let case = "f64_d12_h3_L6_causal";
    for (at, put_back) in [(0, false), (1, true)] {
        let dir = TempDir::new().unwrap();
        let old = old_outputs(&dir, &["out.npy"]);
        let (out, page) = (path_in(&dir, "out.npy"), path_in(&dir, "view.html"));
        let mut args = layer_args("mha", case, "x_q.npy");
        args.extend(["--heads", "3", "--out", &out, "--view", &page].map(String::from));
        let child = spawn_paused("multihead", &args, at, &dir);
        assert!(!Path::new(&page).exists(), "the page is not in place before its rename");
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
        let result = child.wait_with_output().unwrap();
        assert_eq!(result.status.code(), Some(130), "{}", text(&result.stderr));
        let note = if put_back {
            format!("{out} put back as it was, no output was changed")
        } else {
            "no output was changed".to_string()
        };
        assert_eq!(
            text(&result.stderr),
            format!("error: interrupted by SIGINT while writing the outputs; {note}\n")
        );
        assert_eq!(files(dir.path()), old, "before output {at}: out.npy as it was, no page");
    }
}

#[cfg(not(unix))]
fn an_interrupted_head_view_leaves_no_page() {}

/// A reader that stops reading (`| head -1`, `| true`) ends a tool or a chapter example
/// quietly: exit code 0 and nothing on stderr, not the panic "failed printing to stdout:
/// Broken pipe" and exit code 101.
fn a_closed_stdout_ends_quietly() {
    let dir = TempDir::new().unwrap();
    let case = "f64_causal_L6_dk8";
    let (q, k, v) = sdpa_qkv(case);
    let out = path_in(&dir, "out.npy");
    let mut tool_run = tool("attend", &["--q", &q, "--k", &k, "--v", &v, "--out", &out]);
    let mut chapter = Command::new(std::env::current_exe().unwrap());
    chapter.arg("--as-chapter").arg(dir.path()).stdin(Stdio::null());
    for (what, cmd) in [("attend", &mut tool_run), ("a chapter example", &mut chapter)] {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take()); // the reader is gone before the child prints anything
        let done = child.wait_with_output().unwrap();
        let stderr = text(&done.stderr);
        assert_eq!(done.status.code(), Some(0), "{what}: {:?}, stderr:\n{stderr}", done.status);
        assert!(stderr.is_empty(), "{what}: nothing on stderr, got:\n{stderr}");
    }
    assert!(Path::new(&out).exists(), "the output was written before the summary");
}

/// Sizes that follow from the headers are refused before the data is read, so before any
/// work: a (200000, 8) query whose weights would take 160000000000 bytes, and PNGs of 4
/// heads of 5000 tokens and of 8 heads of 1500. The values file holds a NaN, which loading
/// the data would report: the size error comes first, from the headers.
fn sizes_are_checked_from_the_headers() {
    let dir = TempDir::new().unwrap();
    let nan_v = |shape: &[usize]| {
        let mut v = ndarray::ArrayD::<f32>::zeros(ndarray::IxDyn(shape));
        v.as_slice_mut().unwrap()[0] = f32::NAN;
        v
    };
    let q = path_in(&dir, "q.npy");
    write_npy(&q, &Array2::<f32>::zeros((200_000, 8))).unwrap();
    let v = path_in(&dir, "v.npy");
    write_npy(&v, &nan_v(&[200_000, 8])).unwrap();
    let out = path_in(&dir, "out.npy");
    for extra in [&["--weights", &path_in(&dir, "w.npy")][..], &["--impl", "plain"]] {
        let mut list = vec!["--q", &q, "--k", &q, "--v", &v, "--out", &out];
        list.extend(extra);
        let done = tool("attend", &list).output().unwrap();
        let line = assert_one_error_line(&done, "weights too large");
        assert!(
            line.contains("the weights (200000, 200000) would take 160000000000 bytes")
                && line.contains("limit of 2147483648 bytes (2 GiB)")
                && line.contains("--impl tiled"),
            "{line}"
        );
    }
    let q4 = path_in(&dir, "q4.npy");
    write_npy(&q4, &ndarray::Array4::<f32>::zeros((1, 4, 5000, 16))).unwrap();
    let v4 = path_in(&dir, "v4.npy");
    write_npy(&v4, &nan_v(&[1, 4, 5000, 16])).unwrap();
    let png = path_in(&dir, "w.png");
    let list = ["--q", &q4, "--k", &q4, "--v", &v4, "--out", &out, "--png", &png];
    let line = assert_one_error_line(&tool("attend", &list).output().unwrap(), "a huge PNG");
    assert!(line.contains("would make a picture of 20289 × 20285 pixels"), "{line}");
    assert!(line.contains("more than the figures' limit of 8000 pixels a side"), "{line}");
    assert!(!Path::new(&out).exists() && !Path::new(&png).exists());
    // 8 heads of 1500 tokens: 2 panels of 3000 pixels across fit, but they are laid out 2
    // to a row, so 4 rows of 3000 pixels and their titles and labels go down.
    let q8 = path_in(&dir, "q8.npy");
    write_npy(&q8, &ndarray::Array4::<f32>::zeros((1, 8, 1500, 16))).unwrap();
    let v8 = path_in(&dir, "v8.npy");
    write_npy(&v8, &nan_v(&[1, 8, 1500, 16])).unwrap();
    let list = ["--q", &q8, "--k", &q8, "--v", &v8, "--out", &out, "--png", &png];
    let line = assert_one_error_line(&tool("attend", &list).output().unwrap(), "a tall PNG");
    assert!(
        line.contains("the weights (1, 8, 1500, 1500) would make a picture of 6289 × 12533"),
        "{line}"
    );
    assert!(!Path::new(&out).exists() && !Path::new(&png).exists());
    // multihead checks X's header the same way: 2 heads of 20000 tokens would take 3.2 GB
    // of weights, 2 heads of 3000 a PNG 12289 pixels wide; X holds a NaN.
    let w = path_in(&dir, "w8.npy");
    write_npy(&w, &Array2::<f32>::eye(8)).unwrap();
    for (tokens, extra, expected) in [
        (20_000, None, "x.npy: the weights (2, 20000, 20000) would take 3200000000 bytes"),
        (3000, Some(&png), "w.png: the weights (2, 3000, 3000) would make a picture of 12289"),
    ] {
        let x = path_in(&dir, "x.npy");
        write_npy(&x, &nan_v(&[tokens, 8])).unwrap();
        let mut list = vec!["--x", &x, "--wq", &w, "--wk", &w, "--wv", &w, "--wo", &w];
        list.extend(["--heads", "2", "--out", &out]);
        list.extend(extra.into_iter().flat_map(|p| ["--png", p.as_str()]));
        let done = tool("multihead", &list).output().unwrap();
        let line = assert_one_error_line(&done, "multihead too large");
        assert!(line.contains(expected), "{line}");
        assert!(!Path::new(&out).exists() && !Path::new(&png).exists());
    }
}

/// The progress line is for a terminal: with stderr a pipe, a run says nothing there, even
/// told to show the line at once.
fn no_progress_line_off_a_terminal() {
    let dir = TempDir::new().unwrap();
    let x = path_in(&dir, "x.npy");
    write_npy(&x, &Array2::<f64>::from_shape_fn((300, 4), |(i, j)| (i * j) as f64 * 1e-3))
        .unwrap();
    let out = path_in(&dir, "out.npy");
    let list = ["--q", &x, "--k", &x, "--v", &x, "--out", &out, "--impl", "tiled"];
    let done = tool("attend", &list)
        .env(reader_tools::progress::AFTER_VAR, "0")
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    assert_eq!(text(&done.stderr), "", "no progress line when stderr is not a terminal");
}

/// `--impl gpu` with no XDG_RUNTIME_DIR: Mesa's "error: XDG_RUNTIME_DIR is invalid or not
/// set" must not reach the reader; a successful run says nothing on stderr. Without a Vulkan
/// adapter the run fails with the tool's own message, which is checked to name no XDG.
fn a_gpu_run_prints_no_mesa_error() {
    let dir = TempDir::new().unwrap();
    let case = "f32_causal_L6_dk8";
    let (q, k, v) = sdpa_qkv(case);
    let out = path_in(&dir, "out.npy");
    let list = ["--q", &q, "--k", &k, "--v", &v, "--out", &out, "--impl", "gpu"];
    let done = tool("attend", &list).env_remove("XDG_RUNTIME_DIR").output().unwrap();
    let stderr = text(&done.stderr);
    assert!(!stderr.contains("XDG_RUNTIME_DIR"), "{stderr}");
    if done.status.success() {
        assert_eq!(stderr, "", "a successful gpu run says nothing on stderr");
    } else {
        println!("  (no Vulkan adapter: {})", stderr.trim());
    }
    // The private runtime directory is gone after the run, even when stdout was closed
    // before the summary (printing it ends the process); a stale one from an earlier run,
    // left in the same temporary folder, is no obstacle and is not touched.
    let tmp = TempDir::new().unwrap();
    let prefix = reader_tools::RUNTIME_DIR_PREFIX;
    let stale = tmp.path().join(format!("{prefix}stale"));
    std::fs::create_dir(&stale).unwrap();
    let mut child = tool("attend", &list)
        .env_remove("XDG_RUNTIME_DIR")
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let done = child.wait_with_output().unwrap();
    assert!(!text(&done.stderr).contains("XDG_RUNTIME_DIR"), "{}", text(&done.stderr));
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(prefix))
        .collect();
    assert_eq!(left, [format!("{prefix}stale")], "no runtime directory left behind");
}
