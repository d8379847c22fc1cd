//! Nodes as requests address them.

use crate::nodes::model::Node;
use crate::request::Request;
use crate::wire::PveError;
use crate::world::Site;

impl Site {
    /// The node `{node}` of the request's path.
    pub fn node_of_request(&self, req: &Request) -> Result<&Node, PveError> {
        let name = req.node()?;
        self.node(&name)
            .ok_or_else(|| PveError::die(format!("no such node '{name}'")))
    }
}
