//! The committed schema facts, as deserialized from `fake-proxmox/crates/schema/data/pve-*.json`.

use std::collections::BTreeMap;

use regex::Regex;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub(crate) struct Facts {
    pub paths: BTreeMap<String, BTreeMap<String, MethodInfo>>,
}

/// One API method: its flags and its parameters.
#[derive(Debug, Clone, Deserialize)]
pub struct MethodInfo {
    /// `allowtoken`: absent means allowed (PVE's default is 1).
    #[serde(default)]
    pub allowtoken: Option<bool>,
    /// `protected => 1` in PVE: the method runs in the privileged daemon (`pvedaemon`, as
    /// root) rather than in `pveproxy`; absent means not protected. Kept as a fact; the fake
    /// answers both alike.
    #[serde(default)]
    pub protected: Option<bool>,
    /// The parameter naming the node the call is proxied to (`node` on most routes).
    #[serde(default)]
    pub proxyto: Option<String>,
    /// PVE's permission check (`check` in prefix notation, or `user: all|world`).
    #[serde(default)]
    pub permissions: Option<serde_json::Value>,
    /// `additionalProperties` of the method's parameter object: when true, parameters the
    /// schema does not list are passed through unchecked; when false (the default) each one
    /// is refused with PVE's `property is not defined in schema and the schema does not
    /// allow additional properties`.
    #[serde(rename = "additionalProperties", default)]
    pub additional_properties: bool,
    /// Parameters by name; indexed options appear once, e.g. `net[n]`.
    pub parameters: BTreeMap<String, Prop>,
    /// `net[n]` → ("net", 0..=31), filled by [`Facts::prepare`].
    #[serde(skip)]
    pub(crate) indexed: Vec<(String, u32, String)>,
}

impl MethodInfo {
    /// Whether an API token may call this method.
    pub fn allows_token(&self) -> bool {
        self.allowtoken.unwrap_or(true)
    }

    /// The definition for a concrete parameter name: `net0` finds `net[n]` when 0 is in range.
    pub fn param(&self, name: &str) -> Option<&Prop> {
        if let Some(p) = self.parameters.get(name) {
            return Some(p);
        }
        let (prefix, index) = split_index(name)?;
        self.indexed
            .iter()
            .find(|(p, max, _)| p == prefix && index <= *max)
            .and_then(|(_, _, key)| self.parameters.get(key))
    }
}

/// `scsi12` → ("scsi", 12); no leading zeros except `0` itself (PVE's keys are `net0`, never
/// `net00`).
pub(crate) fn split_index(name: &str) -> Option<(&str, u32)> {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 || digits == name.len() {
        return None;
    }
    let (prefix, num) = name.split_at(name.len() - digits);
    if num.len() > 1 && num.starts_with('0') {
        return None;
    }
    Some((prefix, num.parse().ok()?))
}

/// Highest index of each indexed option (qemu-server `QemuServer.pm` `$MAX_NETS` etc.,
/// `QemuServer/Drive.pm` `$MAX_SCSI_DISKS` etc.; the ranges are in the schema's `_meta`).
pub(crate) fn max_index(prefix: &str) -> Option<u32> {
    Some(match prefix {
        "net" | "ipconfig" => 31,
        "scsi" => 30,
        "virtio" => 15,
        "sata" => 5,
        "ide" => 3,
        "unused" => 255,
        "serial" => 3,
        "parallel" => 2,
        "hostpci" => 15,
        "usb" => 13,
        "numa" => 7,
        "virtiofs" => 9,
        "mp" => 255,
        _ => return None,
    })
}

