//! Job templates: checking a GryviaTemplate and rendering it into a GryviaAIJob, as pure
//! functions. Beyond the features guide, which only validates and counts templates.
//!
//! A template's `defaults` has the shape of a GryviaAIJob spec; its strings may hold
//! `{{ .name }}` placeholders. Rendering checks the given parameter values against their
//! declared type (`string`, `integer`, `number`, `boolean`), `required`, `default`, `min` /
//! `max`, `pattern` and `enum`, fills the placeholders, maps the older
//! `resources.gpuType/gpuCount` form onto `gpuType` / `gpus`, and returns a job labelled
//! `gryvia.io/template: <template>` whose `spec.templateRef` records the values used.

use std::collections::BTreeMap;
use std::fmt;

use gryvia_types::conditions::{self, Status};
use gryvia_types::{
    GryviaAIJob, GryviaAIJobSpec, GryviaTemplate, GryviaTemplateSpec, GryviaTemplateStatus,
    ParameterType, TemplateParameter, TemplateRef, labels,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Plan, Timestamp};

/// Why a template cannot be rendered: the field (or parameter) and the reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderError {
    /// Path of the offending field, for example `parameters.batchSize` or
    /// `defaults.command[2]`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for RenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for RenderError {}

fn err(field: impl Into<String>, message: impl Into<String>) -> RenderError {
    RenderError {
        field: field.into(),
        message: message.into(),
    }
}

/// Checks one value against its parameter declaration.
///
/// # Errors
/// A [`RenderError`] naming `parameters.<name>` when the value has the wrong type, is out of
/// range, does not match the pattern or is not one of the allowed values.
pub fn check_value(param: &TemplateParameter, value: &str) -> Result<(), RenderError> {
    let field = format!("parameters.{}", param.name);
    let number = match param.type_ {
        ParameterType::String => None,
        ParameterType::Integer => Some(
            value
                .trim()
                .parse::<i64>()
                .map_err(|_| err(&field, format!("{value:?} is not an integer")))?
                as f64,
        ),
        ParameterType::Number => {
            let n = value
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite())
                .ok_or_else(|| err(&field, format!("{value:?} is not a number")))?;
            Some(n)
        }
        ParameterType::Boolean => {
            if value != "true" && value != "false" {
                return Err(err(&field, format!("{value:?} is not true or false")));
            }
            None
        }
    };
    let Some(v) = &param.validation else {
        return Ok(());
    };
    if let Some(n) = number {
        if let Some(min) = v.min
            && n < min
        {
            return Err(err(&field, format!("{value} is below the minimum {min}")));
        }
        if let Some(max) = v.max
            && n > max
        {
            return Err(err(&field, format!("{value} is above the maximum {max}")));
        }
    }
    if let Some(pattern) = &v.pattern {
        let re = regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
            err(
                format!("{field}.validation.pattern"),
                format!("invalid regular expression: {e}"),
            )
        })?;
        if !re.is_match(value) {
            return Err(err(
                &field,
                format!("{value:?} does not match the pattern {pattern:?}"),
            ));
        }
    }
    if !v.allowed.is_empty() && !v.allowed.iter().any(|a| a == value) {
        return Err(err(
            &field,
            format!("{value:?} is not one of {}", v.allowed.join(", ")),
        ));
    }
    Ok(())
}

