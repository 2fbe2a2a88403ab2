//! The node agent: reports a node's GPUs into its GryviaGpuNode and carries out the
//! remediation steps the gpu-operator requests.
//!
//! Observations come from a [`GpuSource`]: NVML on a GPU node (feature `nvml`), or a
//! [`TraceSource`] that replays a recorded or scripted trace (KWOK nodes in tests and the
//! demo). Remediation steps run through a [`RemediationExecutor`]: [`HostExecutor`] runs the
//! real commands (nvidia-smi GPU reset, NVIDIA module reload, reboot through a kured sentinel
//! or nsenter); [`DryRunExecutor`] records the commands it would run.
//!
//! # Trace format (YAML)
//! ```yaml
//! gpuCount: 8                      # GPUs per frame (default 8)
//! driverVersion: "550.54.15"       # optional
//! cudaVersion: "12.4"              # optional
//! defaults:                        # optional: fields every GPU starts from
//!   product: NVIDIA H100 80GB HBM3
//! frames:                          # played in order from the agent's start
//!   - holdSeconds: 20              # how long the frame lasts (the last lasts forever)
//!     gpus: []                     # per-GPU overrides, by index
//!   - gpus:
//!       - {index: 3, eccDoubleBit: 2, xidEvents: [{code: 48}]}
//!     observedAgeSeconds: 0        # optional: backdate observedAt (a frozen reading), 0-10 years
//! afterRemediation:                # optional: frames played once a step of this kind succeeds
//!   gpu-reset:
//!     - gpus: []
//! ```
//! GPU fields are those of `GpuObservation` (`temperatureC`, `utilizationPercent`,
//! `memoryUsedMiB`, `memoryTotalMiB`, `eccSingleBit`, `eccDoubleBit`, `nvlink`,
//! `powerDrawWatts`, `powerLimitWatts`, `xidEvents`, `product`, `uuid`); `observedAt` is
//! stamped by the agent (XID events without `observedAt` get the sample time). The file is
//! re-read when it changes, and playback then starts again from its first frame.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gryvia_types::{
    GpuObservation, GryviaGpuNode, GryviaStorage, RebootMethod, RemediationAction,
    RemediationRequest, RemediationResult, StepPhase, StorageProbe,
};
use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tracing::{info, warn};

use crate::{Error, Result, api_err};

/// Field manager of everything the agent writes.
pub const AGENT_MANAGER: &str = "gryvia-node-agent";

/// One reading of a node's GPUs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// Per-GPU observations, sorted by index.
    pub gpus: Vec<GpuObservation>,
    /// Driver version.
    pub driver_version: Option<String>,
    /// CUDA version the driver supports.
    pub cuda_version: Option<String>,
}

/// Where observations come from.
pub trait GpuSource: Send + Sync {
    /// `nvml` or `file:<path>`, written to `status.source`.
    fn describe(&self) -> String;
    /// Reads the GPUs now.
    ///
    /// # Errors
    /// [`Error::Gpu`] when the GPUs cannot be read.
    fn sample(&mut self, now: jiff::Timestamp) -> Result<Sample>;
    /// Told when a remediation step succeeded (a trace switches to its recovery frames).
    fn remediated(&mut self, action: RemediationAction, now: jiff::Timestamp) {
        let _ = (action, now);
    }
}

// ---------------------------------------------------------------------------------------------
// Trace replay
// ---------------------------------------------------------------------------------------------

/// A scripted or recorded trace (see the module documentation for the format).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Trace {
    /// GPUs per frame.
    #[serde(default = "eight")]
    pub gpu_count: i32,
    /// Driver version.
    #[serde(default)]
    pub driver_version: Option<String>,
    /// CUDA version.
    #[serde(default)]
    pub cuda_version: Option<String>,
    /// Fields every GPU starts from.
    #[serde(default)]
    pub defaults: Map<String, Value>,
    /// Frames, played in order.
    pub frames: Vec<Frame>,
    /// Frames played after a remediation step of that kind succeeded.
    #[serde(default)]
    pub after_remediation: BTreeMap<RemediationAction, Vec<Frame>>,
}

fn eight() -> i32 {
    8
}

/// One frame of a trace.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Frame {
    /// How long the frame lasts; the last frame lasts forever.
    #[serde(default)]
    pub hold_seconds: Option<f64>,
    /// Per-GPU overrides (each with `index`).
    #[serde(default)]
    pub gpus: Vec<Map<String, Value>>,
    /// Backdates `observedAt` by this many seconds (a frozen reading).
    #[serde(default)]
    pub observed_age_seconds: i64,
}

/// The most a frame may backdate its readings: ten years.
const MAX_OBSERVED_AGE_SECONDS: i64 = 10 * 365 * 86_400;

/// The per-GPU fields a trace may set (those of `GpuObservation` but `observedAt`).
pub const GPU_FIELDS: [&str; 13] = [
    "index",
    "uuid",
    "product",
    "temperatureC",
    "utilizationPercent",
    "memoryUsedMiB",
    "memoryTotalMiB",
    "eccSingleBit",
    "eccDoubleBit",
    "nvlink",
    "powerDrawWatts",
    "powerLimitWatts",
    "xidEvents",
];

