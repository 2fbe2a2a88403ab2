//! `gryvia-gpu-operator`: evaluates GryviaHealthChecks against the GPU observations the node
//! agents write, and (opt-in) quarantines, drains and remediates failing nodes.
//!
//! A thin binary: its flags, the controllers it composes and its run loop are
//! `gryvia_client::operators::gpu`; the policy is in `gryvia_reconcile`.

use clap::Parser;
use gryvia_client::operators::{exit_code, gpu, init_logging};

fn main() -> std::process::ExitCode {
    let flags = gpu::Flags::parse();
    init_logging(&flags.operator.log_format);
    exit_code(gpu::run(&flags))
}
