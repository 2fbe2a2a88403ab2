//! `gryvia-ai-operator`: runs GryviaAIJobs as batch Jobs, checks GryviaTemplates, makes a
//! PriorityClass of every GryviaPriority, runs GryviaWorkflows, serves the admission webhooks
//! for new jobs, and (opt-in) runs reservations and job hooks.
//!
//! A thin binary: its flags, the controllers it composes and its run loop are
//! `gryvia_client::operators::ai`; the policy is in `gryvia_reconcile`.

use clap::Parser;
use gryvia_client::operators::{ai, exit_code, init_logging};

fn main() -> std::process::ExitCode {
    let flags = ai::Flags::parse();
    init_logging(&flags.operator.log_format);
    exit_code(ai::run(&flags))
}