impl Trace {
    /// Parses and checks a trace; errors name the frame, GPU and field.
    ///
    /// # Errors
    /// [`Error::Trace`] when the text is not a valid trace.
    pub fn parse(text: &str, origin: &str) -> Result<Trace> {
        let bad = |reason: String| Error::Trace {
            path: origin.to_owned(),
            reason,
        };
        let trace: Trace = serde_saphyr::from_str(text).map_err(|e| bad(e.to_string()))?;
        if trace.frames.is_empty() {
            return Err(bad("frames: at least one frame is required".to_owned()));
        }
        if !(1..=64).contains(&trace.gpu_count) {
            return Err(bad(format!(
                "gpuCount: {} is outside 1-64",
                trace.gpu_count
            )));
        }
        let check_fields = |what: &str, m: &Map<String, Value>| -> Result<()> {
            if let Some(k) = m.keys().find(|k| !GPU_FIELDS.contains(&k.as_str())) {
                return Err(bad(format!(
                    "{what}: unknown field {k:?} (known: {})",
                    GPU_FIELDS.join(", ")
                )));
            }
            Ok(())
        };
        check_fields("defaults", &trace.defaults)?;
        let all = trace.frames.iter().map(|f| ("frames", f)).chain(
            trace
                .after_remediation
                .values()
                .flat_map(|fs| fs.iter().map(|f| ("afterRemediation", f))),
        );
        for (i, (list, frame)) in all.enumerate() {
            if !(0..=MAX_OBSERVED_AGE_SECONDS).contains(&frame.observed_age_seconds) {
                return Err(bad(format!(
                    "{list} (frame {i}): observedAgeSeconds {} is outside 0-{MAX_OBSERVED_AGE_SECONDS} (ten years)",
                    frame.observed_age_seconds
                )));
            }
            for g in &frame.gpus {
                let what = format!("{list} (frame {i}) gpu");
                check_fields(&what, g)?;
                let index = g.get("index").and_then(Value::as_i64);
                if !index.is_some_and(|x| (0..i64::from(trace.gpu_count)).contains(&x)) {
                    return Err(bad(format!(
                        "{what}: index must be a number in 0-{}",
                        trace.gpu_count - 1
                    )));
                }
            }
        }
        // Every frame must build valid observations.
        let now = jiff::Timestamp::UNIX_EPOCH;
        for frame in trace
            .frames
            .iter()
            .chain(trace.after_remediation.values().flatten())
        {
            trace.render(frame, "check", now).map_err(|e| match e {
                Error::Trace { reason, .. } => bad(reason),
                other => other,
            })?;
        }
        Ok(trace)
    }

    /// The observations of `frame` at `now` for `node`.
    ///
    /// # Errors
    /// [`Error::Trace`] when a GPU's fields do not make an observation.
    pub fn render(
        &self,
        frame: &Frame,
        node: &str,
        now: jiff::Timestamp,
    ) -> Result<Vec<GpuObservation>> {
        let observed = now
            .checked_sub(jiff::SignedDuration::from_secs(frame.observed_age_seconds))
            .map_err(|e| Error::Trace {
                path: "trace".to_owned(),
                reason: format!(
                    "observedAgeSeconds: {} backdates {now} out of range: {e}",
                    frame.observed_age_seconds
                ),
            })?;
        let mut out = Vec::new();
        for index in 0..self.gpu_count {
            let mut g = json!({
                "index": index,
                "uuid": format!("GPU-{node}-{index}"),
                "product": "NVIDIA H100 80GB HBM3",
                "temperatureC": 40,
                "utilizationPercent": 0,
                "memoryUsedMiB": 0,
                "memoryTotalMiB": 81559,
                "eccSingleBit": 0,
                "eccDoubleBit": 0,
                "powerDrawWatts": 70.0,
                "powerLimitWatts": 700.0,
            });
            let overrides = frame
                .gpus
                .iter()
                .filter(|o| o.get("index").and_then(Value::as_i64) == Some(i64::from(index)));
            for source in std::iter::once(&self.defaults).chain(overrides) {
                for (k, v) in source {
                    g[k] = v.clone();
                }
            }
            g["index"] = json!(index);
            g["observedAt"] = json!(Time(observed));
            if let Some(xids) = g.get_mut("xidEvents").and_then(Value::as_array_mut) {
                // A non-object entry is left for the deserialisation below to refuse.
                for x in xids.iter_mut().filter_map(Value::as_object_mut) {
                    x.entry("observedAt")
                        .or_insert_with(|| json!(Time(observed)));
                }
            }
            out.push(serde_json::from_value(g).map_err(|e| Error::Trace {
                path: "trace".to_owned(),
                reason: format!("gpu {index}: {e}"),
            })?);
        }
        Ok(out)
    }
}

/// Where playback stands: which frame list, since when.
#[derive(Clone, Debug)]
struct Playback {
    frames: Vec<Frame>,
    since: jiff::Timestamp,
}

