//! Configuration errors and warnings, each naming the file, the line when the YAML
//! parser knows it, and the field, so a person can go straight to the mistake.

/// A configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {}{}{reason}", file, line.map(|l| format!(":{l}")).unwrap_or_default(), resource.as_ref().map(|r| format!("{r}: ")).unwrap_or_default(), field.as_ref().map(|f| format!("field `{f}`: ")).unwrap_or_default())]
pub struct ConfigError {
    /// The file, as given.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// The resource, when the file holds several: `document 3 (BGPPeer tor-a)`.
    pub resource: Option<String>,
    /// Dotted field path (`fib.route_protocol`), when the problem is one field.
    pub field: Option<String>,
    /// What is wrong and what is allowed.
    pub reason: String,
}

impl ConfigError {
    /// An error about one field.
    pub fn field(file: &str, field: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.to_string(),
            line: None,
            resource: None,
            field: Some(field.to_string()),
            reason: reason.into(),
        }
    }
}

/// Something in the configuration that works but is probably not what was meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The file.
    pub file: String,
    /// The resource, when the file holds several.
    pub resource: Option<String>,
    /// Dotted field path.
    pub field: String,
    /// What tern does about it.
    pub message: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.file)?;
        if let Some(r) = &self.resource {
            write!(f, "{r}: ")?;
        }
        if !self.field.is_empty() {
            write!(f, "field `{}`: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}