/// A parameter or property-string sub-property definition.
#[derive(Debug, Clone, Deserialize)]
pub struct Prop {
    /// The JSON-schema `type`: `string`, `integer`, `number`, `boolean`, `array`, `object`
    /// or `null`; `None` when the schema gives none (then the value is not type-checked).
    #[serde(rename = "type", default)]
    pub ty: Option<String>,
    /// The value's `format`, checked after the type: a named format or an inline
    /// property-string definition.
    #[serde(default)]
    pub format: Option<PropFormat>,
    /// Whether the parameter may be left out; a required one that is missing gets PVE's
    /// `property is missing and it is not optional`.
    #[serde(default)]
    pub optional: bool,
    /// The default PVE documents for it. Informational: the checks never fill it in (PVE's
    /// handlers apply defaults, not its schema check).
    #[serde(default)]
    pub default: Option<serde_json::Value>,
    /// The allowed values, when the schema lists them (`enum`); any other value is refused
    /// with PVE's `value '…' does not have a value in the enumeration '…'`.
    #[serde(rename = "enum", default)]
    pub enumeration: Option<Vec<String>>,
    /// Inclusive lower bound of an `integer` or `number`.
    #[serde(default)]
    pub minimum: Option<f64>,
    /// Inclusive upper bound of an `integer` or `number`.
    #[serde(default)]
    pub maximum: Option<f64>,
    /// Fewest characters a `string` may have.
    #[serde(rename = "minLength", default)]
    pub min_length: Option<usize>,
    /// Most characters a `string` may have.
    #[serde(rename = "maxLength", default)]
    pub max_length: Option<usize>,
    /// The Perl pattern as the schema has it (matched anchored: `^pattern$`).
    #[serde(default)]
    pub pattern: Option<String>,
    /// Another parameter (or sub-property) that must be present, non-null, whenever this one
    /// is; else PVE's `missing property - '…' requires this property` on the other one.
    #[serde(default)]
    pub requires: Option<String>,
    /// In a property string: this key is another name for the key given here (e.g. an old
    /// spelling); its value is checked against that key's definition. An aliased key is
    /// never required.
    #[serde(default)]
    pub alias: Option<String>,
    /// With [`alias`](Self::alias): the key under which the alias's own name is recorded in
    /// the parsed result (a second use of it is refused: `key alias '…' is already defined`).
    #[serde(rename = "keyAlias", default)]
    pub key_alias: Option<String>,
    /// In a property string: the key a bare value without `key=` belongs to (e.g. `file` in
    /// `local-lvm:vm-100-disk-0,size=8G`); at most one bare value is accepted.
    #[serde(default)]
    pub default_key: bool,
    /// For an `array`: the definition each element is checked against.
    #[serde(default)]
    pub items: Option<Box<Prop>>,
    /// `pattern` compiled on first use: a 9.1 site knows all 649 methods of the API and a run
    /// validates few of them, so compiling every pattern up front cost memory for nothing.
    #[serde(skip)]
    regex: std::sync::OnceLock<Option<Regex>>,
}

/// A `format`: a registered format name, or an inline property-string definition.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PropFormat {
    /// A format PVE registers in code by name (`pve-vmid`, `pve-volume-id`, `mac-addr`, …),
    /// checked by the `formats` module; a `-list` suffix means a list of such values. Names
    /// this crate does not know are accepted unchecked.
    Named(String),
    /// A property string (`key=value,key=value`): its sub-properties by key, each checked
    /// like a parameter.
    Hash(BTreeMap<String, Prop>),
}

impl Facts {
    pub(crate) fn remove_subproperty(&mut self, key: &str) {
        for methods in self.paths.values_mut() {
            for m in methods.values_mut() {
                for p in m.parameters.values_mut() {
                    if let Some(PropFormat::Hash(h)) = &mut p.format {
                        h.remove(key);
                    }
                }
            }
        }
    }

    pub(crate) fn prepare(&mut self) {
        for methods in self.paths.values_mut() {
            for m in methods.values_mut() {
                let mut indexed = Vec::new();
                for name in m.parameters.keys() {
                    if let Some(prefix) = name.strip_suffix("[n]")
                        && let Some(max) = max_index(prefix)
                    {
                        indexed.push((prefix.to_string(), max, name.clone()));
                    }
                }
                m.indexed = indexed;
            }
        }
    }
}

impl Prop {
    /// The compiled `pattern` (`None` without one, or when it does not compile).
    pub(crate) fn regex(&self) -> Option<&Regex> {
        self.regex
            .get_or_init(|| self.pattern.as_deref().and_then(compiled_pattern))
            .as_ref()
    }

