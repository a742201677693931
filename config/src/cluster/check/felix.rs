//! FelixConfiguration: tern reads only the `default` one's `interfacePrefix`, the
//! names Felix gives workload interfaces, so that borrowed workload addresses are
//! recognised on them. Every other Felix setting is Felix's business.

use super::fields::parse_or;
use crate::cluster::parse::RawDoc;
use crate::cluster::Cluster;
use crate::error::{ConfigError, Warning};
use crate::model;

/// Takes the `default` FelixConfiguration's interface prefixes into `c`; the
/// per-node ones (`node.<name>`) are not read.
pub(super) fn felix_configuration(
    d: &RawDoc,
    name: &str,
    c: &mut Cluster,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<Warning>,
) {
    let Some(r) = parse_or::<model::FelixConfigurationSpec>(d, warnings, errors) else {
        return;
    };
    let Some(list) = r.spec.interface_prefix else {
        return;
    };
    if name != "default" {
        warnings.push(d.warning(
            "spec.interfacePrefix",
            "tern reads the interface prefix of the `default` FelixConfiguration only; ignored",
        ));
        return;
    }
    match interface_prefixes(&list) {
        Ok(p) => c.interface_prefixes = p,
        Err(reason) => errors.push(d.error("spec.interfacePrefix", reason)),
    }
}

/// Felix's `interfacePrefix`: a comma-separated list of name prefixes.
pub(crate) fn interface_prefixes(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for p in list.split(',').map(str::trim) {
        if p.is_empty() || p.len() >= 16 || p.contains(['/', ' ', '*', '?']) {
            return Err(format!(
                "{list:?}: each comma-separated entry must be the start of an interface name (1-15 characters, no spaces, slashes or wildcards), as in cali or cali,tap"
            ));
        }
        out.push(p.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;

    #[test]
    fn prefixes_are_a_comma_separated_list() {
        assert_eq!(interface_prefixes("cali").unwrap(), ["cali"]);
        assert_eq!(interface_prefixes("cali, tap").unwrap(), ["cali", "tap"]);
        for bad in ["", "cali,", "ca*", "a/b"] {
            let e = interface_prefixes(bad).unwrap_err();
            assert!(e.contains("comma-separated"), "{bad}: {e}");
        }
    }
}
