//! From text to typed resources: splitting multi-document YAML, reading each
//! document's kind, parsing its spec with line numbers, and listing the fields tern
//! ignores. `calicoctl get -o yaml` of several objects prints a `...List` with `items`;
//! those are unpacked here too.

use serde::de::DeserializeOwned;

use crate::error::{ConfigError, Warning};
use crate::model::{Header, Resource};

/// One resource document located in its origin.
#[derive(Debug, Clone)]
pub(crate) struct RawDoc {
    /// File path or etcd key.
    pub origin: String,
    /// 1-based document number within the origin (items of a List count on).
    pub index: usize,
    /// 1-based line where the document starts.
    pub line: u64,
    /// The document, as YAML text or (List items) as a value.
    pub body: Body,
    /// Kind and name.
    pub header: Header,
}

/// A document's content.
#[derive(Debug, Clone)]
pub(crate) enum Body {
    /// YAML text, parsed with line numbers.
    Text(String),
    /// An item of a List, already a value.
    Value(serde_json::Value),
}

impl RawDoc {
    /// `document 3 (BGPPeer tor-a)`, the context of every message about it.
    pub fn context(&self) -> String {
        let name = if self.header.metadata.name.is_empty() {
            "<no name>"
        } else {
            &self.header.metadata.name
        };
        let ns = &self.header.metadata.namespace;
        if ns.is_empty() {
            format!("document {} ({} {name})", self.index, self.header.kind)
        } else {
            format!("document {} ({} {ns}/{name})", self.index, self.header.kind)
        }
    }

    /// An error about a field of this document.
    pub fn error(&self, field: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.origin.clone(),
            line: Some(self.line + self.field_offset(field).unwrap_or(0)),
            resource: Some(self.context()),
            field: (!field.is_empty()).then(|| field.to_string()),
            reason: reason.into(),
        }
    }

    /// Lines from the document's start to the line where `field`'s last key is written,
    /// when that key appears exactly once in the document (otherwise the document's
    /// first line is the honest answer).
    fn field_offset(&self, field: &str) -> Option<u64> {
        let Body::Text(text) = &self.body else {
            return None;
        };
        let key = field.rsplit('.').next()?;
        let key = key.split('[').next()?;
        if key.is_empty() {
            return None;
        }
        // `get`, not indexing: `i` comes from `match_indices` and is in bounds, but a
        // line of the user's text is no place to rely on that.
        let is_key_at = |line: &str, i: usize| {
            let before_ok = line.get(..i).is_some_and(|before| {
                before
                    .chars()
                    .next_back()
                    .is_none_or(|c| c == ' ' || c == '{' || c == ',' || c == '-')
            });
            let after = i.checked_add(key.len()).and_then(|end| line.get(end..));
            before_ok && after.is_some_and(|after| after.starts_with(':'))
        };
        let mut hits = text.lines().enumerate().filter(|(_, line)| {
            let line = line.split(" #").next().unwrap_or(line);
            line.match_indices(key).any(|(i, _)| is_key_at(line, i))
        });
        let (n, _) = hits.next()?;
        if hits.next().is_some() {
            return None;
        }
        u64::try_from(n).ok()
    }

    /// A warning about a field of this document.
    pub fn warning(&self, field: &str, message: impl Into<String>) -> Warning {
        Warning {
            file: self.origin.clone(),
            resource: Some(self.context()),
            field: field.to_string(),
            message: message.into(),
        }
    }

    /// Parses the document as `Resource<S>`, warning about each field tern ignores
    /// (outside `metadata` and `status`, which calicoctl output always carries).
    pub fn parse<S: DeserializeOwned>(
        &self,
        warnings: &mut Vec<Warning>,
    ) -> Result<Resource<S>, ConfigError> {
        let value = match &self.body {
            Body::Text(text) => {
                // First pass for the error, which carries the line; the second, over a
                // value, finds the ignored fields.
                serde_saphyr::from_str::<Resource<S>>(text).map_err(|e| ConfigError {
                    file: self.origin.clone(),
                    line: Some(self.line + e.location().map(|l| l.line()).unwrap_or(1) - 1),
                    resource: Some(self.context()),
                    field: None,
                    reason: parser_message(&e.to_string()),
                })?;
                serde_saphyr::from_str::<serde_json::Value>(text)
                    .map_err(|e| self.error("", parser_message(&e.to_string())))?
            }
            Body::Value(v) => v.clone(),
        };
        let mut ignored = Vec::new();
        let parsed: Resource<S> = serde_ignored::deserialize(value, |path| {
            let path = path.to_string();
            if !(path.starts_with("metadata") || path.starts_with("status")) {
                ignored.push(path);
            }
        })
        .map_err(|e| self.error("", e.to_string()))?;
        for path in ignored {
            warnings.push(self.warning(&path, "not used by tern; ignored"));
        }
        Ok(parsed)
    }
}

