//! Cron schedules in UTC, as pure functions: parse once, then ask for the next run after an
//! instant.
//!
//! Accepted forms:
//! - five fields `minute hour day-of-month month day-of-week` (standard cron);
//! - six fields with a leading `second` field (`*/10 * * * * *`: every ten seconds), for
//!   short intervals in tests and demos;
//! - the macros `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily`, `@hourly`.
//!
//! Each field is `*`, a value, a range `a-b`, a step `*/n` or `a-b/n` or `a/n`, or a
//! comma-separated list of those. Months and weekdays also take their three-letter English
//! names (`jan`, `mon`); weekday 7 is Sunday like 0. As in Vixie cron, when both day-of-month
//! and day-of-week are restricted, a day matches when either does.

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;

use crate::Timestamp;

/// A parsed schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    seconds: u64,
    minutes: u64,
    hours: u64,
    days_of_month: u64,
    months: u64,
    days_of_week: u64,
    dom_restricted: bool,
    dow_restricted: bool,
}

/// Why a schedule does not parse; the message names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(String);

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

fn value(field: &Field, text: &str) -> Result<u32, ParseError> {
    if let Some(pos) = field
        .names
        .iter()
        .position(|n| n.eq_ignore_ascii_case(text))
    {
        let base = if field.name == "month" { 1 } else { 0 };
        return Ok(u32::try_from(pos).unwrap_or(0) + base);
    }
    let v: u32 = text.parse().map_err(|_| {
        ParseError(format!(
            "{}: {text:?} is not a number{}",
            field.name,
            if field.names.is_empty() {
                ""
            } else {
                " or a name"
            }
        ))
    })?;
    if v < field.min || v > field.max {
        return Err(ParseError(format!(
            "{}: {v} is outside {}-{}",
            field.name, field.min, field.max
        )));
    }
    Ok(v)
}

/// Parses one field into a bit set; also says whether it was restricted (not `*`).
fn parse_field(field: &Field, text: &str) -> Result<(u64, bool), ParseError> {
    let mut bits = 0u64;
    let mut restricted = false;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s.parse().ok().filter(|s| *s > 0).ok_or_else(|| {
                    ParseError(format!(
                        "{}: step {s:?} must be a positive number",
                        field.name
                    ))
                })?;
                (r, step)
            }
            None => (part, 1),
        };
        let (lo, hi) = if range == "*" {
            (field.min, field.max)
        } else if let Some((a, b)) = range.split_once('-') {
            restricted = true;
            let (a, b) = (value(field, a)?, value(field, b)?);
            if a > b {
                return Err(ParseError(format!(
                    "{}: range {range} runs backwards",
                    field.name
                )));
            }
            (a, b)
        } else {
            restricted = true;
            let a = value(field, range)?;
            // `a/n` means from a to the end in steps of n.
            (a, if part.contains('/') { field.max } else { a })
        };
        if range == "*" && step > 1 {
            restricted = true;
        }
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            v += step;
        }
    }
    if bits == 0 {
        return Err(ParseError(format!(
            "{}: {text:?} matches nothing",
            field.name
        )));
    }
    Ok((bits, restricted))
}