/// The value of every parameter: the given one, else the default; parameters that are
/// neither given nor defaulted (and not required) are the empty string.
///
/// # Errors
/// A [`RenderError`] for a value given for an undeclared parameter, a missing required one, or
/// a value (given or default) that fails [`check_value`].
pub fn resolve_parameters(
    spec: &GryviaTemplateSpec,
    given: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, RenderError> {
    for k in given.keys() {
        if !spec.parameters.iter().any(|p| &p.name == k) {
            let known: Vec<&str> = spec.parameters.iter().map(|p| p.name.as_str()).collect();
            return Err(err(
                format!("parameters.{k}"),
                format!(
                    "the template has no such parameter (it has: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        }
    }
    let mut out = BTreeMap::new();
    for p in &spec.parameters {
        let value = match (given.get(&p.name), &p.default) {
            (Some(v), _) => Some(v.clone()),
            (None, Some(d)) => Some(d.clone()),
            (None, None) if p.required => {
                return Err(err(
                    format!("parameters.{}", p.name),
                    "required, and no value was given",
                ));
            }
            (None, None) => None,
        };
        if let Some(v) = &value {
            check_value(p, v)?;
        }
        out.insert(p.name.clone(), value.unwrap_or_default());
    }
    Ok(out)
}

/// A malformed placeholder, quoted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum PlaceholderError {
    /// `{{` without `}}`.
    #[error("unclosed placeholder at {0:?}")]
    Unclosed(String),
    /// Not of the form `{{ .name }}`.
    #[error("placeholder {0:?} must be {{{{ .name }}}}")]
    NotDotted(String),
    /// `.` followed by something that cannot be a parameter's name.
    #[error("placeholder {0:?} does not name a parameter")]
    NotAName(String),
}

/// Placeholder names in `text`, in order, or the position of a malformed one.
fn placeholders(text: &str) -> Result<Vec<(std::ops::Range<usize>, String)>, PlaceholderError> {
    let mut out = Vec::new();
    let mut rest = 0;
    while let Some(start) = text[rest..].find("{{").map(|i| i + rest) {
        let Some(end) = text[start..].find("}}").map(|i| i + start) else {
            return Err(PlaceholderError::Unclosed(text[start..].to_owned()));
        };
        let inner = text[start + 2..end].trim();
        let Some(name) = inner.strip_prefix('.') else {
            return Err(PlaceholderError::NotDotted(text[start..end + 2].to_owned()));
        };
        let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(PlaceholderError::NotAName(text[start..end + 2].to_owned()));
        }
        out.push((start..end + 2, name.to_owned()));
        rest = end + 2;
    }
    Ok(out)
}

/// Replaces the placeholders of every string in `value` (map keys are left alone), naming the
/// path of the first string that refers to an undeclared parameter.
pub fn substitute(
    value: &mut Value,
    path: &str,
    params: &BTreeMap<String, String>,
) -> Result<(), RenderError> {
    match value {
        Value::String(s) => {
            let found = placeholders(s).map_err(|m| err(path, m.to_string()))?;
            if found.is_empty() {
                return Ok(());
            }
            let mut out = String::with_capacity(s.len());
            let mut last = 0;
            for (range, name) in found {
                let Some(v) = params.get(&name) else {
                    return Err(err(
                        path,
                        format!("placeholder {{{{ .{name} }}}} names no parameter of the template"),
                    ));
                };
                out.push_str(&s[last..range.start]);
                out.push_str(v);
                last = range.end;
            }
            out.push_str(&s[last..]);
            *s = out;
            Ok(())
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                substitute(item, &format!("{path}[{i}]"), params)?;
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                substitute(v, &format!("{path}.{k}"), params)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The defaults as a job spec in JSON with placeholders filled and the older
/// `resources` block mapped.
fn rendered_spec(
    spec: &GryviaTemplateSpec,
    params: &BTreeMap<String, String>,
) -> Result<Value, RenderError> {
    let mut defaults = serde_json::to_value(&spec.defaults)
        .map_err(|e| err("defaults", format!("cannot be read: {e}")))?;
    if let Value::Object(map) = &mut defaults
        && let Some(Value::Object(res)) = map.remove("resources")
    {
        if let Some(t) = res.get("gpuType") {
            map.insert("gpuType".into(), t.clone());
        }
        if let Some(n) = res.get("gpuCount") {
            map.insert("gpus".into(), n.clone());
        }
    }
    substitute(&mut defaults, "defaults", params)?;
    if defaults
        .get("image")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(err("defaults.image", "required to render a job"));
    }
    Ok(defaults)
}

/// Checks a template: parameter declarations (min/max only on numbers, patterns compile,
/// defaults pass their own checks), placeholders name declared parameters, and the defaults
/// name an image.
///
/// # Errors
/// The first problem found, naming the field.
pub fn validate(spec: &GryviaTemplateSpec) -> Result<(), RenderError> {
    for p in &spec.parameters {
        if let Some(v) = &p.validation
            && (v.min.is_some() || v.max.is_some())
            && !matches!(p.type_, ParameterType::Integer | ParameterType::Number)
        {
            return Err(err(
                format!("parameters.{}.validation", p.name),
                "min and max apply to integer and number parameters only",
            ));
        }
        if let Some(pattern) = p.validation.as_ref().and_then(|v| v.pattern.as_ref()) {
            regex::Regex::new(pattern).map_err(|e| {
                err(
                    format!("parameters.{}.validation.pattern", p.name),
                    format!("invalid regular expression: {e}"),
                )
            })?;
        }
        if let Some(d) = &p.default {
            check_value(p, d).map_err(|e| err(format!("{}.default", e.field), e.message))?;
        }
    }
    // Every parameter gets a stand-in, so only undeclared placeholders fail here.
    let stand_ins: BTreeMap<String, String> = spec
        .parameters
        .iter()
        .map(|p| (p.name.clone(), p.default.clone().unwrap_or_default()))
        .collect();
    rendered_spec(spec, &stand_ins).map(|_| ())
}

/// Renders `template` into the GryviaAIJob `name` in `namespace` with the `given` parameter
/// values.
///
/// # Errors
/// A [`RenderError`] naming the parameter or field: an unknown or missing parameter, a value
/// that fails its checks, a placeholder that names no parameter, defaults without an image,
/// or defaults that do not make a job spec.
pub fn render(
    template: &GryviaTemplate,
    name: &str,
    namespace: &str,
    given: &BTreeMap<String, String>,
) -> Result<GryviaAIJob, RenderError> {
    let tpl_name = template.metadata.name.clone().unwrap_or_default();
    let params = resolve_parameters(&template.spec, given)?;
    let mut spec_json = rendered_spec(&template.spec, &params)?;
    spec_json["templateRef"] = serde_json::to_value(TemplateRef {
        name: tpl_name.clone(),
        parameters: params,
    })
    .unwrap_or(Value::Null);
    let spec: GryviaAIJobSpec = serde_json::from_value(spec_json)
        .map_err(|e| err("defaults", format!("do not make a job spec: {e}")))?;
    Ok(GryviaAIJob {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(labels::TEMPLATE.to_owned(), tpl_name)])),
            ..Default::default()
        },
        spec,
        status: None,
    })
}

/// Renders `template` into a job named `name`, or, without a name, one the API server names
/// from the template's (`generateName`: its first 45 characters and a dash, so the generated
/// name stays within the 52 characters of a job name).
///
/// # Errors
/// What [`render`] returns.
pub fn instantiate(
    template: &GryviaTemplate,
    name: Option<&str>,
    namespace: &str,
    given: &BTreeMap<String, String>,
) -> Result<GryviaAIJob, RenderError> {
    let mut job = render(template, name.unwrap_or(""), namespace, given)?;
    if name.is_none() {
        let tpl_name = template.metadata.name.as_deref().unwrap_or("");
        let prefix: String = tpl_name.chars().take(45).collect();
        job.metadata.name = None;
        job.metadata.generate_name = Some(format!("{}-", prefix.trim_end_matches('-')));
    }
    Ok(job)
}

/// What the template reconcile knows: how many jobs carry its label.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateWorld {
    /// GryviaAIJobs labelled `gryvia.io/template: <name>`, in every namespace.
    pub instantiated_jobs: i32,
}

