//! `gryvia-ai-operator`: runs GryviaAIJobs as batch Jobs (retries, failure classification),
//! checks GryviaTemplates and makes a PriorityClass of every GryviaPriority.
//!
//! A thin binary: flags, logging, wiring. The controllers are in `gryvia_client::aijob`, the
//! policy in `gryvia_reconcile::{aijob, template, priority}`.

use anyhow::Context;
use clap::Parser;
use gryvia_client::operator::{OperatorFlags, init_logging};

/// Runs AI jobs, checks job templates and turns priority tiers into PriorityClasses.
#[derive(Parser, Debug)]
#[command(name = "gryvia-ai-operator", version, about)]
struct Flags {
    #[command(flatten)]
    operator: OperatorFlags,
}

fn main() -> std::process::ExitCode {
    let flags = Flags::parse();
    init_logging(&flags.operator.log_format);
    gryvia_client::operator::exit_code(run(flags))
}

fn run(flags: Flags) -> anyhow::Result<()> {
    gryvia_client::operator::run_blocking(
        "gryvia-ai-operator",
        &flags.operator,
        gryvia_client::aijob::controllers,
    )
    .context("operator")
}