impl Schedule {
    /// Parses a schedule (see the module documentation for the forms).
    ///
    /// # Errors
    /// [`ParseError`] naming the field and the reason.
    pub fn parse(text: &str) -> Result<Schedule, ParseError> {
        let text = text.trim();
        let expanded = match text.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_owned(),
            "@monthly" => "0 0 1 * *".to_owned(),
            "@weekly" => "0 0 * * 0".to_owned(),
            "@daily" | "@midnight" => "0 0 * * *".to_owned(),
            "@hourly" => "0 * * * *".to_owned(),
            other if other.starts_with('@') => {
                return Err(ParseError(format!("unknown macro {text:?}")));
            }
            _ => text.to_owned(),
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let (sec, rest) = match fields.len() {
            5 => ("0", &fields[..]),
            6 => (fields[0], &fields[1..]),
            n => {
                return Err(ParseError(format!(
                    "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, got {n}"
                )));
            }
        };
        let f = |name, min, max, names| Field {
            name,
            min,
            max,
            names,
        };
        let (seconds, _) = parse_field(&f("second", 0, 59, &[]), sec)?;
        let (minutes, _) = parse_field(&f("minute", 0, 59, &[]), rest[0])?;
        let (hours, _) = parse_field(&f("hour", 0, 23, &[]), rest[1])?;
        let (days_of_month, dom_restricted) = parse_field(&f("day-of-month", 1, 31, &[]), rest[2])?;
        let (months, _) = parse_field(&f("month", 1, 12, &MONTHS), rest[3])?;
        let (mut days_of_week, dow_restricted) =
            parse_field(&f("day-of-week", 0, 7, &WEEKDAYS), rest[4])?;
        if days_of_week & (1 << 7) != 0 {
            days_of_week = (days_of_week | 1) & !(1 << 7);
        }
        Ok(Schedule {
            seconds,
            minutes,
            hours,
            days_of_month,
            months,
            days_of_week,
            dom_restricted,
            dow_restricted,
        })
    }

    fn day_matches(&self, d: Date) -> bool {
        let dom = self.days_of_month & (1 << d.day()) != 0;
        let dow = self.days_of_week & (1 << d.weekday().to_sunday_zero_offset()) != 0;
        match (self.dom_restricted, self.dow_restricted) {
            (true, true) => dom || dow,
            (true, false) => dom,
            (false, true) => dow,
            (false, false) => true,
        }
    }

    /// The first run strictly after `after`, or `None` when the schedule never fires again
    /// within the next eight years (for example `0 0 31 2 *`).
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let utc = TimeZone::UTC;
        let start = after.to_zoned(utc.clone()).datetime();
        // Start at the next whole second strictly after `after`.
        let t = start.with().subsec_nanosecond(0).build().ok()?;
        let mut t = t.checked_add(jiff::Span::new().seconds(1)).ok()?;
        let limit = start.date().year().saturating_add(8);
        let bit = |set: u64, v: i8| set & (1u64 << u32::try_from(v).unwrap_or(63)) != 0;
        while t.date().year() <= limit {
            let d = t.date();
            if !bit(self.months, d.month()) {
                let first = d
                    .first_of_month()
                    .checked_add(jiff::Span::new().months(1))
                    .ok()?;
                t = first.to_datetime(jiff::civil::Time::midnight());
                continue;
            }
            if !self.day_matches(d) {
                t = d
                    .tomorrow()
                    .ok()?
                    .to_datetime(jiff::civil::Time::midnight());
                continue;
            }
            if !bit(self.hours, t.hour()) {
                t = next_unit(t, jiff::Unit::Hour)?;
                continue;
            }
            if !bit(self.minutes, t.minute()) {
                t = next_unit(t, jiff::Unit::Minute)?;
                continue;
            }
            if !bit(self.seconds, t.second()) {
                t = t.checked_add(jiff::Span::new().seconds(1)).ok()?;
                continue;
            }
            return t.to_zoned(utc).ok().map(|z| z.timestamp());
        }
        None
    }
}