    /// Whether the parameter may be left out of a request (its `optional` flag).
    pub fn is_optional(&self) -> bool {
        self.optional
    }
}

/// One compiled regex per distinct pattern (a `Regex` clone shares its program): the schema
/// repeats a few dozen patterns over hundreds of parameters.
fn compiled_pattern(pat: &str) -> Option<Regex> {
    static CACHE: std::sync::LazyLock<
        std::sync::Mutex<std::collections::HashMap<String, Option<Regex>>>,
    > = std::sync::LazyLock::new(Default::default);
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    cache
        .entry(pat.to_string())
        .or_insert_with(|| compile_perl_pattern(pat))
        .clone()
}

/// Translates a Perl pattern from the schema into an anchored Rust regex, the way
/// JSONSchema.pm applies it: `$value =~ m/^$pattern$/`. Perl's `$` also matches before a
/// final newline.
pub(crate) fn compile_perl_pattern(pat: &str) -> Option<Regex> {
    // `(?^FLAGS:…)` (a stringified `qr//`) starts from the default flags and sets FLAGS; the
    // pattern around it always has the defaults, so plain `(?FLAGS:…)` means the same.
    let mut p = pat.replace("(?^:", "(?:").replace("(?^", "(?");
    // Perl 5.34+ reads `{,n}` as `{0,n}`; the regex crate needs the explicit 0.
    p = p.replace("{,", "{0,");
    p = perl_nul_escapes(&p);
    let anchored = format!("^(?:{p})\\n?\\z");
    // A Unicode class repeated hundreds of times (`[\\w\\d\\s]{0,256}`, an SDN alias) is
    // larger than the regex crate compiles by default; its ASCII form is the same for every
    // ASCII value and costs a fraction of the memory.
    Regex::new(&anchored).ok().or_else(|| {
        regex::RegexBuilder::new(&anchored)
            .unicode(false)
            .build()
            .ok()
    })
}

/// Perl's `\0` (NUL) as the regex crate spells it, `\x00`; other escapes pass unchanged.
fn perl_nul_escapes(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    let mut chars = p.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('0') if !chars.peek().is_some_and(char::is_ascii_digit) => out.push_str("\\x00"),
            Some(next) => {
                out.push('\\');
                out.push(next);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn split_index_takes_trailing_decimal() {
        assert_eq!(split_index("net0"), Some(("net", 0)));
        assert_eq!(split_index("scsi30"), Some(("scsi", 30)));
        assert_eq!(split_index("net"), None);
        assert_eq!(split_index("net01"), None);
        assert_eq!(split_index("42"), None);
    }

    #[test]
    fn perl_patterns_translate() {
        let re = compile_perl_pattern("[A-Za-z0-9\\-_\\s]{,16}").unwrap();
        assert!(re.is_match("abc"));
        assert!(!re.is_match("abcdefghijklmnopq"));
        let re = compile_perl_pattern("(?^:\\d+(?:-\\d+)?(?:;\\d+(?:-\\d+)?)*)").unwrap();
        assert!(re.is_match("10;20-30"));
        assert!(!re.is_match("x10"));
        // `registered-tags` of /cluster/options: flags inside a stringified qr//.
        let re = compile_perl_pattern(
            "(?:(?^i:[a-z0-9_][a-z0-9_\\-\\+\\.]*);)*(?^i:[a-z0-9_][a-z0-9_\\-\\+\\.]*)",
        )
        .unwrap();
        assert!(re.is_match("Prod;db-1"));
        assert!(!re.is_match("prod;;db"));
        // `env` of a container: NUL-separated pairs, `\0` in Perl.
        let re = compile_perl_pattern("(?^:(?:\\w+=[^\\x00-\\x08\\x10-\\x1F\\x7F]*)(?:\\0\\w+=[^\\x00-\\x08\\x10-\\x1F\\x7F]*)*)").unwrap();
        assert!(re.is_match("A=1\0B=2"));
        assert!(!re.is_match("A=1\u{1}B=2"));
        assert_eq!(perl_nul_escapes("a\\\\0\\0\\01"), "a\\\\0\\x00\\01");
    }
}