impl RawDoc {
    /// Parses a whole Kubernetes object (`Secret`, `Service`, `EndpointSlice`) as `T`,
    /// whose fields must all have defaults. Unlike [`RawDoc::parse`] nothing is warned
    /// about: the API server returns many fields tern has no use for, and none of them
    /// is a user's mistake. A shape error names the field (see [`failing_field`]).
    pub fn parse_kubernetes<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        let value = match &self.body {
            Body::Text(text) => serde_saphyr::from_str::<serde_json::Value>(text)
                .map_err(|e| self.error("", parser_message(&e.to_string())))?,
            Body::Value(v) => v.clone(),
        };
        serde_json::from_value::<T>(value.clone()).map_err(|e| {
            // The search re-parses the object once per field tried: only for objects
            // of a sensible size (Kubernetes' own are a few kilobytes).
            let small = serde_json::to_vec(&value).is_ok_and(|v| v.len() <= SEARCH_BYTES);
            let field = if small {
                failing_field::<T>(&value)
            } else {
                String::new()
            };
            self.error(&field, e.to_string())
        })
    }
}

/// The largest object whose failing field is searched for.
const SEARCH_BYTES: usize = 256 * 1024;
/// The most fields tried while searching.
const SEARCH_TRIALS: usize = 512;

/// The innermost field of `root` whose removal lets it parse as `T`: the field the
/// parser's error is about. serde's own errors say what is wrong but not where, and
/// with every field optional, taking one away is always valid.
fn failing_field<T: DeserializeOwned>(root: &serde_json::Value) -> String {
    use serde_json::Value;
    enum Step {
        Key(String),
        Index(usize),
    }
    let mut pointer = String::new();
    let mut field = String::new();
    let mut budget = SEARCH_TRIALS;
    'descend: loop {
        let steps: Vec<Step> = match root.pointer(&pointer) {
            Some(Value::Object(m)) => m.keys().cloned().map(Step::Key).collect(),
            Some(Value::Array(a)) => (0..a.len()).map(Step::Index).collect(),
            _ => break,
        };
        for step in steps {
            if budget == 0 {
                break 'descend;
            }
            budget -= 1;
            let mut trial = root.clone();
            let removed = match (trial.pointer_mut(&pointer), &step) {
                (Some(Value::Object(m)), Step::Key(k)) => m.remove(k).is_some(),
                (Some(Value::Array(a)), Step::Index(i)) if *i < a.len() => {
                    a.remove(*i);
                    true
                }
                _ => false,
            };
            if removed && serde_json::from_value::<T>(trial).is_ok() {
                match step {
                    Step::Key(k) => {
                        pointer = format!("{pointer}/{}", k.replace('~', "~0").replace('/', "~1"));
                        if !field.is_empty() {
                            field.push('.');
                        }
                        field.push_str(&k);
                    }
                    Step::Index(i) => {
                        pointer = format!("{pointer}/{i}");
                        field.push_str(&format!("[{i}]"));
                    }
                }
                continue 'descend;
            }
        }
        break;
    }
    field
}

