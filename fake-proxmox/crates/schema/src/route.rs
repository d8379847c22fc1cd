//! Path routing over the schema's templates, the way PVE's `RESTHandler::find_handler` walks
//! its handler tree: literal segments first, then the level's `{param}` segment.

use std::collections::BTreeMap;

use super::RouteMatch;

/// The path parameters that take the rest of the path, slashes included: storage volumes
/// and firewall ipset entries (CIDRs), both mounted with `fragmentDelimiter => ''`.
const REST_PARAMS: &[&str] = &["volume", "cidr"];

#[derive(Default, Debug)]
struct Node {
    literal: BTreeMap<String, Node>,
    param: Option<(String, Box<Node>)>,
    /// Set when a template ends here: the template and its methods.
    leaf: Option<(String, Vec<String>)>,
}

#[derive(Debug)]
pub(crate) struct Router {
    root: Node,
}

impl Router {
    pub(crate) fn new<'a>(templates: impl Iterator<Item = (&'a str, Vec<&'a str>)>) -> Router {
        let mut root = Node::default();
        for (template, methods) in templates {
            let mut node = &mut root;
            for seg in template.split('/').filter(|s| !s.is_empty()) {
                node = match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    Some(name) => {
                        let slot = node
                            .param
                            .get_or_insert_with(|| (name.to_string(), Box::default()));
                        &mut slot.1
                    }
                    None => node.literal.entry(seg.to_string()).or_default(),
                };
            }
            node.leaf = Some((
                template.to_string(),
                methods.into_iter().map(str::to_string).collect(),
            ));
        }
        Router { root }
    }

    pub(crate) fn route(&self, method: &str, path: &str) -> RouteMatch<'_> {
        match self.find(path) {
            Some((template, methods, path_params)) if methods.iter().any(|m| m == method) => {
                RouteMatch::Found {
                    template,
                    path_params,
                }
            }
            _ => RouteMatch::NotImplemented,
        }
    }

    /// The template `path` resolves to, whatever the method, with its methods and captures.
    pub(crate) fn find(&self, path: &str) -> Option<(&str, &[String], BTreeMap<String, String>)> {
        let mut node = &self.root;
        let mut params = BTreeMap::new();
        let mut rest = path;
        loop {
            rest = rest.trim_start_matches('/');
            if rest.is_empty() {
                break;
            }
            let (seg, tail) = rest.split_once('/').unwrap_or((rest, ""));
            if let Some(next) = node.literal.get(seg) {
                node = next;
            } else if let Some((name, next)) = &node.param {
                node = next;
                if REST_PARAMS.contains(&name.as_str()) {
                    // pve-manager API2/Storage/Status.pm mounts the content handler (and
                    // pve-firewall its ipset entries) with `fragmentDelimiter => ''`
                    // because volume IDs and CIDRs contain '/': the whole rest of the path.
                    params.insert(name.clone(), rest.trim_end_matches('/').to_string());
                    break;
                }
                params.insert(name.clone(), seg.to_string());
            } else {
                return None;
            }
            rest = tail;
        }
        let (template, methods) = node.leaf.as_ref()?;
        Some((template.as_str(), methods.as_slice(), params))
    }
}
