//! Presentation: tables, and `-o json|yaml`.

use clap::ValueEnum;
use serde::Serialize;

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A table for people.
    Table,
    /// JSON (a list when several objects).
    Json,
    /// YAML (a multi-document stream when several objects).
    Yaml,
}

/// Prints objects as JSON or YAML.
pub fn print_objects<T: Serialize>(objects: &[T], output: Output) -> anyhow::Result<()> {
    match output {
        Output::Json => {
            let text = if objects.len() == 1 {
                serde_json::to_string_pretty(&objects[0])?
            } else {
                serde_json::to_string_pretty(objects)?
            };
            crate::print_out(&format!("{text}\n"))
        }
        Output::Yaml | Output::Table => {
            let mut out = String::new();
            for o in objects {
                out.push_str("---\n");
                out.push_str(&serde_saphyr::to_string(o)?);
            }
            crate::print_out(&out)
        }
    }
}

/// A plain aligned table.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// Renders the table.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(String::len).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(c.chars().count());
                }
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.header).chain(&self.rows) {
            let cells: Vec<String> = r
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{c:<w$}", w = widths.get(i).copied().unwrap_or(0)))
                .collect();
            out.push_str(cells.join("   ").trim_end());
            out.push('\n');
        }
        out
    }

    /// Prints the table.
    pub fn print(&self) {
        let _ = crate::print_out(&self.render());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let mut t = Table::new(&["NAME", "GPUS"]);
        t.row(vec!["ml-research".into(), "128".into()]);
        t.row(vec!["a".into(), "1".into()]);
        assert_eq!(
            t.render(),
            "NAME          GPUS\nml-research   128\na             1\n"
        );
    }
}
