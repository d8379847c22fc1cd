//! How a refused value is reported: PVE's fixed messages and `add_error`'s joining rule, and
//! the shape of `check_prop`, which the property-string parser calls back for each sub-property.

use serde_json::Value;

use crate::ParamErrors;
use crate::facts::Prop;

/// `check_prop` as the parser of property strings calls it back (the checks recurse through
/// property strings, so the parser is handed the checker instead of importing it).
pub(crate) type CheckProp = fn(&Prop, &str, &Value, &mut ParamErrors) -> Option<Value>;

pub(crate) const MISSING: &str = "property is missing and it is not optional";
pub(crate) const UNKNOWN: &str =
    "property is not defined in schema and the schema does not allow additional properties";

/// `add_error`: a second message for the same path is joined with a literal `\n`
/// (JSONSchema.pm uses a single-quoted `'\n'`).
pub(crate) fn add_error(errors: &mut ParamErrors, path: &str, msg: impl Into<String>) {
    let msg = msg.into();
    let path = if path.is_empty() { "_root" } else { path };
    match errors.get_mut(path) {
        Some(prev) => {
            prev.push_str("\\n");
            prev.push_str(&msg);
        }
        None => {
            errors.insert(path.to_string(), msg);
        }
    }
}
