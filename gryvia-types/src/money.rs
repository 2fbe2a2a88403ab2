//! Decimal amounts of money and other exact quantities.
//!
//! Money is never a float in Gryvia. Prices are decimal strings in the API (`"2.45"`) and
//! integer micro-units (millionths) in computation, so sums are exact.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::Error;

/// The pattern a [`Decimal`] must match: a non-negative number with at most six decimals.
pub const DECIMAL_PATTERN: &str = r"^(0|[1-9][0-9]{0,14})(\.[0-9]{1,6})?$";

/// Micro-units per whole unit.
pub const MICROS: i64 = 1_000_000;

/// A non-negative decimal amount with up to six fractional digits, stored as its text.
///
/// In the schema it is a string matching [`DECIMAL_PATTERN`]; [`Decimal::micros`] gives the
/// exact value in millionths for arithmetic.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Decimal(String);

impl Decimal {
    /// Parses and checks `text`.
    ///
    /// # Errors
    /// [`Error::Decimal`] when the text is not a non-negative decimal with at most six
    /// fractional digits.
    pub fn parse(text: &str) -> crate::Result<Self> {
        if text.starts_with('-') {
            return Err(Error::Decimal {
                value: text.to_owned(),
                reason: "must not be negative",
            });
        }
        parse_micros(text)?;
        Ok(Decimal(text.to_owned()))
    }

    /// Builds the canonical text of an amount in micro-units (trailing zeros trimmed).
    ///
    /// A negative amount (a deficit computed by a controller) renders with a leading `-`; such a
    /// value is for status and display, the schema of spec fields accepts only non-negative ones.
    pub fn from_micros(micros: i64) -> Self {
        let sign = if micros < 0 { "-" } else { "" };
        let abs = micros.unsigned_abs();
        let whole = abs / MICROS as u64;
        let frac = abs % MICROS as u64;
        if frac == 0 {
            return Decimal(format!("{sign}{whole}"));
        }
        let frac = format!("{frac:06}");
        Decimal(format!("{sign}{whole}.{}", frac.trim_end_matches('0')))
    }

    /// The amount in micro-units.
    ///
    /// # Errors
    /// [`Error::Decimal`] when the stored text is malformed (possible only for values that
    /// bypassed the schema).
    pub fn micros(&self) -> crate::Result<i64> {
        parse_micros(&self.0)
    }

    /// The text as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn parse_micros(text: &str) -> crate::Result<i64> {
    let err = |reason| Error::Decimal {
        value: text.to_owned(),
        reason,
    };
    let (neg, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, frac) = match body.split_once('.') {
        Some((w, f)) => (w, f),
        None => (body, ""),
    };
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err("expected digits before the decimal point"));
    }
    if body.contains('.') && frac.is_empty() {
        return Err(err("expected digits after the decimal point"));
    }
    if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err("at most six fractional digits are allowed"));
    }
    if whole.len() > 15 {
        return Err(err("amount too large"));
    }
    let whole: i64 = whole.parse().map_err(|_| err("amount too large"))?;
    let frac_micros: i64 = if frac.is_empty() {
        0
    } else {
        let padded = format!("{frac:0<6}");
        padded
            .parse()
            .map_err(|_| err("invalid fractional digits"))?
    };
    let value = whole * MICROS + frac_micros;
    Ok(if neg { -value } else { value })
}

impl JsonSchema for Decimal {
    fn schema_name() -> Cow<'static, str> {
        "Decimal".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": DECIMAL_PATTERN,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decimals_parse_to_exact_micros() {
        assert_eq!(Decimal::parse("2.45").unwrap().micros().unwrap(), 2_450_000);
        assert_eq!(Decimal::parse("0").unwrap().micros().unwrap(), 0);
        assert_eq!(
            Decimal::parse("10.000001").unwrap().micros().unwrap(),
            10_000_001
        );
    }

    #[test]
    fn malformed_decimals_are_rejected_with_a_reason() {
        for bad in ["", "-1", ".5", "1.", "1.1234567", "abc", "1e3", "1,5"] {
            assert!(Decimal::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn micros_render_canonically() {
        assert_eq!(Decimal::from_micros(2_450_000).as_str(), "2.45");
        assert_eq!(Decimal::from_micros(3 * MICROS).as_str(), "3");
        assert_eq!(Decimal::from_micros(1).as_str(), "0.000001");
    }

    proptest! {
        #[test]
        fn from_micros_round_trips(m in 0i64..1_000_000_000_000_000) {
            let d = Decimal::from_micros(m);
            prop_assert_eq!(d.micros().unwrap(), m);
        }
    }
}