/// The start of the next hour or minute after `t`.
fn next_unit(t: DateTime, unit: jiff::Unit) -> Option<DateTime> {
    let truncated = match unit {
        jiff::Unit::Hour => t.with().minute(0).second(0).build().ok()?,
        _ => t.with().second(0).build().ok()?,
    };
    let step = match unit {
        jiff::Unit::Hour => jiff::Span::new().hours(1),
        _ => jiff::Span::new().minutes(1),
    };
    truncated.checked_add(step).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(expr: &str, after: &str) -> String {
        Schedule::parse(expr)
            .unwrap()
            .next_after(ts(after))
            .unwrap()
            .to_string()
    }

    #[test]
    fn every_five_minutes_fires_on_the_next_multiple_of_five() {
        assert_eq!(
            next("*/5 * * * *", "2026-12-02T13:41:10Z"),
            "2026-12-02T13:45:00Z"
        );
        assert_eq!(
            next("*/5 * * * *", "2026-12-02T13:45:00Z"),
            "2026-12-02T13:50:00Z"
        );
    }

    #[test]
    fn a_seconds_field_gives_sub_minute_schedules() {
        assert_eq!(
            next("*/10 * * * * *", "2026-12-02T13:41:10Z"),
            "2026-12-02T13:41:20Z"
        );
        assert_eq!(
            next("*/10 * * * * *", "2026-12-02T13:41:10.5Z"),
            "2026-12-02T13:41:20Z"
        );
        assert_eq!(
            next("* * * * * *", "2026-12-02T13:41:10.5Z"),
            "2026-12-02T13:41:11Z"
        );
    }

    #[test]
    fn macros_expand_to_their_schedules() {
        assert_eq!(
            next("@hourly", "2026-12-02T13:41:10Z"),
            "2026-12-02T14:00:00Z"
        );
        assert_eq!(
            next("@daily", "2026-12-02T13:41:10Z"),
            "2026-12-03T00:00:00Z"
        );
        assert_eq!(
            next("@yearly", "2026-12-02T13:41:10Z"),
            "2027-01-01T00:00:00Z"
        );
        // 2026-12-06 is a Sunday.
        assert_eq!(
            next("@weekly", "2026-12-02T13:41:10Z"),
            "2026-12-06T00:00:00Z"
        );
    }

    #[test]
    fn names_ranges_and_lists_work_and_sunday_is_0_or_7() {
        assert_eq!(
            next("30 9 * * mon-fri", "2026-12-05T10:00:00Z"),
            "2026-12-07T09:30:00Z"
        );
        assert_eq!(
            next("0 0 * * 7", "2026-12-02T00:00:00Z"),
            "2026-12-06T00:00:00Z"
        );
        assert_eq!(
            next("0 12 1,15 * *", "2026-12-02T00:00:00Z"),
            "2026-12-15T12:00:00Z"
        );
        assert_eq!(
            next("0 0 1 jan *", "2026-12-02T00:00:00Z"),
            "2027-01-01T00:00:00Z"
        );
        assert_eq!(
            next("0 22-23/1 * * *", "2026-12-02T22:30:00Z"),
            "2026-12-02T23:00:00Z"
        );
        assert_eq!(
            next("15/20 * * * *", "2026-12-02T22:36:00Z"),
            "2026-12-02T22:55:00Z"
        );
    }

    #[test]
    fn day_of_month_or_day_of_week_when_both_are_restricted() {
        // The 13th or a Friday: 2026-12-04 is a Friday.
        assert_eq!(
            next("0 0 13 * fri", "2026-12-02T00:00:00Z"),
            "2026-12-04T00:00:00Z"
        );
    }

    #[test]
    fn leap_days_are_found_years_ahead_and_impossible_dates_never_fire() {
        assert_eq!(
            next("0 0 29 2 *", "2026-12-02T00:00:00Z"),
            "2028-02-29T00:00:00Z"
        );
        let never = Schedule::parse("0 0 31 2 *").unwrap();
        assert_eq!(never.next_after(ts("2026-12-02T00:00:00Z")), None);
    }

    #[test]
    fn bad_schedules_are_rejected_naming_the_field() {
        let err = |s: &str| Schedule::parse(s).unwrap_err().to_string();
        assert_eq!(err("61 * * * *"), "minute: 61 is outside 0-59");
        assert_eq!(err("* 24 * * *"), "hour: 24 is outside 0-23");
        assert_eq!(err("* * 0 * *"), "day-of-month: 0 is outside 1-31");
        assert!(err("* * * foo *").starts_with("month: \"foo\" is not a number or a name"));
        assert_eq!(
            err("*/0 * * * *"),
            "minute: step \"0\" must be a positive number"
        );
        assert_eq!(err("5-1 * * * *"), "minute: range 5-1 runs backwards");
        assert!(err("* * *").starts_with("expected 5 fields"));
        assert_eq!(err("@sometimes"), "unknown macro \"@sometimes\"");
    }
}
