//! The appliance index (`GET /nodes/{node}/aplinfo`) and the download of one of its templates
//! (`POST /nodes/{node}/aplinfo`), as pve-manager's `PVE/API2/Nodes.pm` (`aplinfo`,
//! `apl_download`) answers them. The index is the scenario's (`appliances:` per site), by
//! default a few of the templates PVE offers; nothing is fetched from the URL the index names:
//! the download is a `download` task whose time comes from the template's size and the site's
//! download speed, and the template then sits on the storage.

use serde_json::Value;

use super::appliance::Appliance;
use crate::request::Request;
use crate::storage::model::Content;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

impl Site {
    /// `GET /nodes/{node}/aplinfo`: every appliance of the index (any user may list it).
    pub fn aplinfo(&self, req: &Request) -> Result<Value, PveError> {
        let node = req.node()?;
        self.node(&node)
            .ok_or_else(|| PveError::die(format!("no such node '{node}'")))?;
        Ok(Value::Array(
            self.appliances.iter().map(Appliance::json).collect(),
        ))
    }

    /// `POST /nodes/{node}/aplinfo`: `Datastore.AllocateTemplate` on the storage, a template
    /// of the index, an enabled storage that holds templates; then the `download` task.
    pub fn apl_download(&mut self, req: &Request) -> Result<String, PveError> {
        let node = req.node()?;
        let sid = req.p.req_str("storage")?;
        self.require(
            &req.who,
            &format!("/storage/{sid}"),
            "Datastore.AllocateTemplate",
        )?;
        let template = req.p.req_str("template")?;
        let app = self
            .appliances
            .iter()
            .find(|a| a.template == template)
            .cloned()
            .ok_or_else(|| PveError::param("template", "no such template"))?;
        let s = self.storage_of_request(req)?;
        if !s.supports(Content::Vztmpl) {
            return Err(PveError::die(format!(
                "storage '{sid}' does not support templates"
            )));
        }
        let volname = format!("vztmpl/{template}");
        let path = s.file_path(&volname);
        let speed = self.download_mib_s.min(s.speed_mib_s) * 1024.0 * 1024.0;
        let avail = s.avail();
        let size = app.size_bytes;
        let work = Work::Download {
            storage: sid,
            volname,
            size,
            file: app.file.clone(),
        };
        let mut plan = TaskPlan::new("download", template, &node, &req.task_user(), work);
        let url = app.location();
        let secs = size as f64 / speed;
        super::download::lay_out(&mut plan, &url, &path, size, secs, avail, req.now);
        if plan.planned_error.is_none() {
            plan.line(
                plan.duration,
                "calculating checksum...OK, checksum verified",
            );
            plan.duration += 0.1;
        }
        Ok(self.start_task(plan, req.now))
    }
}