/// Frame of `frames` at `elapsed` seconds from the start.
fn frame_at(frames: &[Frame], elapsed: f64) -> Option<&Frame> {
    let mut t = 0.0;
    for (i, f) in frames.iter().enumerate() {
        match f.hold_seconds {
            Some(hold) if i + 1 < frames.len() => {
                t += hold;
                if elapsed < t {
                    return Some(f);
                }
            }
            _ => return Some(f),
        }
    }
    frames.last()
}

/// Replays a trace file (see the module documentation).
#[derive(Debug)]
pub struct TraceSource {
    path: PathBuf,
    node: String,
    trace: Option<Trace>,
    modified: Option<SystemTime>,
    playback: Option<Playback>,
}

impl TraceSource {
    /// A source replaying `path` for `node`; the file is read (and checked) on first use.
    ///
    /// # Errors
    /// [`Error::Trace`] when the file cannot be read or is not a valid trace.
    pub fn open(path: &Path, node: &str) -> Result<TraceSource> {
        let mut s = TraceSource {
            path: path.to_owned(),
            node: node.to_owned(),
            trace: None,
            modified: None,
            playback: None,
        };
        s.reload_if_changed(jiff::Timestamp::now())?;
        Ok(s)
    }

    fn reload_if_changed(&mut self, now: jiff::Timestamp) -> Result<()> {
        let origin = self.path.display().to_string();
        let io = |e: std::io::Error| Error::Trace {
            path: origin.clone(),
            reason: e.to_string(),
        };
        let modified = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .map_err(io)?;
        if self.trace.is_some() && self.modified == Some(modified) {
            return Ok(());
        }
        let text = std::fs::read_to_string(&self.path).map_err(io)?;
        let trace = Trace::parse(&text, &origin)?;
        if self.trace.is_some() {
            info!(path = %origin, "trace changed; replaying it from the start");
        }
        self.playback = Some(Playback {
            frames: trace.frames.clone(),
            since: now,
        });
        self.trace = Some(trace);
        self.modified = Some(modified);
        Ok(())
    }
}

impl GpuSource for TraceSource {
    fn describe(&self) -> String {
        format!("file:{}", self.path.display())
    }

    fn sample(&mut self, now: jiff::Timestamp) -> Result<Sample> {
        self.reload_if_changed(now)?;
        let (Some(trace), Some(playback)) = (&self.trace, &self.playback) else {
            return Err(Error::Gpu("no trace loaded".to_owned()));
        };
        let elapsed = now.duration_since(playback.since).as_secs_f64();
        let Some(frame) = frame_at(&playback.frames, elapsed) else {
            return Err(Error::Gpu("trace has no frames".to_owned()));
        };
        Ok(Sample {
            gpus: trace.render(frame, &self.node, now)?,
            driver_version: trace.driver_version.clone(),
            cuda_version: trace.cuda_version.clone(),
        })
    }

    fn remediated(&mut self, action: RemediationAction, now: jiff::Timestamp) {
        if let Some(frames) = self
            .trace
            .as_ref()
            .and_then(|t| t.after_remediation.get(&action))
            .filter(|f| !f.is_empty())
        {
            info!(
                ?action,
                "remediation succeeded; replaying the trace's recovery frames"
            );
            self.playback = Some(Playback {
                frames: frames.clone(),
                since: now,
            });
        }
    }
}

// ---------------------------------------------------------------------------------------------
// NVML
// ---------------------------------------------------------------------------------------------

/// Reads the GPUs through NVML (`libnvidia-ml.so`, loaded at run time).
#[cfg(feature = "nvml")]
pub struct NvmlSource {
    nvml: nvml_wrapper::Nvml,
    xids: Arc<std::sync::Mutex<BTreeMap<u32, Vec<gryvia_types::XidEvent>>>>,
}

#[cfg(feature = "nvml")]
impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSource").finish_non_exhaustive()
    }
}

#[cfg(feature = "nvml")]
impl NvmlSource {
    /// Loads NVML and starts listening for critical XID events.
    ///
    /// # Errors
    /// [`Error::Gpu`] when NVML cannot be loaded (no NVIDIA driver on this machine) or
    /// initialised.
    pub fn open() -> Result<NvmlSource> {
        let nvml = nvml_wrapper::Nvml::init().map_err(|e| {
            Error::Gpu(format!(
                "load NVML: {e} (is this a GPU node with the NVIDIA driver installed? use --source file:PATH to replay a trace)"
            ))
        })?;
        let xids: Arc<std::sync::Mutex<BTreeMap<u32, Vec<gryvia_types::XidEvent>>>> =
            Arc::default();
        let sink = xids.clone();
        // The event set borrows its Nvml handle: a thread owns both.
        std::thread::spawn(move || {
            if let Err(e) = listen_xids(&sink) {
                warn!(error = %e, "XID events unavailable");
            }
        });
        Ok(NvmlSource { nvml, xids })
    }
}

