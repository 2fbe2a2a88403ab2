//! `gryvia`: the command-line tool of the Gryvia GPU platform.
//!
//! A thin binary: it parses flags, calls into the libraries and maps failures to a one-line
//! message and a non-zero exit code.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

mod apikey;
mod billing;
mod gpu;
mod health;
mod jobs;
mod network;
mod output;
mod progress;
mod serve;
mod tenant;
mod tune;
mod workspace;

/// Gryvia: GPU clusters on Kubernetes.
#[derive(Parser, Debug)]
#[command(name = "gryvia", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print every Gryvia CRD as one YAML stream (`gryvia crds | kubectl apply -f -`).
    Crds {
        /// Write one file per CRD into this directory instead of printing.
        #[arg(long)]
        out_dir: Option<PathBuf>,
        /// Also write the CRD reference (one Markdown page per kind and an index) into this
        /// directory.
        #[arg(long)]
        reference_dir: Option<PathBuf>,
    },
    /// Validate Gryvia objects in YAML files against the CRD schemas (offline).
    Validate {
        /// Files to check (`-` for standard input).
        #[arg(short = 'f', long = "file", required = true)]
        files: Vec<PathBuf>,
    },
    /// Manage tenants.
    #[command(subcommand)]
    Tenant(tenant::TenantCommand),
    /// Show a tenant's quota and usage.
    Quota {
        /// Tenant name.
        name: String,
        /// Also show the tenant's budgets.
        #[arg(long)]
        budget: bool,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = output::Output::Table)]
        output: output::Output,
    },
    /// Show the health of GPU nodes (health checks, verdicts), storage and networks.
    Health {
        /// Only this part.
        #[arg(value_enum)]
        scope: Option<health::HealthScope>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = output::Output::Table)]
        output: output::Output,
    },
    /// Network intelligence: the service graph.
    #[command(subcommand)]
    Network(network::NetworkCommand),
    /// Distributed training jobs' communication: ranks, stragglers, NCCL.
    #[command(subcommand)]
    Gpu(gpu::GpuCommand),
    /// Show one object in detail.
    #[command(subcommand)]
    Get(health::GetCommand),
    /// Take a node out of service (cordon, drain) and return it.
    #[command(subcommand)]
    Maintenance(health::MaintenanceCommand),
    /// Submit AI jobs from a YAML file or a template.
    Submit(jobs::SubmitArgs),
    /// Show an AI job: phase, conditions, workers, retries and failures.
    Status {
        /// Job name.
        name: String,
        /// Namespace (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = output::Output::Table)]
        output: output::Output,
    },
    /// Print the logs of an AI job's workers (the newest attempt of each).
    Logs {
        /// Job name.
        name: String,
        /// Namespace (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Only the last N lines of each worker.
        #[arg(long)]
        tail: Option<i64>,
        /// Keep streaming.
        #[arg(short, long)]
        follow: bool,
        /// Only this worker (its index).
        #[arg(long)]
        worker: Option<u32>,
    },
    /// Jobs waiting for GPUs, and why.
    Queue {
        /// Namespace (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Do not list: say when the job of `-f` would start if it were submitted now (its
        /// queue, position, why and expected start); creates nothing.
        #[arg(long, requires = "file", conflicts_with = "all_namespaces")]
        what_if: bool,
        /// The GryviaAIJob (YAML) for `--what-if`.
        #[arg(short = 'f', long, requires = "what_if")]
        file: Option<PathBuf>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = output::Output::Table)]
        output: output::Output,
    },
    /// Free GPUs by type (and by node).
    Capacity {
        /// Also list every node.
        #[arg(long)]
        nodes: bool,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = output::Output::Table)]
        output: output::Output,
    },
    /// A tenant's spend, GPU-hours and forecast in the current period, from its usage records.
    Cost {
        /// Tenant name.
        name: String,
        /// The period.
        #[arg(long, value_enum, default_value = "month")]
        period: billing::CostPeriod,
        /// Also list the spend by SKU and by job.
        #[arg(long)]
        detailed: bool,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = output::Output::Table)]
        output: output::Output,
    },
    /// API keys of the gateway: create (shown once), list, revoke.
    #[command(subcommand)]
    Apikey(apikey::ApiKeyCommand),
    /// Tenants' invoices (priced by the quota-operator's `--invoices`).
    #[command(subcommand)]
    Invoice(billing::InvoiceCommand),
    /// Hyperparameter studies (GryviaAutoTuners).
    #[command(subcommand)]
    Tune(tune::TuneCommand),
    /// Model registries: versions, stages, the audit trail, promotion.
    #[command(subcommand)]
    Model(serve::ModelCommand),
    /// Inference services: what is served, the canary's checks and decision.
    #[command(subcommand)]
    Serve(serve::ServeCommand),
    /// GPU notebooks and code-server workspaces: list, start, stop, open.
    #[command(subcommand)]
    Workspace(workspace::WorkspaceCommand),
    /// Print a shell completion script (`source <(gryvia completion bash)`).
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// This client's version, the API server's, and the version of the Gryvia CRDs installed.
    Version {
        /// Only this client's version (no cluster needed).
        #[arg(long)]
        client: bool,
    },
    /// Install or update the CRDs in the cluster and wait until they are Established.
    Install {
        /// Seconds to wait for the CRDs to become Established.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp
                    | clap::error::ErrorKind::DisplayVersion
                    | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            e.exit()
        }
        Err(e) => {
            // One line, as promised for bad input; `--help` has the details.
            // clap lists missing arguments on the lines after the first: they are the point.
            let text = e.to_string();
            let line: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|l| !l.is_empty() && !l.starts_with("Usage:"))
                .collect();
            let line = if line.is_empty() {
                "invalid arguments".to_owned()
            } else {
                line.join(" ")
            };
            eprintln!("{line} (see --help)");
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, each said once: a cause whose text its wrapper already
/// printed (kube's errors embed their sources) is left out.
fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        let text = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// Writes `(name, text)` files into `dir` (created when missing).
fn write_files(dir: &std::path::Path, files: Vec<(String, String)>) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Crds {
            out_dir,
            reference_dir,
        } => {
            if let Some(dir) = &reference_dir {
                write_files(dir, gryvia_types::reference::pages())?;
            }
            match out_dir {
                Some(dir) => {
                    let mut files = Vec::new();
                    for crd in gryvia_types::crds::all() {
                        files.push((
                            gryvia_types::crds::file_name(&crd),
                            gryvia_types::crds::to_yaml(&crd)?,
                        ));
                    }
                    write_files(&dir, files)
                }
                None if reference_dir.is_some() => Ok(()),
                None => print_out(&gryvia_types::crds::all_yaml()?),
            }
        }
        Command::Validate { files } => validate(&files),
        Command::Tenant(cmd) => block_on(tenant::run(cmd)),
        Command::Quota {
            name,
            budget,
            output,
        } => block_on(tenant::quota(&name, budget, output)),
        Command::Health { scope, output } => block_on(health::health(scope, output)),
        Command::Get(health::GetCommand::Node { name, output }) => {
            block_on(health::get_node(&name, output))
        }
        Command::Maintenance(cmd) => block_on(health::maintenance(cmd)),
        Command::Network(cmd) => block_on(network::run(cmd)),
        Command::Gpu(cmd) => block_on(gpu::run(cmd)),
        Command::Submit(args) => block_on(jobs::submit(args)),
        Command::Status {
            name,
            namespace,
            output,
        } => block_on(jobs::status(&name, namespace, output)),
        Command::Logs {
            name,
            namespace,
            tail,
            follow,
            worker,
        } => block_on(jobs::logs(&name, namespace, tail, follow, worker)),
        Command::Queue {
            namespace,
            all_namespaces: _,
            what_if: true,
            file: Some(file),
            output,
        } => block_on(jobs::what_if(&file, namespace, output)),
        Command::Queue {
            namespace,
            all_namespaces,
            output,
            ..
        } => block_on(jobs::queue(namespace, all_namespaces, output)),
        Command::Capacity { nodes, output } => block_on(jobs::capacity(output, nodes)),
        Command::Invoice(cmd) => block_on(billing::run(cmd)),
        Command::Apikey(cmd) => block_on(apikey::run(cmd)),
        Command::Tune(cmd) => block_on(tune::run(cmd)),
        Command::Model(cmd) => block_on(serve::run_model(cmd)),
        Command::Serve(cmd) => block_on(serve::run_serve(cmd)),
        Command::Workspace(cmd) => block_on(workspace::run(cmd)),
        Command::Cost {
            name,
            period,
            detailed,
            output,
        } => block_on(billing::cost(&name, period, detailed, output)),
        Command::Completion { shell } => {
            use clap::CommandFactory;
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "gryvia", &mut out);
            print_out(&String::from_utf8_lossy(&out))
        }
        Command::Version { client } => {
            println!("client: gryvia {}", env!("CARGO_PKG_VERSION"));
            if client {
                return Ok(());
            }
            block_on(server_version())
        }
        Command::Install { timeout } => block_on(async {
            let client = gryvia_client::connect().await?;
            // A spinner on a terminal; nothing in a pipe, where the result line says it all.
            let progress = progress::Progress::start("waiting for the CRDs to be Established");
            let names =
                gryvia_client::crds::install(&client, std::time::Duration::from_secs(timeout))
                    .await;
            progress.finish();
            println!("{} CRDs installed and Established", names?.len());
            anyhow::Ok(())
        }),
    }
}

