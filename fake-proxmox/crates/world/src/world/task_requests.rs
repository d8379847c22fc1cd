//! The task routes' decisions: which task a request names and whether the caller may see
//! it or stop it.

use crate::request::Request;
use crate::tasks::upid::Upid;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::Task;

impl Site {
    /// The task `{upid}` of `{node}`, if the caller started it or holds `Sys.Audit` on the
    /// node; PVE answers 400 on unparsable or unknown UPIDs.
    pub fn task_of_request(&self, req: &Request) -> Result<&Task, PveError> {
        let upid = req.p.req_str("upid")?;
        let node = req.node()?;
        let parsed = Upid::decode(&upid)
            .ok_or_else(|| PveError::param("upid", "unable to parse worker upid"))?;
        if parsed.node != node {
            return Err(PveError::param("upid", "no such task"));
        }
        let t = self
            .task(&upid)
            .ok_or_else(|| PveError::param("upid", "no such task"))?;
        let own = t.user == req.who.task_user()
            || t.user.split('!').next() == Some(req.who.userid.as_str());
        if !own {
            self.require(&req.who, &format!("/nodes/{node}"), "Sys.Audit")?;
        }
        Ok(t)
    }

    /// `DELETE …/tasks/{upid}`: the caller's own task, or any with `Sys.Modify` on the node.
    pub fn stop_task(&mut self, req: &Request) -> Result<(), PveError> {
        let t = self.task_of_request(req)?;
        let (upid, own) = (t.upid.clone(), t.user == req.who.task_user());
        let node = req.node()?;
        if !own {
            self.require(&req.who, &format!("/nodes/{node}"), "Sys.Modify")?;
        }
        self.kill_task(&upid, req.now);
        Ok(())
    }
}