#[cfg(feature = "nvml")]
fn listen_xids(
    sink: &std::sync::Mutex<BTreeMap<u32, Vec<gryvia_types::XidEvent>>>,
) -> std::result::Result<(), String> {
    use nvml_wrapper::bitmasks::event::EventTypes;
    use nvml_wrapper::enums::event::XidError;
    let nvml = nvml_wrapper::Nvml::init().map_err(|e| e.to_string())?;
    let mut set = nvml.create_event_set().map_err(|e| e.to_string())?;
    let count = nvml.device_count().map_err(|e| e.to_string())?;
    for i in 0..count {
        let device = nvml.device_by_index(i).map_err(|e| e.to_string())?;
        set = device
            .register_events(EventTypes::CRITICAL_XID_ERROR, set)
            .map_err(|e| e.error.to_string())?;
    }
    loop {
        match set.wait(1000) {
            Ok(ev) => {
                let code = match ev.event_data {
                    Some(XidError::Value(v)) => i32::try_from(v).unwrap_or(i32::MAX),
                    _ => continue,
                };
                let index = ev.device.index().unwrap_or(u32::MAX);
                let mut map = sink
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let list = map.entry(index).or_default();
                if list.len() < 64 {
                    list.push(gryvia_types::XidEvent {
                        code,
                        observed_at: Time(jiff::Timestamp::now()),
                        message: None,
                    });
                }
            }
            Err(nvml_wrapper::error::NvmlError::Timeout) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

#[cfg(feature = "nvml")]
impl GpuSource for NvmlSource {
    fn describe(&self) -> String {
        "nvml".to_owned()
    }

    fn sample(&mut self, now: jiff::Timestamp) -> Result<Sample> {
        use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TemperatureSensor};
        use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
        let gpu_err = |what: &str| {
            let what = what.to_owned();
            move |e: nvml_wrapper::error::NvmlError| Error::Gpu(format!("{what}: {e}"))
        };
        let count = self.nvml.device_count().map_err(gpu_err("count GPUs"))?;
        let mut xids = std::mem::take(
            &mut *self
                .xids
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut gpus = Vec::new();
        for i in 0..count {
            let d = self
                .nvml
                .device_by_index(i)
                .map_err(gpu_err(&format!("open GPU {i}")))?;
            let mb = |bytes: u64| i64::try_from(bytes / (1024 * 1024)).ok();
            let mem = d.memory_info().ok();
            let mut nvlink = None;
            for link in 0..18u32 {
                let l = d.link_wrapper_for(link);
                let Ok(active) = l.is_active() else { break };
                let obs = nvlink.get_or_insert(gryvia_types::NvLinkObservation::default());
                obs.links_total += 1;
                if active {
                    obs.links_up += 1;
                }
                let count = |c| {
                    l.error_counter(c)
                        .ok()
                        .and_then(|v| i64::try_from(v).ok())
                        .unwrap_or(0)
                };
                obs.crc_errors += count(ErrorCounter::DlCrcFlit) + count(ErrorCounter::DlCrcData);
                obs.replay_errors += count(ErrorCounter::DlReplay);
                obs.recovery_errors += count(ErrorCounter::DlRecovery);
            }
            let ecc = |t| {
                d.total_ecc_errors(t, EccCounter::Volatile)
                    .ok()
                    .and_then(|v| i64::try_from(v).ok())
            };
            gpus.push(GpuObservation {
                index: i32::try_from(i).unwrap_or(i32::MAX),
                uuid: d.uuid().unwrap_or_default(),
                product: d.name().ok(),
                temperature_c: d
                    .temperature(TemperatureSensor::Gpu)
                    .ok()
                    .and_then(|t| i32::try_from(t).ok()),
                utilization_percent: d
                    .utilization_rates()
                    .ok()
                    .and_then(|u| i32::try_from(u.gpu).ok()),
                memory_used_mib: mem.as_ref().and_then(|m| mb(m.used)),
                memory_total_mib: mem.as_ref().and_then(|m| mb(m.total)),
                ecc_single_bit: ecc(MemoryError::Corrected),
                ecc_double_bit: ecc(MemoryError::Uncorrected),
                nvlink,
                power_draw_watts: d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
                power_limit_watts: d
                    .enforced_power_limit()
                    .ok()
                    .map(|mw| f64::from(mw) / 1000.0),
                xid_events: xids.remove(&i).unwrap_or_default(),
                observed_at: Time(now),
            });
        }
        let cuda = self.nvml.sys_cuda_driver_version().ok().map(|v| {
            format!(
                "{}.{}",
                nvml_wrapper::cuda_driver_version_major(v),
                nvml_wrapper::cuda_driver_version_minor(v)
            )
        });
        Ok(Sample {
            gpus,
            driver_version: self.nvml.sys_driver_version().ok(),
            cuda_version: cuda,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Remediation executors
// ---------------------------------------------------------------------------------------------

/// Carries out a remediation step on this node.
#[async_trait::async_trait]
pub trait RemediationExecutor: Send + Sync {
    /// The commands `request` runs, one per line (what a dry run records).
    fn commands(&self, request: &RemediationRequest) -> Vec<Vec<String>>;
    /// Runs the step; `Ok` carries the output to report, `Err` why it failed.
    async fn execute(
        &self,
        node: &str,
        request: &RemediationRequest,
    ) -> std::result::Result<String, String>;
}

/// Where kured looks for its reboot sentinel by default.
pub const KURED_SENTINEL: &str = "/var/run/reboot-required";

/// The commands of a step on a real node.
pub fn step_commands(request: &RemediationRequest, kured_sentinel: &Path) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    match request.action {
        RemediationAction::GpuReset => {
            if request.gpu_indices.is_empty() {
                vec![s(&["nvidia-smi", "--gpu-reset"])]
            } else {
                request
                    .gpu_indices
                    .iter()
                    .map(|i| {
                        let mut c = s(&["nvidia-smi", "--gpu-reset", "-i"]);
                        c.push(i.to_string());
                        c
                    })
                    .collect()
            }
        }
        RemediationAction::DriverReload => vec![
            s(&[
                "modprobe",
                "-r",
                "nvidia_uvm",
                "nvidia_drm",
                "nvidia_modeset",
                "nvidia",
            ]),
            s(&["modprobe", "nvidia"]),
            s(&["modprobe", "nvidia_uvm"]),
        ],
        RemediationAction::Reboot => match request.reboot_method.unwrap_or_default() {
            RebootMethod::Kured => {
                vec![s(&["touch", &kured_sentinel.display().to_string()])]
            }
            RebootMethod::Nsenter => vec![s(&[
                "nsenter",
                "--target",
                "1",
                "--mount",
                "--uts",
                "--ipc",
                "--net",
                "--pid",
                "--",
                "systemctl",
                "reboot",
            ])],
        },
    }
}

/// Runs the real commands (the agent must run privileged, with the host's PID namespace for
/// `nsenter`).
#[derive(Clone, Debug)]
pub struct HostExecutor {
    /// kured's sentinel file.
    pub kured_sentinel: PathBuf,
}

impl Default for HostExecutor {
    fn default() -> Self {
        HostExecutor {
            kured_sentinel: PathBuf::from(KURED_SENTINEL),
        }
    }
}

#[async_trait::async_trait]
impl RemediationExecutor for HostExecutor {
    fn commands(&self, request: &RemediationRequest) -> Vec<Vec<String>> {
        step_commands(request, &self.kured_sentinel)
    }

    async fn execute(
        &self,
        _node: &str,
        request: &RemediationRequest,
    ) -> std::result::Result<String, String> {
        let mut output = Vec::new();
        for cmd in self.commands(request) {
            let Some((program, args)) = cmd.split_first() else {
                continue;
            };
            let out = tokio::process::Command::new(program)
                .args(args)
                .output()
                .await
                .map_err(|e| format!("run {}: {e}", cmd.join(" ")))?;
            let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if !out.status.success() {
                return Err(format!(
                    "{} exited with {}: {}",
                    cmd.join(" "),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            output.push(format!(
                "$ {}{}",
                cmd.join(" "),
                if text.is_empty() {
                    String::new()
                } else {
                    format!("\n{text}")
                }
            ));
        }
        Ok(output.join("\n"))
    }
}

/// Records the commands a step would run (one line per command, with time and node, appended
/// to `log` when set) and reports success after `duration`.
#[derive(Clone, Debug, Default)]
pub struct DryRunExecutor {
    /// File the commands are appended to.
    pub log: Option<PathBuf>,
    /// How long a step takes.
    pub duration: Duration,
}

#[async_trait::async_trait]
impl RemediationExecutor for DryRunExecutor {
    fn commands(&self, request: &RemediationRequest) -> Vec<Vec<String>> {
        step_commands(request, Path::new(KURED_SENTINEL))
    }

    async fn execute(
        &self,
        node: &str,
        request: &RemediationRequest,
    ) -> std::result::Result<String, String> {
        let started = jiff::Timestamp::now();
        tokio::time::sleep(self.duration).await;
        let finished = jiff::Timestamp::now();
        let action = serde_json::to_value(request.action)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        // `<action> <command>` per command; the log adds start, finish and node in front.
        let steps: Vec<String> = self
            .commands(request)
            .iter()
            .map(|c| format!("{action} {}", c.join(" ")))
            .collect();
        if let Some(log) = &self.log {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .map_err(|e| format!("open {}: {e}", log.display()))?;
            for step in &steps {
                writeln!(f, "{started} {finished} {node} {step}")
                    .map_err(|e| format!("write {}: {e}", log.display()))?;
            }
        }
        Ok(format!("dry run: {}", steps.join("; ")))
    }
}

// ---------------------------------------------------------------------------------------------
// The agent loop
// ---------------------------------------------------------------------------------------------

/// How the agent runs.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The Kubernetes node this agent reports.
    pub node: String,
    /// Seconds between two reports.
    pub interval: Duration,
    /// Report once and exit.
    pub once: bool,
    /// The mount table storage probes read: the host's (`/proc/1/mountinfo` in a pod with
    /// the host's PID namespace), [`MOUNTINFO`] when the agent runs on the host.
    pub mountinfo: PathBuf,
    /// Where the host's filesystem is (`/` on the host; the chart mounts it at `/host`): a
    /// storage's `mountPath` is probed under it.
    pub host_root: PathBuf,
}

impl AgentConfig {
    /// Reports for `node` every `interval`, on the host (its mount table, its `/`).
    pub fn new(node: &str, interval: Duration) -> Self {
        AgentConfig {
            node: node.to_owned(),
            interval,
            once: false,
            mountinfo: PathBuf::from(MOUNTINFO),
            host_root: PathBuf::from("/"),
        }
    }
}

/// What the agent counts on `/metrics`, and its readiness on `/readyz` (ready once a report
/// was written).
#[derive(Clone, Debug)]
pub struct AgentMetrics {
    reports: prometheus_client::metrics::counter::Counter,
    report_errors: prometheus_client::metrics::counter::Counter,
    probe_latency: prometheus_client::metrics::family::Family<
        StorageLabel,
        prometheus_client::metrics::gauge::Gauge,
    >,
    probe_failed: prometheus_client::metrics::family::Family<
        StorageLabel,
        prometheus_client::metrics::gauge::Gauge,
    >,
    health: crate::metrics::Health,
}

/// The label of a storage probe's metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct StorageLabel {
    /// The GryviaStorage.
    pub storage: String,
}

impl AgentMetrics {
    /// Registers the agent's metrics in `metrics`; `health` turns ready after the first report.
    pub fn register(metrics: &crate::metrics::Metrics, health: crate::metrics::Health) -> Self {
        let m = AgentMetrics {
            reports: Default::default(),
            report_errors: Default::default(),
            probe_latency: Default::default(),
            probe_failed: Default::default(),
            health,
        };
        metrics.register(
            "agent_reports",
            "Reports the node agent wrote",
            m.reports.clone(),
        );
        metrics.register(
            "agent_report_errors",
            "Reports that failed (retried next interval)",
            m.report_errors.clone(),
        );
        metrics.register(
            "agent_storage_probe_latency_milliseconds",
            "Latency of the last probe of each storage mount",
            m.probe_latency.clone(),
        );
        metrics.register(
            "agent_storage_probe_failed",
            "1 while the last probe of a storage mount failed",
            m.probe_failed.clone(),
        );
        m
    }
}

/// Where the agent reads the mount table by default.
pub const MOUNTINFO: &str = "/proc/self/mountinfo";

/// The agent: reports observations and answers remediation requests.
pub struct Agent {
    client: kube::Client,
    config: AgentConfig,
    source: Box<dyn GpuSource>,
    executor: Arc<dyn RemediationExecutor>,
    last_result: Option<RemediationResult>,
    /// The node's labels (which GryviaStorages select it), read at registration.
    labels: BTreeMap<String, String>,
    /// The last round's storage probes.
    storage: Vec<StorageProbe>,
    metrics: Option<AgentMetrics>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// An agent for `config.node`.
    pub fn new(
        client: kube::Client,
        config: AgentConfig,
        source: Box<dyn GpuSource>,
        executor: Arc<dyn RemediationExecutor>,
    ) -> Agent {
        Agent {
            client,
            config,
            source,
            executor,
            last_result: None,
            labels: BTreeMap::new(),
            storage: Vec::new(),
            metrics: None,
        }
    }

    /// Counts reports and probes in `metrics` and reports readiness.
    #[must_use]
    pub fn with_metrics(mut self, metrics: AgentMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn api(&self) -> Api<GryviaGpuNode> {
        Api::all(self.client.clone())
    }

    /// Creates or updates the node's GryviaGpuNode (owned by the Node, so it goes with it),
    /// and picks up the last remediation result a previous agent wrote.
    ///
    /// # Errors
    /// [`Error::Api`] when the Node does not exist or the write fails.
    pub async fn register(&mut self) -> Result<GryviaGpuNode> {
        let name = &self.config.node;
        let node = Api::<Node>::all(self.client.clone())
            .get(name)
            .await
            .map_err(api_err(format!("read node {name}")))?;
        self.labels = node.meta().labels.clone().unwrap_or_default();
        let owner = json!({
            "apiVersion": "v1", "kind": "Node", "name": name,
            "uid": node.meta().uid.clone().unwrap_or_default(),
        });
        let body = json!({
            "apiVersion": gryvia_types::API_VERSION,
            "kind": "GryviaGpuNode",
            "metadata": { "name": name, "ownerReferences": [owner] },
            "spec": {
                "nodeName": name,
                "reportIntervalSeconds": i32::try_from(self.config.interval.as_secs().max(1)).unwrap_or(3600).min(3600),
            }
        });
        let obj = self
            .api()
            .patch(
                name,
                &PatchParams::apply(AGENT_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map_err(api_err(format!("register GryviaGpuNode {name}")))?;
        self.last_result = obj
            .status
            .as_ref()
            .and_then(|s| s.remediation_result.clone());
        // A step that was running when the previous agent stopped: a reboot did its job,
        // anything else was cut short.
        if let Some(r) = &mut self.last_result
            && r.phase == StepPhase::Running
        {
            let rebooted = r.action == RemediationAction::Reboot;
            r.phase = if rebooted {
                StepPhase::Succeeded
            } else {
                StepPhase::Failed
            };
            r.finished_at = Some(Time(jiff::Timestamp::now()));
            r.message = Some(if rebooted {
                "the node agent restarted after the reboot".to_owned()
            } else {
                "interrupted: the node agent restarted".to_owned()
            });
        }
        Ok(obj)
    }

    async fn write_status(&self, sample: &Sample) -> Result<()> {
        let name = &self.config.node;
        let now = jiff::Timestamp::now();
        let mut status = json!({
            "gpus": sample.gpus,
            "gpuCount": sample.gpus.len(),
            "source": self.source.describe(),
            "observedAt": Time(now),
        });
        if let Some(v) = &sample.driver_version {
            status["driverVersion"] = json!(v);
        }
        if let Some(v) = &sample.cuda_version {
            status["cudaVersion"] = json!(v);
        }
        if let Some(r) = &self.last_result {
            status["remediationResult"] = json!(r);
        }
        if !self.storage.is_empty() {
            status["storage"] = json!(self.storage);
        }
        let body = json!({
            "apiVersion": gryvia_types::API_VERSION,
            "kind": "GryviaGpuNode",
            "status": status,
        });
        self.api()
            .patch_status(
                name,
                &PatchParams::apply(AGENT_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map_err(api_err(format!("write status of GryviaGpuNode {name}")))?;
        Ok(())
    }

    /// Carries out `request`, reporting Running, then Succeeded or Failed.
    async fn remediate(&mut self, request: RemediationRequest, sample: &Sample) -> Result<()> {
        let started = jiff::Timestamp::now();
        info!(id = %request.id, action = ?request.action, gpus = ?request.gpu_indices, "remediation step requested");
        let before = self.last_result.replace(RemediationResult {
            id: request.id.clone(),
            action: request.action,
            phase: StepPhase::Running,
            started_at: Some(Time(started)),
            finished_at: None,
            message: None,
        });
        // Running is reported before the step runs; when that write fails the step has not
        // started, and the request stays unanswered for the next round (else a transient API
        // error would lose the step: the next round takes the request as answered).
        if let Err(e) = self.write_status(sample).await {
            self.last_result = before;
            return Err(e);
        }
        let limit = Duration::from_secs(u64::try_from(request.timeout_seconds.max(1)).unwrap_or(1));
        let outcome =
            match tokio::time::timeout(limit, self.executor.execute(&self.config.node, &request))
                .await
            {
                Ok(r) => r,
                Err(_) => Err(format!("timed out after {}s", request.timeout_seconds)),
            };
        let finished = jiff::Timestamp::now();
        let (phase, message) = match outcome {
            Ok(out) => {
                self.source.remediated(request.action, finished);
                (StepPhase::Succeeded, out)
            }
            Err(e) => {
                warn!(id = %request.id, error = %e, "remediation step failed");
                (StepPhase::Failed, e)
            }
        };
        info!(id = %request.id, ?phase, "remediation step finished");
        self.last_result = Some(RemediationResult {
            id: request.id,
            action: request.action,
            phase,
            started_at: Some(Time(started)),
            finished_at: Some(Time(finished)),
            message: Some(message.chars().take(1024).collect()),
        });
        Ok(())
    }

    /// One round: answer a new remediation request, then report a fresh sample.
    ///
    /// # Errors
    /// [`Error::Gpu`] or [`Error::Trace`] when the source fails, [`Error::Api`] when a write
    /// fails.
    pub async fn tick(&mut self) -> Result<()> {
        let name = self.config.node.clone();
        let obj = self
            .api()
            .get(&name)
            .await
            .map_err(api_err(format!("read GryviaGpuNode {name}")))?;
        let request = obj
            .spec
            .remediation_request
            .filter(|r| self.last_result.as_ref().is_none_or(|l| l.id != r.id));
        if let Some(request) = request {
            let sample = self.source.sample(jiff::Timestamp::now())?;
            self.remediate(request, &sample).await?;
        }
        self.probe_storage().await;
        let sample = self.source.sample(jiff::Timestamp::now())?;
        self.write_status(&sample).await
    }

    /// Probes the mount of every GryviaStorage with a `mountPath` that selects this node, each
    /// bounded by [`crate::storage_probe::PROBE_TIMEOUT`]. When the storages cannot be listed
    /// the last round's probes are reported again (and a warning logged): a failed list is not a
    /// failed mount.
    async fn probe_storage(&mut self) {
        let storages = match Api::<GryviaStorage>::all(self.client.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(list) => list.items,
            Err(e) => {
                warn!(error = %e, "list GryviaStorages; storage probes not refreshed");
                return;
            }
        };
        let mountinfo = std::fs::read_to_string(&self.config.mountinfo).unwrap_or_else(|e| {
            warn!(error = %e, path = %self.config.mountinfo.display(), "read the mount table");
            String::new()
        });
        let mut probes = Vec::new();
        for storage in storages {
            let Some(path) = gryvia_reconcile::storage_health::probed_at(&storage, &self.labels)
                .map(str::to_owned)
            else {
                continue;
            };
            let name = storage.meta().name.clone().unwrap_or_default();
            let under_root = self.config.host_root.join(path.trim_start_matches('/'));
            let probe = crate::storage_probe::probe_bounded(
                name,
                PathBuf::from(&path),
                under_root,
                self.config.node.clone(),
                mountinfo.clone(),
                crate::storage_probe::PROBE_TIMEOUT,
            )
            .await;
            if let Some(e) = &probe.error {
                warn!(storage = %probe.name, error = %e, "storage probe failed");
            }
            if let Some(m) = &self.metrics {
                let label = StorageLabel {
                    storage: probe.name.clone(),
                };
                m.probe_failed
                    .get_or_create(&label)
                    .set(i64::from(probe.error.is_some()));
                if let Some(ms) = probe.latency_millis {
                    m.probe_latency.get_or_create(&label).set(ms);
                }
            }
            probes.push(probe);
        }
        probes.sort_by(|a, b| a.name.cmp(&b.name));
        self.storage = probes;
    }

    /// Registers, then reports every interval until `shutdown` resolves (or once).
    ///
    /// # Errors
    /// The first error of registration; later errors are logged and retried next interval.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<()> {
        self.register().await?;
        if self.config.once {
            return self.tick().await;
        }
        info!(node = %self.config.node, source = %self.source.describe(), interval = ?self.config.interval, "node agent running");
        tokio::pin!(shutdown);
        loop {
            match self.tick().await {
                Ok(()) => {
                    if let Some(m) = &self.metrics {
                        m.reports.inc();
                        m.health.set_ready(true);
                    }
                }
                Err(e) => {
                    warn!(error = %e, "report failed; retrying next interval");
                    if let Some(m) = &self.metrics {
                        m.report_errors.inc();
                    }
                }
            }
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = tokio::time::sleep(self.config.interval) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = r#"
gpuCount: 2
driverVersion: "550.54.15"
defaults: {temperatureC: 45}
frames:
  - holdSeconds: 10
  - gpus:
      - {index: 1, eccDoubleBit: 3, xidEvents: [{code: 48}]}
afterRemediation:
  gpu-reset:
    - gpus: []
"#;

    fn ts(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn a_trace_plays_its_frames_in_order_and_the_last_one_holds() {
        let t = Trace::parse(TRACE, "t.yaml").unwrap();
        assert_eq!(frame_at(&t.frames, 0.0), Some(&t.frames[0]));
        assert_eq!(frame_at(&t.frames, 9.9), Some(&t.frames[0]));
        assert_eq!(frame_at(&t.frames, 10.0), Some(&t.frames[1]));
        assert_eq!(frame_at(&t.frames, 1e9), Some(&t.frames[1]));
        let gpus = t.render(&t.frames[1], "n1", ts(0)).unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(
            gpus[0].temperature_c,
            Some(45),
            "defaults apply to every GPU"
        );
        assert_eq!(gpus[0].ecc_double_bit, Some(0));
        assert_eq!(gpus[1].ecc_double_bit, Some(3));
        assert_eq!(gpus[1].xid_events[0].code, 48);
        assert_eq!(gpus[1].xid_events[0].observed_at, Time(ts(0)));
        assert_eq!(gpus[1].uuid, "GPU-n1-1");
    }

    #[test]
    fn a_frozen_frame_backdates_its_observations() {
        let t = Trace::parse("frames: [{observedAgeSeconds: 600}]", "t").unwrap();
        let gpus = t.render(&t.frames[0], "n", ts(1000)).unwrap();
        assert_eq!(gpus.len(), 8);
        assert_eq!(gpus[0].observed_at, Time(ts(400)));
    }

    #[test]
    fn bad_traces_are_rejected_naming_the_place() {
        let err = |s: &str| Trace::parse(s, "t.yaml").unwrap_err().to_string();
        assert!(err("frames: []").contains("frames: at least one frame is required"));
        assert!(
            err("frames: [{gpus: [{index: 0, temprature: 3}]}]")
                .contains("frames (frame 0) gpu: unknown field \"temprature\"")
        );
        assert!(
            err("gpuCount: 2\nframes: [{gpus: [{index: 5}]}]")
                .contains("index must be a number in 0-1")
        );
        assert!(err("frames: [{gpus: [{index: 0, eccDoubleBit: lots}]}]").contains("gpu 0"));
        assert!(err("frame: []").contains("unknown field"));
    }

    #[test]
    fn steps_map_to_the_commands_of_the_guide() {
        let req = |action, gpus: Vec<i32>, reboot| RemediationRequest {
            id: "x".into(),
            action,
            gpu_indices: gpus,
            requested_at: Time(ts(0)),
            timeout_seconds: 60,
            reboot_method: reboot,
        };
        let join = |c: Vec<Vec<String>>| c.iter().map(|c| c.join(" ")).collect::<Vec<_>>();
        let sentinel = Path::new(KURED_SENTINEL);
        assert_eq!(
            join(step_commands(
                &req(RemediationAction::GpuReset, vec![1, 3], None),
                sentinel
            )),
            vec!["nvidia-smi --gpu-reset -i 1", "nvidia-smi --gpu-reset -i 3"]
        );
        assert_eq!(
            join(step_commands(
                &req(RemediationAction::DriverReload, vec![], None),
                sentinel
            ))[0],
            "modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia"
        );
        assert_eq!(
            join(step_commands(
                &req(RemediationAction::Reboot, vec![], Some(RebootMethod::Kured)),
                sentinel
            )),
            vec!["touch /var/run/reboot-required"]
        );
        assert!(
            join(step_commands(
                &req(
                    RemediationAction::Reboot,
                    vec![],
                    Some(RebootMethod::Nsenter)
                ),
                sentinel
            ))[0]
                .starts_with("nsenter --target 1")
        );
    }
}