/// The API server's version and the Gryvia CRDs installed there: their version label, how many
/// of this client's kinds are there and Established, and any this client does not know.
async fn server_version() -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let client = gryvia_client::connect().await?;
    let info = client
        .apiserver_version()
        .await
        .context("read the API server's version")?;
    println!("server: Kubernetes {}", info.git_version);
    let crds = kube::Api::<CustomResourceDefinition>::all(client)
        .list(&kube::api::ListParams::default().labels(gryvia_types::crds::PART_OF_SELECTOR))
        .await
        .context("list the Gryvia CRDs")?;
    let report = gryvia_types::crds::installed_report(&crds.items);
    println!("crds:   {report}");
    Ok(())
}

/// The namespaced object `name` of kind `K` in `ns`; a one-line error naming it when it cannot
/// be read or does not exist.
pub async fn get_named<K>(api: &kube::Api<K>, ns: &str, name: &str) -> anyhow::Result<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let kind = K::kind(&());
    api.get_opt(name)
        .await
        .with_context(|| format!("read {kind} {ns}/{name}"))?
        .with_context(|| format!("{kind} {ns}/{name} not found"))
}

fn block_on(fut: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    tokio::runtime::Runtime::new()
        .context("start the async runtime")?
        .block_on(fut)
}

/// Writes to standard output; a closed pipe (`gryvia crds | head`) is not an error.
pub(crate) fn print_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("write standard output")
        }
        _ => Ok(()),
    }
}

/// The YAML documents of `file` (`-`: standard input) as JSON values.
pub(crate) fn read_documents(file: &std::path::Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("read standard input")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?
    };
    gryvia_types::validation::parse_yaml_documents(&text)
        .with_context(|| format!("parse {}", file.display()))
}

fn validate(files: &[PathBuf]) -> anyhow::Result<()> {
    let validator = gryvia_types::validation::Validator::new()?;
    let mut checked = 0usize;
    let mut failures = Vec::new();
    for file in files {
        for doc in read_documents(file)? {
            checked += 1;
            if let Err(e) = validator.validate(&doc) {
                failures.push(format!("{}: {e}", file.display()));
            }
        }
    }
    if failures.is_empty() {
        println!("{checked} object(s) valid");
        Ok(())
    } else {
        anyhow::bail!("{}", failures.join(" | "))
    }
}
