//! Builds the eBPF programs (`programs/`, target `bpfel-unknown-none`) and puts the object in
//! `OUT_DIR` for `include_bytes_aligned!`.
//!
//! The programs build on the stable toolchain with `-Z build-std=core`, which needs
//! `RUSTC_BOOTSTRAP=1`; that is set for the inner cargo only, so the rest of the workspace
//! builds as plain stable. Linking needs `bpf-linker` built against rustc's LLVM and the
//! `rust-src` component: `scripts/setup` installs both.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env("OUT_DIR"));
    let programs = manifest.join("programs");
    for p in [
        "programs/src",
        "programs/Cargo.toml",
        "programs/Cargo.lock",
        "common/src",
    ] {
        println!("cargo::rerun-if-changed={}", manifest.join(p).display());
    }
    // <target>/<profile>/build/<pkg>/out -> <target>/bpf: one build shared by every profile.
    let target_dir = out
        .ancestors()
        .nth(4)
        .map(|t| t.join("bpf"))
        .unwrap_or_else(|| out.join("bpf"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(home) = cargo_home() {
        // cargo install puts bpf-linker there even when it is not on PATH.
        let mut dirs = vec![home.join("bin")];
        dirs.extend(std::env::split_paths(&path));
        path = std::env::join_paths(dirs).unwrap_or(path);
    }
    let linker_found = std::env::split_paths(&path).any(|d| d.join("bpf-linker").is_file());
    if !linker_found {
        fail(
            "bpf-linker is not installed: run scripts/setup (it builds bpf-linker 0.13.0 against rustc's LLVM)",
        );
    }
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(&programs)
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("PATH", &path)
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            "-Cdebuginfo=2\u{1f}-Clink-arg=--btf",
        );
    // What the outer build set for the host must not leak into the BPF build.
    for var in [
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_MAKEFLAGS",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| fail(&format!("run {cargo} for the eBPF programs: {e}")));
    if !status.success() {
        fail(
            "building the eBPF programs failed (see the errors above; scripts/setup installs bpf-linker and rust-src)",
        );
    }
    let object = target_dir.join("bpfel-unknown-none/release/gryvia-ebpf-programs");
    let dest = out.join("gryvia-ebpf-programs");
    if let Err(e) = std::fs::copy(&object, &dest) {
        fail(&format!(
            "copy {} to {}: {e}",
            object.display(),
            dest.display()
        ));
    }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| fail(&format!("{name} is not set (run through cargo)")))
}

fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1)
}