/// Splits `text` into documents, reads each one's kind and name, and unpacks Lists.
/// Empty documents (only comments) are skipped.
pub(crate) fn documents(origin: &str, text: &str) -> Result<Vec<RawDoc>, ConfigError> {
    let mut out = Vec::new();
    for (line, doc) in split(text) {
        if doc
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            continue;
        }
        let index = out.len() + 1;
        // A datastore's JSON object (etcd values, Kubernetes objects): parsed once by
        // the JSON parser, several times faster than three YAML passes, which matters
        // when a snapshot holds thousands of them. Anything else, and JSON that does
        // not parse, takes the YAML path with its line-numbered errors.
        if doc.trim_start().starts_with('{') {
            if let Ok(value) = serde_json::from_str::<serde_json::Value>(&doc) {
                if value.is_object()
                    && !value
                        .get("kind")
                        .and_then(serde_json::Value::as_str)
                        .is_some_and(|k| k.ends_with("List"))
                {
                    let header: Header = serde_json::from_value(value.clone()).unwrap_or_default();
                    out.push(RawDoc {
                        origin: origin.to_string(),
                        index,
                        line,
                        body: Body::Value(value),
                        header,
                    });
                    continue;
                }
            }
        }
        let header: Header = serde_saphyr::from_str(&doc).map_err(|e| ConfigError {
            file: origin.to_string(),
            line: Some(line + e.location().map(|l| l.line()).unwrap_or(1) - 1),
            resource: Some(format!("document {index}")),
            field: None,
            reason: parser_message(&e.to_string()),
        })?;
        if header.kind.ends_with("List") {
            let list: serde_json::Value =
                serde_saphyr::from_str(&doc).map_err(|e| ConfigError {
                    file: origin.to_string(),
                    line: Some(line),
                    resource: Some(format!("document {index} ({})", header.kind)),
                    field: None,
                    reason: parser_message(&e.to_string()),
                })?;
            let items = list
                .get("items")
                .and_then(|i| i.as_array())
                .cloned()
                .unwrap_or_default();
            for item in items {
                let header: Header = serde_json::from_value(item.clone()).unwrap_or_default();
                out.push(RawDoc {
                    origin: origin.to_string(),
                    index: out.len() + 1,
                    line,
                    body: Body::Value(item),
                    header,
                });
            }
            continue;
        }
        out.push(RawDoc {
            origin: origin.to_string(),
            index,
            line,
            body: Body::Text(doc),
            header,
        });
    }
    Ok(out)
}

/// Splits at `---` lines, returning each document with its 1-based first line.
fn split(text: &str) -> Vec<(u64, String)> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1u64;
    for (n, l) in text.lines().enumerate() {
        let lineno = n as u64 + 1;
        let trimmed = l.trim_end();
        if trimmed == "---" || trimmed.starts_with("--- ") {
            docs.push((start, std::mem::take(&mut current)));
            start = lineno + 1;
            // `--- key: value` starts a document on the marker line itself.
            if let Some(rest) = trimmed.strip_prefix("--- ") {
                current.push_str(rest);
                current.push('\n');
                start = lineno;
            }
            continue;
        }
        if trimmed == "..." {
            continue;
        }
        current.push_str(l);
        current.push('\n');
    }
    docs.push((start, current));
    docs
}

/// The parser's message without its "error: line N column M:" prefix (the line is
/// reported separately) and without the source snippet that follows.
pub(crate) fn parser_message(s: &str) -> String {
    let msg = s.lines().next().unwrap_or_default();
    let msg = msg.strip_prefix("error: ").unwrap_or(msg);
    match msg
        .strip_prefix("line ")
        .and_then(|rest| rest.split_once(": "))
    {
        Some((_, text)) => text.to_string(),
        None => msg.to_string(),
    }
}
