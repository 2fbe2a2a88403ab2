//! Flags of the load tools (`src/bin/*-load.rs`): `--name VALUE` pairs on the command line.

use anyhow::Context;

/// The value after `name` on the command line, if it is there.
pub fn text_arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The number after `name` on the command line, `default` without one.
///
/// # Errors
/// When `name` is given without a number after it.
pub fn number_arg(name: &str, default: usize) -> anyhow::Result<usize> {
    match text_arg(name) {
        Some(v) => v.parse().with_context(|| format!("{name} needs a number")),
        None if std::env::args().any(|a| a == name) => anyhow::bail!("{name} needs a number"),
        None => Ok(default),
    }
}
