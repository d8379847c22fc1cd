//! `/nodes/{node}/tasks...` and `/cluster/tasks`.

use serde_json::{Value, json};

use crate::route::{Ctx, Route, route};
use crate::wire::{PveError, Reply};
use crate::world::work::Task;

/// The `/api2/json` routes of tasks: `/nodes/{node}/tasks` (list), `…/tasks/{upid}` (read,
/// `DELETE` stops a running one), `…/tasks/{upid}/status` and `…/tasks/{upid}/log`, and
/// `GET /cluster/tasks`; collected into the router's table.
pub fn routes() -> Vec<Route> {
    vec![
        route("GET", "/nodes/{node}/tasks", list),
        route("GET", "/nodes/{node}/tasks/{upid}", index),
        route("DELETE", "/nodes/{node}/tasks/{upid}", stop),
        route("GET", "/nodes/{node}/tasks/{upid}/status", status),
        route("GET", "/nodes/{node}/tasks/{upid}/log", log),
        route("GET", "/cluster/tasks", cluster_tasks),
    ]
}

fn find<'a>(c: &'a Ctx) -> Result<&'a Task, PveError> {
    c.site.task_of_request(&c.req)
}

fn index(c: &mut Ctx) -> Result<Reply, PveError> {
    find(c)?;
    Ok(Reply::data(json!([{"name": "log"}, {"name": "status"}])))
}

fn status(c: &mut Ctx) -> Result<Reply, PveError> {
    Ok(Reply::data(find(c)?.status_json()))
}

fn log(c: &mut Ctx) -> Result<Reply, PveError> {
    let t = find(c)?;
    let lines = t.log_lines(c.req.now);
    let start = c.req.p.int("start").unwrap_or(0).max(0) as usize;
    let limit = c.req.p.int("limit").unwrap_or(50).max(0) as usize;
    let total = lines.len();
    let mut out: Vec<Value> = lines
        .iter()
        .enumerate()
        .skip(start)
        .take(if limit == 0 { usize::MAX } else { limit })
        .map(|(i, l)| json!({"n": i + 1, "t": l}))
        .collect();
    if total == 0 {
        out.push(json!({"n": 1, "t": "no content"}));
    }
    Ok(Reply::data(Value::Array(out)).with("total", json!(total.max(1))))
}

fn stop(c: &mut Ctx) -> Result<Reply, PveError> {
    c.site.stop_task(&c.req)?;
    Ok(Reply::null())
}

fn list(c: &mut Ctx) -> Result<Reply, PveError> {
    let node = c.node()?;
    let audit = c
        .site
        .access
        .has(&c.req.who, &format!("/nodes/{node}"), "Sys.Audit");
    let vmid = c.req.p.int("vmid");
    let typefilter = c.req.p.str("typefilter");
    let userfilter = c.req.p.str("userfilter");
    let errors = c.req.p.flag("errors");
    let source = c.req.p.str("source").unwrap_or_else(|| "archive".into());
    let since = c.req.p.int("since");
    let until = c.req.p.int("until");
    let statusfilter: Option<Vec<String>> = c.req.p.str("statusfilter").map(|s| {
        s.split([',', ';', ' '])
            .filter(|x| !x.is_empty())
            .map(str::to_string)
            .collect()
    });
    let me = c.req.who.task_user();
    let mut tasks: Vec<&Task> = c
        .site
        .tasks
        .iter()
        .filter(|t| t.node == node)
        .filter(|t| audit || t.user == me)
        .filter(|t| match source.as_str() {
            "active" => t.running(),
            "archive" => !t.running(),
            _ => true,
        })
        .filter(|t| vmid.is_none_or(|v| t.id == v.to_string()))
        .filter(|t| typefilter.as_ref().is_none_or(|f| &t.ttype == f))
        .filter(|t| {
            userfilter
                .as_ref()
                .is_none_or(|f| t.user.contains(f.as_str()))
        })
        .filter(|t| !errors || t.exitstatus.as_ref().is_some_and(|e| e != "OK"))
        .filter(|t| since.is_none_or(|s| t.starttime as i64 >= s))
        .filter(|t| until.is_none_or(|u| t.starttime as i64 <= u))
        .filter(|t| {
            statusfilter.as_ref().is_none_or(|f| {
                let st = match &t.exitstatus {
                    None => "running",
                    Some(e) if e == "OK" => "ok",
                    Some(e) if e.starts_with("WARNINGS") => "warning",
                    Some(_) => "error",
                };
                f.iter().any(|x| x == st)
            })
        })
        .collect();
    tasks.sort_by(|a, b| b.start.total_cmp(&a.start));
    let total = tasks.len();
    let start = c.req.p.int("start").unwrap_or(0).max(0) as usize;
    let limit = c.req.p.int("limit").unwrap_or(50).max(0) as usize;
    let data: Vec<Value> = tasks
        .iter()
        .skip(start)
        .take(limit)
        .map(|t| t.list_json())
        .collect();
    Ok(Reply::data(Value::Array(data)).with("total", json!(total)))
}

fn cluster_tasks(c: &mut Ctx) -> Result<Reply, PveError> {
    let me = c.req.who.task_user();
    let mut tasks: Vec<&Task> = c
        .site
        .tasks
        .iter()
        .filter(|t| {
            t.user == me
                || c.site
                    .access
                    .has(&c.req.who, &format!("/nodes/{}", t.node), "Sys.Audit")
        })
        .collect();
    tasks.sort_by(|a, b| b.start.total_cmp(&a.start));
    let data: Vec<Value> = tasks.iter().take(1000).map(|t| t.list_json()).collect();
    Ok(Reply::data(Value::Array(data)))
}
