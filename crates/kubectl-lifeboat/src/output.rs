//! `-o table|json|yaml`: every read command prints either a table for people or the objects
//! themselves for scripts.

use serde::Serialize;

use crate::Error;

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns for people.
    #[default]
    Table,
    /// The objects as JSON.
    Json,
    /// The objects as YAML.
    Yaml,
}

/// Renders `value` as JSON or YAML, or calls `table` for the human form.
pub fn render<T: Serialize>(
    format: Format,
    value: &T,
    table: impl FnOnce() -> String,
) -> Result<String, Error> {
    match format {
        Format::Table => Ok(table()),
        Format::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| Error::Render(e.to_string())),
        Format::Yaml => serde_yaml::to_string(value).map_err(|e| Error::Render(e.to_string())),
    }
}

/// A table in the plain style kubectl uses: no borders, a header row, columns padded.
pub fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::NOTHING)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
        .set_header(header.iter().map(|h| h.to_string()));
    for r in rows {
        t.add_row(r);
    }
    // The preset pads every cell by one space on each side; kubectl's tables start at column 0.
    t.lines()
        .map(|l| l.strip_prefix(' ').unwrap_or(&l).trim_end().to_owned() + "\n")
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Row {
        name: &'static str,
        size: u64,
    }

    #[test]
    fn json_is_the_value_itself() {
        let out = render(
            Format::Json,
            &Row {
                name: "b1",
                size: 3,
            },
            || unreachable!(),
        )
        .expect("json");
        let v: serde_json::Value = serde_json::from_str(&out).expect("parses back");
        assert_eq!(v, serde_json::json!({"name": "b1", "size": 3}));
    }

    #[test]
    fn yaml_is_the_value_itself() {
        let out = render(
            Format::Yaml,
            &Row {
                name: "b1",
                size: 3,
            },
            || unreachable!(),
        )
        .expect("yaml");
        let v: serde_yaml::Value = serde_yaml::from_str(&out).expect("parses back");
        assert_eq!(v["name"], serde_yaml::Value::from("b1"));
        assert_eq!(v["size"], serde_yaml::Value::from(3));
    }

    #[test]
    fn a_table_has_a_header_and_aligned_columns_from_column_zero() {
        let out = render(Format::Table, &(), || {
            table(
                &["NAME", "PHASE"],
                vec![
                    vec!["b1".into(), "Completed".into()],
                    vec!["a-longer-name".into(), "Failed".into()],
                ],
            )
        })
        .expect("table");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(lines[0].starts_with("NAME"), "{out}");
        let col = lines[0].find("PHASE").expect("header");
        assert_eq!(lines[1].find("Completed"), Some(col), "{out}");
        assert_eq!(lines[2].find("Failed"), Some(col), "{out}");
    }
}
