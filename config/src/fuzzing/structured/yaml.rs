//! A block-YAML emitter for JSON values, so the cluster file the structured fuzzer
//! writes looks like `calicoctl get -o yaml` output (block mappings and sequences,
//! plain scalars) rather than JSON, which YAML would also read but through other
//! parser paths.

use serde_json::Value;

/// Appends `v` as block YAML indented by `indent`, as calicoctl prints: mappings and
/// sequences in block style, strings plain where YAML reads them back as the same
/// string, double-quoted (JSON escapes are YAML escapes) otherwise.
pub fn yaml(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                out.push_str(&pad);
                out.push_str(&scalar_text(k));
                out.push(':');
                nested(v, indent + 2, out);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for v in a {
                out.push_str(&pad);
                out.push('-');
                nested(v, indent + 2, out);
            }
        }
        _ => {
            out.push_str(&pad);
            out.push_str(&inline(v));
            out.push('\n');
        }
    }
}

/// After `key:` or `-`: a scalar on the same line, a collection on the next ones.
fn nested(v: &Value, indent: usize, out: &mut String) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            yaml(v, indent, out);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            yaml(v, indent, out);
        }
        _ => {
            out.push(' ');
            out.push_str(&inline(v));
            out.push('\n');
        }
    }
}

fn inline(v: &Value) -> String {
    match v {
        Value::String(s) => scalar_text(s),
        other => other.to_string(), // null, bools, numbers, [] and {} read the same in YAML
    }
}

/// `s` plain when it cannot be read as anything but that string, else quoted.
fn scalar_text(s: &str) -> String {
    let lower = s.to_ascii_lowercase();
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-./:*()".contains(c))
        && s.starts_with(|c: char| c.is_ascii_alphabetic() || c.is_ascii_digit())
        && !s.ends_with(':')
        && s.parse::<f64>().is_err()
        // 1:20 is a sexagesimal number in YAML 1.1; 2001:db8::1 is text to both.
        && (!s.contains(':') || s.contains(|c: char| c.is_ascii_alphabetic()))
        && !["0x", "0o", "0b"].iter().any(|p| lower.starts_with(p))
        && !["true", "false", "null", "yes", "no", "on", "off", "y", "n"].contains(&lower.as_str());
    if plain {
        s.to_string()
    } else {
        Value::from(s).to_string()
    }
}