/// The GryviaTemplate controller's policy: a `Valid` condition and the job count.
#[derive(Clone, Debug, Default)]
pub struct TemplateReconciler;

impl crate::Reconcile for TemplateReconciler {
    type Object = GryviaTemplate;
    type World = TemplateWorld;
    type Status = GryviaTemplateStatus;

    fn name(&self) -> &'static str {
        "gryvia-templates"
    }

    fn reconcile(
        &self,
        template: &GryviaTemplate,
        world: &TemplateWorld,
        now: Timestamp,
    ) -> Plan<GryviaTemplateStatus> {
        let mut plan = Plan::new();
        let generation = template.metadata.generation;
        let mut status = template.status.clone().unwrap_or_default();
        status.observed_generation = generation;
        status.instantiated_jobs = world.instantiated_jobs;
        let cond = match validate(&template.spec) {
            Ok(()) => conditions::new(
                conditions::VALID,
                Status::True,
                "Valid",
                "the template renders into a job",
                generation,
                now,
            ),
            Err(e) => conditions::new(
                conditions::VALID,
                Status::False,
                conditions::REASON_INVALID_SPEC,
                e.to_string(),
                generation,
                now,
            ),
        };
        let was = conditions::find(&status.conditions, conditions::VALID).cloned();
        conditions::set(&mut status.conditions, cond.clone());
        if was.as_ref().map(|c| (&c.status, &c.message)) != Some((&cond.status, &cond.message))
            && cond.status == "False"
        {
            plan.event(
                crate::EventType::Warning,
                conditions::REASON_INVALID_SPEC,
                cond.message,
            );
        }
        plan.set_status_if_changed(template.status.as_ref(), status);
        plan
    }
}
